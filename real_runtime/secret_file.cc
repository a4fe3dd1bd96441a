#include "real_runtime/secret_file.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace poseidon::rt {

std::string LoadSecretFile(const std::string& path) {
  const std::string fix = fmt::format(
      "; create it with `head -c 32 /dev/urandom > {0} && chmod 600 {0}` and copy the same file "
      "to every node of the job",
      path);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw std::runtime_error(
        fmt::format("secret file {}: {}{}", path, std::strerror(errno), fix));
  }
  if (!S_ISREG(st.st_mode)) {
    throw std::runtime_error(fmt::format("secret file {}: not a regular file{}", path, fix));
  }
  if ((st.st_mode & 077) != 0) {
    throw std::runtime_error(fmt::format(
        "secret file {}: mode {:04o} gives group or others access; run `chmod 600 {}`", path,
        st.st_mode & 07777, path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error(fmt::format("secret file {}: cannot be opened for reading{}", path,
                                         fix));
  }
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (s.empty()) {
    throw std::runtime_error(fmt::format("secret file {}: is empty{}", path, fix));
  }
  return s;
}

}  // namespace poseidon::rt
