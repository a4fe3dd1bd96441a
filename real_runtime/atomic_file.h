// real_runtime/atomic_file.h: writing a file so that a crash leaves the old or the new contents,
// and telling a disk error a restart cannot cure from one it may.
//
//   try {
//     WriteFileAtomically("ckpt/shard-0.ckpt", bytes);
//   } catch (const StorageError& e) {
//     if (e.permanent()) ...  // no space, read-only, no permission: stop, do not restart
//   }
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

namespace poseidon::rt {

// A file that could not be written. what() names the path, the step and the system error, and
// for a permanent one what to do.
class StorageError : public std::runtime_error {
 public:
  StorageError(const std::string& what, int error_number)
      : std::runtime_error(what), errno_(error_number) {}
  int error_number() const { return errno_; }
  // No space or quota, a read-only file system, no permission: restarting fails the same way.
  bool permanent() const { return IsPermanent(errno_); }
  static bool IsPermanent(int error_number);

 private:
  int errno_;
};

// Writes `bytes` to PATH.tmp, fsyncs it, calls `before_rename` (tests inject faults there),
// renames it over `path` and fsyncs the folder, so that `path` holds either the old or the new
// contents after a crash, never a torn file. Throws StorageError.
void WriteFileAtomically(const std::string& path, const std::string& bytes,
                         const std::function<void()>& before_rename = {});

}  // namespace poseidon::rt
