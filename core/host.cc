#include "core/host.h"

namespace poseidon::core {

const char* TaskKindName(TaskKind k) {
  switch (k) {
    case TaskKind::kForward: return "forward";
    case TaskKind::kBackward: return "backward";
    case TaskKind::kCopyToHost: return "copy_to_host";
    case TaskKind::kCopyToDevice: return "copy_to_device";
    case TaskKind::kServerUpdate: return "server_update";
    case TaskKind::kSfbRebuild: return "sfb_rebuild";
    case TaskKind::kLocalReduce: return "local_reduce";
    case TaskKind::kLocalBroadcast: return "local_broadcast";
  }
  return "unknown";
}

Stream StreamOf(TaskKind k) {
  switch (k) {
    case TaskKind::kForward:
    case TaskKind::kBackward:
    case TaskKind::kSfbRebuild: return Stream::kCompute;
    case TaskKind::kCopyToHost:
    case TaskKind::kCopyToDevice: return Stream::kCopy;
    case TaskKind::kServerUpdate: return Stream::kServer;
    case TaskKind::kLocalReduce: return Stream::kReduce;
    case TaskKind::kLocalBroadcast: return Stream::kBroadcast;
  }
  return Stream::kCompute;
}

int StreamSlot(const ComputeTask& task) {
  return task.device * kNumStreams + static_cast<int>(StreamOf(task.kind));
}

}  // namespace poseidon::core
