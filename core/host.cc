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
  }
  return Stream::kCompute;
}

}  // namespace poseidon::core
