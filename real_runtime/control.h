// real_runtime/control.h: the runtime's control frames, and their codec.
//
// Control frames (types >= kFrameControlMin) travel on the same authenticated connections as the
// core's messages; the transport delivers them opaquely (TransportCallbacks::on_control). They
// carry what the hosts need around the protocol: the rendezvous (where each process listens),
// clock synchronisation, progress and loss reports, the watchdog's status questions, shutdown.
// Every body is little-endian with a fixed layout; every decoder checks the exact size and the
// ranges, and returns false for anything else (the host logs and drops the frame).
//
//   std::vector<uint8_t> b = EncodeLoss(12, 0.53);
//   int64_t clock; double loss;
//   if (DecodeLoss(b, &clock, &loss)) ...
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace poseidon::rt {

enum Control : uint8_t {
  kCtlHello = 64,      // any -> coordinator: u16 port, host bytes (where I listen)
  kCtlPeers = 65,      // coordinator -> any: u32 n, n x (u32 rank, u16 port, u8 len, host)
  kCtlLoss = 66,       // worker -> coordinator: i64 clock, f64 loss
  kCtlAccuracy = 67,   // worker -> coordinator: f64 test accuracy
  kCtlShutdown = 68,   // coordinator -> any: the job is over, exit (empty)
  kCtlClockPing = 69,  // any -> coordinator: i64 local send time
  kCtlClockPong = 70,  // coordinator -> any: i64 that time, i64 coordinator's job time
  kCtlProgress = 71,   // worker -> coordinator: i64 clock of an iteration finished (replayed
                       // compute, which reports no loss)
  kCtlStatusAsk = 72,  // coordinator -> any: what do you wait for? (the watchdog; empty)
  kCtlStatus = 73,     // any -> coordinator: that, as text (at most kMaxStatusBytes)
  // A job whose workers bring the model (scenario `model: torch`; config/worker_job.h):
  kCtlModelTable = 74,  // worker -> coordinator: its layer table (text, at most kMaxJobBytes)
  kCtlTableAgreed = 75, // coordinator -> worker: every worker's table is the same (empty)
  kCtlJobRefused = 76,  // coordinator -> any: the job cannot run, and why (text); exit
  kCtlJobSpec = 77,     // worker 1 -> coordinator -> every other process: the job (text)
  kCtlValues = 78,      // worker 1 -> worker: u64 tag, u32 part, u32 parts, bytes (at most
                        // kMaxValuesPart): its initial parameters and buffers, or its buffers
                        // before a forward pass (tag: the clock + 1; 0 for the initial ones)
};
const char* ControlName(uint8_t type);  // "hello", ..., "unknown"

inline constexpr size_t kMaxHostBytes = 255;
inline constexpr size_t kMaxStatusBytes = 4096;
inline constexpr size_t kMaxJobBytes = 64u << 20;      // a layer table or a job, as text
inline constexpr size_t kMaxValuesPart = 32u << 20;    // bytes of values per kCtlValues frame

struct PeerAddress {
  std::string host;  // 1..kMaxHostBytes bytes
  uint16_t port = 0;
  bool operator==(const PeerAddress&) const = default;
};

std::vector<uint8_t> EncodeHelloCtl(const PeerAddress& me);
bool DecodeHelloCtl(const std::vector<uint8_t>& body, PeerAddress* out);

// The ranks of a table are 1..num_ranks-1.
std::vector<uint8_t> EncodePeers(const std::map<int, PeerAddress>& table);
bool DecodePeers(const std::vector<uint8_t>& body, int num_ranks,
                 std::map<int, PeerAddress>* out);

std::vector<uint8_t> EncodeLoss(int64_t clock, double loss);
bool DecodeLoss(const std::vector<uint8_t>& body, int64_t* clock, double* loss);

// One i64 (kCtlClockPing, kCtlProgress) or one f64 (kCtlAccuracy).
std::vector<uint8_t> EncodeI64(int64_t v);
bool DecodeI64(const std::vector<uint8_t>& body, int64_t* v);
std::vector<uint8_t> EncodeF64(double v);
bool DecodeF64(const std::vector<uint8_t>& body, double* v);

std::vector<uint8_t> EncodePong(int64_t ping_time, int64_t coordinator_time);
bool DecodePong(const std::vector<uint8_t>& body, int64_t* ping_time, int64_t* coordinator_time);

// Text of at most kMaxStatusBytes bytes (longer text is cut when encoded).
std::vector<uint8_t> EncodeStatus(const std::string& text);
bool DecodeStatus(const std::vector<uint8_t>& body, std::string* text);

// A layer table, a job or a refusal: 1..kMaxJobBytes bytes of text (EncodeJobText refuses longer
// text with std::length_error).
std::vector<uint8_t> EncodeJobText(const std::string& text);
bool DecodeJobText(const std::vector<uint8_t>& body, std::string* text);

// One part of a values transfer: part < parts, at most kMaxValuesPart bytes.
struct ValuesPart {
  uint64_t tag = 0;
  uint32_t part = 0, parts = 1;
  std::vector<uint8_t> bytes;
};
std::vector<uint8_t> EncodeValuesPart(const ValuesPart& v);
bool DecodeValuesPart(const std::vector<uint8_t>& body, ValuesPart* out);

}  // namespace poseidon::rt
