#include "core/messages.h"

namespace poseidon::core {

const char* MsgTypeName(MsgType t) {
  switch (t) {
    case MsgType::kRegister: return "register";
    case MsgType::kStart: return "start";
    case MsgType::kPushGrad: return "push";
    case MsgType::kParams: return "params";
    case MsgType::kDone: return "done";
    case MsgType::kFactors: return "factors";
    case MsgType::kRing: return "ring";
    case MsgType::kHeartbeat: return "heartbeat";
    case MsgType::kMembership: return "membership";
    case MsgType::kRejoin: return "rejoin";
    case MsgType::kBucket: return "bucket";
    case MsgType::kReady: return "ready";
    case MsgType::kResponse: return "response";
  }
  return "unknown";
}

const char* WireFormatName(WireFormat w) {
  switch (w) {
    case WireFormat::kFp32: return "fp32";
    case WireFormat::kFp16: return "fp16";
    case WireFormat::kBf16: return "bf16";
  }
  return "unknown";
}

bool WireFormatFromName(const std::string& name, WireFormat* w) {
  for (WireFormat x : {WireFormat::kFp32, WireFormat::kFp16, WireFormat::kBf16}) {
    if (name == WireFormatName(x)) {
      *w = x;
      return true;
    }
  }
  return false;
}

std::string Describe(const Message& m) {
  std::string s = MsgTypeName(m.type);
  s += " " + std::to_string(m.from) + "->" + std::to_string(m.to) + " clock " +
       std::to_string(m.clock);
  if (m.chunk >= 0) s += " chunk " + std::to_string(m.chunk);
  s += " bytes " + std::to_string(m.payload_bytes);
  return s;
}

}  // namespace poseidon::core
