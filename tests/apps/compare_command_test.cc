// `poseidon compare` as a user runs it (the binary): bad input is one "poseidon: ..." line and
// exit code 2; the same command prints the same bytes, -o writes them; --plot draws PNG and SVG
// through analysis/plot_compare.py and leaves stdout to the table.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;

struct ShellRun {
  int code = -1;
  std::string out;
};

ShellRun Shell(const std::string& args, const std::string& redirect = "2>&1") {
  const std::string cmd = std::string(POSEIDON_BINARY) + " " + args + " " + redirect;
  FILE* p = popen(cmd.c_str(), "r");
  ShellRun r;
  if (p == nullptr) return r;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const std::string kDemo = std::string(POSEIDON_SOURCE_DIR) + "/scenarios/demo.yaml";
const std::string kSmall = "--set cluster.machines=4 --set iterations=4";

class CompareCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("poseidon-compare-test-" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

void ExpectOneLine(const ShellRun& r, const std::string& want) {
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out.rfind("poseidon: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(want), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST_F(CompareCommand, BadInputIsOneLocatedLine) {
  ExpectOneLine(Shell("compare " + (dir_ / "nope.yaml").string()),
                (dir_ / "nope.yaml").string() + ": error: cannot read file");
  ExpectOneLine(Shell("compare " + kDemo + " --set cluster.machines"),
                "--set cluster.machines: error: expected KEY=VALUE");
  ExpectOneLine(Shell("compare " + kDemo + " --set protocol.bogus=1"),
                "demo.yaml: error: unknown key 'bogus' in protocol");
  ExpectOneLine(Shell("compare " + kDemo + " --set cluster.machines=0"),
                "demo.yaml:1:1: error: 'machines' must be a positive integer, got 0");
}

TEST_F(CompareCommand, SameCommandSameBytesAndOutputFile) {
  for (const std::string format : {"text", "csv", "json"}) {
    SCOPED_TRACE(format);
    const std::string args = "compare " + kDemo + " " + kSmall + " --format " + format;
    const ShellRun a = Shell(args + " -j 1", "2>/dev/null");
    const ShellRun b = Shell(args + " -j 3", "2>/dev/null");
    ASSERT_EQ(a.code, 0) << a.out;
    EXPECT_EQ(a.out, b.out);
    const fs::path file = dir_ / ("out." + format);
    const ShellRun c = Shell(args + " -o " + file.string());
    ASSERT_EQ(c.code, 0) << c.out;
    EXPECT_EQ(c.out, "");
    EXPECT_EQ(Read(file), a.out);
  }
}

TEST_F(CompareCommand, PlotWritesPngAndSvgAndLeavesStdoutToTheTable) {
  if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 has no matplotlib";
  }
  const std::string args = "compare " + kDemo + " " + kSmall;
  const ShellRun table = Shell(args, "2>/dev/null");
  const ShellRun plotted = Shell(args + " --plot " + (dir_ / "cmp.png").string(), "2>/dev/null");
  ASSERT_EQ(plotted.code, 0) << plotted.out;
  EXPECT_EQ(plotted.out, table.out);
  const std::string png = Read(dir_ / "cmp.png");
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_NE(Read(dir_ / "cmp.svg").find("<svg"), std::string::npos);
  // A folder that does not exist: the script's one line, then ours; exit code 2.
  const ShellRun bad =
      Shell(args + " --plot " + (dir_ / "no" / "cmp.png").string() + " 2>&1 >/dev/null", "");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("plot_compare.py: error: cannot write"), std::string::npos) << bad.out;
}

}  // namespace
