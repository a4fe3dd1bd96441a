// real_runtime/socket_pacing.h: a cap on one TCP connection's sending rate (SO_MAX_PACING_RATE).
//
// What `network.connection_gbps` models (a cloud network's limit on a single flow), the live
// runtime applies to each of its connections, so that a job on the emulated cluster has it too
// and `poseidon validate` compares like with like. Linux paces the socket itself (TCP's internal
// pacing, without the fq qdisc, which the emulated hosts' kernel lacks).
//
//   std::string error;
//   if (!SetMaxPacingRate(fd, 625e6, &error)) log->warn("{}", error);   // 5 Gbit/s
#pragma once

#include <cstdint>
#include <string>

namespace poseidon::rt {

// Caps socket fd's sending rate at bytes_per_s (> 0; rounded down to whole bytes per second).
// Returns false with *error set (the call and errno's text) if the kernel refuses it.
bool SetMaxPacingRate(int fd, double bytes_per_s, std::string* error);

// The socket's cap in bytes per second, as the kernel reports it (~0 = none); 0 if it cannot say.
uint64_t MaxPacingRate(int fd);

}  // namespace poseidon::rt
