#include "real_runtime/control.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace poseidon::rt {
namespace {

// Appends by resize + memcpy (GCC 12 warns, falsely, on vector::insert of a few bytes).
void PutBytes(std::vector<uint8_t>* b, const void* p, size_t n) {
  if (n == 0) return;
  const size_t at = b->size();
  b->resize(at + n);
  std::memcpy(b->data() + at, p, n);
}
template <typename T>
void Put(std::vector<uint8_t>* b, T v) {
  PutBytes(b, &v, sizeof v);  // little-endian hosts (transport.cc)
}

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : b_(b) {}
  template <typename T>
  bool Get(T* v) {
    if (pos_ + sizeof(T) > b_.size()) return false;
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(size_t n, std::string* s) {
    if (pos_ + n > b_.size()) return false;
    s->assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  size_t left() const { return b_.size() - pos_; }
  bool done() const { return pos_ == b_.size(); }

 private:
  const std::vector<uint8_t>& b_;
  size_t pos_ = 0;
};

}  // namespace

const char* ControlName(uint8_t type) {
  switch (type) {
    case kCtlHello: return "hello";
    case kCtlPeers: return "peer table";
    case kCtlLoss: return "loss";
    case kCtlAccuracy: return "accuracy";
    case kCtlShutdown: return "shutdown";
    case kCtlClockPing: return "clock ping";
    case kCtlClockPong: return "clock pong";
    case kCtlProgress: return "progress";
    case kCtlStatusAsk: return "status request";
    case kCtlStatus: return "status";
    case kCtlModelTable: return "layer table";
    case kCtlTableAgreed: return "table agreed";
    case kCtlJobRefused: return "job refused";
    case kCtlJobSpec: return "job";
    case kCtlValues: return "values";
    default: return "unknown";
  }
}

std::vector<uint8_t> EncodeHelloCtl(const PeerAddress& me) {
  std::vector<uint8_t> b;
  Put<uint16_t>(&b, me.port);
  PutBytes(&b, me.host.data(), me.host.size());
  return b;
}

bool DecodeHelloCtl(const std::vector<uint8_t>& body, PeerAddress* out) {
  Reader r(body);
  PeerAddress a;
  if (!r.Get(&a.port) || r.left() == 0 || r.left() > kMaxHostBytes ||
      !r.GetString(r.left(), &a.host)) {
    return false;
  }
  *out = std::move(a);
  return true;
}

std::vector<uint8_t> EncodePeers(const std::map<int, PeerAddress>& table) {
  std::vector<uint8_t> b;
  Put<uint32_t>(&b, static_cast<uint32_t>(table.size()));
  for (const auto& [rank, addr] : table) {
    Put<uint32_t>(&b, static_cast<uint32_t>(rank));
    Put<uint16_t>(&b, addr.port);
    Put<uint8_t>(&b, static_cast<uint8_t>(addr.host.size()));
    PutBytes(&b, addr.host.data(), addr.host.size());
  }
  return b;
}

bool DecodePeers(const std::vector<uint8_t>& body, int num_ranks,
                 std::map<int, PeerAddress>* out) {
  Reader r(body);
  uint32_t n = 0;
  if (!r.Get(&n) || n > static_cast<uint32_t>(num_ranks)) return false;
  std::map<int, PeerAddress> table;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t rank = 0;
    uint8_t len = 0;
    PeerAddress a;
    if (!r.Get(&rank) || !r.Get(&a.port) || !r.Get(&len) || len == 0 ||
        !r.GetString(len, &a.host) || rank == 0 || rank >= static_cast<uint32_t>(num_ranks) ||
        table.count(static_cast<int>(rank))) {
      return false;
    }
    table[static_cast<int>(rank)] = std::move(a);
  }
  if (!r.done()) return false;
  *out = std::move(table);
  return true;
}

namespace {

// A body of fixed-size values, in order; decoding wants exactly those bytes.
template <typename... T>
std::vector<uint8_t> EncodeFixed(T... v) {
  std::vector<uint8_t> b;
  (Put(&b, v), ...);
  return b;
}
template <typename... T>
bool DecodeFixed(const std::vector<uint8_t>& body, T*... v) {
  Reader r(body);
  return (r.Get(v) && ...) && r.done();
}

}  // namespace

std::vector<uint8_t> EncodeLoss(int64_t clock, double loss) { return EncodeFixed(clock, loss); }
bool DecodeLoss(const std::vector<uint8_t>& body, int64_t* clock, double* loss) {
  return DecodeFixed(body, clock, loss);
}
std::vector<uint8_t> EncodeI64(int64_t v) { return EncodeFixed(v); }
bool DecodeI64(const std::vector<uint8_t>& body, int64_t* v) { return DecodeFixed(body, v); }
std::vector<uint8_t> EncodeF64(double v) { return EncodeFixed(v); }
bool DecodeF64(const std::vector<uint8_t>& body, double* v) { return DecodeFixed(body, v); }
std::vector<uint8_t> EncodePong(int64_t ping_time, int64_t coordinator_time) {
  return EncodeFixed(ping_time, coordinator_time);
}
bool DecodePong(const std::vector<uint8_t>& body, int64_t* ping_time, int64_t* coordinator_time) {
  return DecodeFixed(body, ping_time, coordinator_time);
}

std::vector<uint8_t> EncodeStatus(const std::string& text) {
  const size_t n = std::min(text.size(), kMaxStatusBytes);
  return std::vector<uint8_t>(text.begin(), text.begin() + static_cast<long>(n));
}

bool DecodeStatus(const std::vector<uint8_t>& body, std::string* text) {
  if (body.size() > kMaxStatusBytes) return false;
  text->assign(body.begin(), body.end());
  return true;
}

std::vector<uint8_t> EncodeJobText(const std::string& text) {
  if (text.empty() || text.size() > kMaxJobBytes) {
    throw std::length_error("a job text of " + std::to_string(text.size()) +
                            " bytes (1 to " + std::to_string(kMaxJobBytes) + ")");
  }
  return std::vector<uint8_t>(text.begin(), text.end());
}

bool DecodeJobText(const std::vector<uint8_t>& body, std::string* text) {
  if (body.empty() || body.size() > kMaxJobBytes) return false;
  text->assign(body.begin(), body.end());
  return true;
}

std::vector<uint8_t> EncodeValuesPart(const ValuesPart& v) {
  std::vector<uint8_t> b;
  b.reserve(16 + v.bytes.size());
  Put<uint64_t>(&b, v.tag);
  Put<uint32_t>(&b, v.part);
  Put<uint32_t>(&b, v.parts);
  PutBytes(&b, v.bytes.data(), v.bytes.size());
  return b;
}

bool DecodeValuesPart(const std::vector<uint8_t>& body, ValuesPart* out) {
  Reader r(body);
  ValuesPart v;
  if (!r.Get(&v.tag) || !r.Get(&v.part) || !r.Get(&v.parts) || v.parts == 0 ||
      v.part >= v.parts || r.left() > kMaxValuesPart) {
    return false;
  }
  v.bytes.assign(body.end() - static_cast<long>(r.left()), body.end());
  *out = std::move(v);
  return true;
}

}  // namespace poseidon::rt
