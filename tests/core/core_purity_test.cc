// The protocol core stays sans-I/O: no clock, thread, socket, file, YAML or GPU header in core/.
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <gtest/gtest.h>

namespace {

TEST(CorePurity, NoHostHeadersInCore) {
  const std::regex forbidden(
      R"(#\s*include\s*<(thread|chrono|mutex|condition_variable|future|atomic|fstream|filesystem|)"
      R"(iostream|cstdio|ctime|random|sys/[a-z_]+\.h|netinet/[a-z_.]+|arpa/[a-z_.]+|unistd\.h|)"
      R"(asio[a-z_./]*|yaml-cpp/[a-z_./]+|cuda[a-z_.]*|cudnn[a-z_.]*|cublas[a-z_.]*|dnnl[a-z_.]*|)"
      R"(oneapi/[a-z_./]+|openssl/[a-z_.]+|spdlog/[a-z_./]+)>)");
  int files = 0;
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(std::string(POSEIDON_SOURCE_DIR) + "/core")) {
    const auto ext = e.path().extension();
    if (ext != ".h" && ext != ".cc") continue;
    ++files;
    std::ifstream in(e.path());
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      // types.h may print a failed invariant before aborting; that is not host I/O.
      if (e.path().filename() == "types.h" && line.find("<iostream>") != std::string::npos) {
        continue;
      }
      EXPECT_FALSE(std::regex_search(line, forbidden))
          << e.path().string() << ":" << n << ": core/ must not include host headers: " << line;
    }
  }
  EXPECT_GT(files, 10) << "found too few core files; is POSEIDON_SOURCE_DIR right?";
}

}  // namespace
