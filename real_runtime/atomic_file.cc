#include "real_runtime/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace poseidon::rt {

bool StorageError::IsPermanent(int e) {
  return e == ENOSPC || e == EDQUOT || e == EROFS || e == EACCES || e == EPERM;
}

void WriteFileAtomically(const std::string& path, const std::string& bytes,
                         const std::function<void()>& before_rename) {
  const std::string tmp = path + ".tmp";
  auto fail = [&](const std::string& what) {
    const int e = errno;
    std::string msg = fmt::format("{}: error: {}: {}", tmp, what, std::strerror(e));
    if (StorageError::IsPermanent(e)) {
      msg += fmt::format(
          "; {} the folder {} (or give the job another one, --checkpoint-dir); restarting "
          "the process would fail the same way, so the job stops",
          e == ENOSPC || e == EDQUOT ? "free space on the disk of"
          : e == EROFS               ? "remount read-write"
                                     : "give this process write permission to",
          std::filesystem::path(path).parent_path().string());
    }
    throw StorageError(msg, e);
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot create");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;  // a write of nothing: the disk is full
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());  // no half-written file left to fill the disk
      errno = e;
      fail("cannot write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    errno = e;
    fail("fsync failed");
  }
  ::close(fd);
  if (before_rename) before_rename();
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename over " + path);
  // The rename itself must survive a crash: sync the folder.
  const std::string dir = std::filesystem::path(path).parent_path().empty()
                              ? std::string(".")
                              : std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace poseidon::rt
