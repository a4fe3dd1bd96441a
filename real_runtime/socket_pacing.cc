#include "real_runtime/socket_pacing.h"

#include <sys/socket.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

namespace poseidon::rt {

bool SetMaxPacingRate(int fd, double bytes_per_s, std::string* error) {
  // 64 bits: the kernel takes a u64 since Linux 4.20 (a u32 caps the rate at 34 Gbit/s).
  const uint64_t rate = static_cast<uint64_t>(std::floor(bytes_per_s));
  if (!(bytes_per_s >= 1) ||
      ::setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof rate) != 0) {
    *error = fmt::format("setsockopt(SO_MAX_PACING_RATE, {} B/s) on socket {}: {}", rate, fd,
                         bytes_per_s >= 1 ? std::strerror(errno) : "the rate must be >= 1 B/s");
    return false;
  }
  return true;
}

uint64_t MaxPacingRate(int fd) {
  uint64_t rate = 0;
  socklen_t len = sizeof rate;
  if (::getsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, &len) != 0) return 0;
  if (len == sizeof(uint32_t)) {
    uint32_t r32 = 0;
    std::memcpy(&r32, &rate, sizeof r32);
    return r32 == ~uint32_t{0} ? ~uint64_t{0} : r32;
  }
  return rate;
}

}  // namespace poseidon::rt
