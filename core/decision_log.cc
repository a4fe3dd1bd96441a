#include "core/decision_log.h"

#include <string>

#include "core/tree.h"

namespace poseidon::core {

void DecisionLog::Add(ActorId actor, std::string key, std::string value) {
  entries_[actor][std::move(key)].push_back(std::move(value));
}

void DecisionLog::Send(ActorId actor, const Message& m) {
  std::string key = std::string("send ") + MsgTypeName(m.type) + " to " + std::to_string(m.to);
  if (m.layer >= 0) key += " layer " + std::to_string(m.layer);
  if (m.chunk >= 0) key += " chunk " + std::to_string(m.chunk);
  if (tree_halves_ && m.type == MsgType::kBucket) key += " half " + std::to_string(TreeHalf(m.step));
  std::string value = "c" + std::to_string(m.clock);
  if (m.step >= 0) value += "s" + std::to_string(m.step);
  value += ":" + std::to_string(m.payload_bytes);
  Add(actor, std::move(key), std::move(value));
}

void DecisionLog::Compute(ActorId actor, const ComputeTask& t) {
  const std::string kind = TaskKindName(t.kind);
  // A machine's devices each run their passes in an order the protocol fixes (device 0 and a
  // machine of one device alike: "compute passes").
  const std::string device = t.device > 0 ? " device " + std::to_string(t.device) : "";
  if (t.kind == TaskKind::kForward || t.kind == TaskKind::kBackward) {
    // One pass at a time, in an order the protocol fixes.
    Add(actor, "compute passes" + device,
        kind + " " + std::to_string(t.layer) + " c" + std::to_string(t.clock));
    return;
  }
  std::string key = "compute " + kind + device;
  if (t.layer >= 0) key += " layer " + std::to_string(t.layer);
  if (t.chunk >= 0) key += " chunk " + std::to_string(t.chunk);
  if (t.peer >= 0) key += " peer " + std::to_string(t.peer);
  Add(actor, std::move(key), "c" + std::to_string(t.clock) + ":" + std::to_string(t.bytes));
}

void DecisionLog::Trace(const TraceEvent& e) {
  switch (e.kind) {
    case TraceKind::kIterationBegin:
      Add(e.actor, "clock begins", std::to_string(e.clock));
      return;
    case TraceKind::kLayerSynced:
      Add(e.actor, "layer " + std::to_string(e.layer) + " synced", std::to_string(e.clock));
      return;
    case TraceKind::kClockApplied:
      Add(e.actor, "chunk " + std::to_string(e.chunk) + " applied", std::to_string(e.clock));
      return;
    default:
      return;
  }
}

std::string DecisionLog::Text() const {
  std::string out;
  for (const auto& [actor, keys] : entries_) {
    for (const auto& [key, values] : keys) {
      out += std::to_string(actor) + "\t" + key + "\t";
      for (size_t i = 0; i < values.size(); ++i) {
        if (i) out += ' ';
        out += values[i];
      }
      out += '\n';
    }
  }
  return out;
}

}  // namespace poseidon::core
