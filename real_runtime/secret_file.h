// real_runtime/secret_file.h: reading a job's shared secret from its file.
#pragma once

#include <string>

namespace poseidon::rt {

// Reads the job's shared secret: the file's bytes, exactly (no trimming; every node must use a
// byte-identical file). Throws std::runtime_error naming the path and what to do when the file
// is missing or unreadable, empty, or readable or writable by group or others.
std::string LoadSecretFile(const std::string& path);

}  // namespace poseidon::rt
