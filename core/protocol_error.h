// core/protocol_error.h: what an actor returns for a message it does not accept.
//
// In h2's style (ProtocolError), a state machine never aborts on input from a peer: each
// Actor::OnMessage checks the message against the job's shape (message_rules.h) and against its
// own state, and returns a typed error for one that does not fit, having changed nothing. The
// host then closes that peer's connection and reports it (the live runtime), or stops with the
// description (the simulator, whose peers are its own actors: a bug). kStateLost is the one
// code that blames this actor rather than the peer: the host ends the job.
//
//   if (ProtocolError e = actor.OnMessage(now, msg)) CloseAndReport(msg.from, e.what);
#pragma once

#include <cstdint>
#include <string>

namespace poseidon::core {

enum class ProtocolErrorCode : uint8_t {
  kNone = 0,
  kNotForThisActor,  // a type this actor never takes (a push to a worker), or not in this job
  kWrongSender,      // a sender that may not send it (parameters from a worker)
  kOutOfRange,       // a chunk, layer, step, clock or actor id outside the job
  kWrongShape,       // a value count other than the job's shapes say
  kWrongState,       // well-formed, but not now (a second start, a ring step of another clock)
  // Not the peer's fault: the message shows that this actor lacks state the job had (a shard
  // restarted from an older checkpoint than the one the workers' retained pushes start from, or
  // without one). Nothing can rebuild it; the host ends the job with the description instead of
  // closing the peer's connection.
  kStateLost,
};
const char* ProtocolErrorCodeName(ProtocolErrorCode c);

struct ProtocolError {
  ProtocolErrorCode code = ProtocolErrorCode::kNone;
  std::string what;  // one sentence, without the message itself (Describe(msg) says that)

  explicit operator bool() const { return code != ProtocolErrorCode::kNone; }
  static ProtocolError Ok() { return {}; }
  static ProtocolError Of(ProtocolErrorCode c, std::string what) { return {c, std::move(what)}; }
};

}  // namespace poseidon::core
