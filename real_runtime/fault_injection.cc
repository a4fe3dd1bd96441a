#include "real_runtime/fault_injection.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace poseidon::rt {

FaultSpec ParseFaultSpec(const std::string& spec) {
  int rank = -1;
  long long clock = 0;
  char phase[16] = {0}, action[12] = {0};
  if (std::sscanf(spec.c_str(), "%d:%15[a-z]:%lld:%11[a-z]", &rank, phase, &clock, action) != 4 ||
      rank < 0 || clock < 0) {
    throw std::invalid_argument("--inject-fault '" + spec + "': want RANK:PHASE:CLOCK:ACTION");
  }
  FaultSpec f;
  f.rank = rank;
  f.phase = phase;
  f.clock = clock;
  const std::string act = action;
  if (f.phase != "push" && f.phase != "pull" && f.phase != "checkpoint" && f.phase != "heartbeat") {
    throw std::invalid_argument("--inject-fault '" + spec +
                                "': PHASE must be push, pull, checkpoint or heartbeat");
  }
  if (act == "kill") {
    f.action = FaultSpec::Action::kKill;
  } else if (act == "killnockpt") {
    f.action = FaultSpec::Action::kKillNoCheckpoint;
  } else if (act == "stop") {
    f.action = FaultSpec::Action::kStop;
  } else if (act == "linkdown") {
    f.action = FaultSpec::Action::kLinkDown;
  } else if (act == "malform") {
    if (f.phase != "push" && f.phase != "pull") {
      throw std::invalid_argument("--inject-fault '" + spec +
                                  "': malform needs PHASE push or pull (a message it sends)");
    }
    f.action = FaultSpec::Action::kMalform;
  } else {
    throw std::invalid_argument("--inject-fault '" + spec +
                                "': ACTION must be kill, killnockpt, stop, linkdown or malform");
  }
  return f;
}

FaultInjector::FaultInjector(FaultSpec spec, std::string who, std::string checkpoint_file)
    : spec_(std::move(spec)),
      who_(std::move(who)),
      checkpoint_file_(std::move(checkpoint_file)),
      armed_(!spec_.phase.empty()) {}

void FaultInjector::At(const char* phase, int64_t clock) {
  if (!armed_ || spec_.action == FaultSpec::Action::kMalform || spec_.phase != phase ||
      clock < spec_.clock) {
    return;
  }
  armed_ = false;  // once (a stopped process may be continued)
  Act(phase, clock);
}

bool FaultInjector::MalformsSend(const char* phase, int64_t clock) {
  if (!armed_ || spec_.action != FaultSpec::Action::kMalform || spec_.phase != phase ||
      clock < spec_.clock) {
    return false;
  }
  armed_ = false;
  spdlog::warn("{}: injected fault: a malformed message (an unknown chunk) at {} of clock {}", who_,
               phase, clock);
  return true;
}

void FaultInjector::Act(const char* phase, int64_t clock) {
  using A = FaultSpec::Action;
  if (spec_.action == A::kLinkDown) {
    spdlog::warn("{}: injected fault: link down at {} of clock {}", who_, phase, clock);
    spdlog::default_logger()->flush();
    if (!TakeInterfaceDown("eth0")) {
      spdlog::error("{}: could not take eth0 down: {}", who_, std::strerror(errno));
    }
    return;
  }
  const int sig = spec_.action == A::kStop ? SIGSTOP : SIGKILL;
  spdlog::warn("{}: injected fault: signal {} at {} of clock {}{}", who_, sig, phase, clock,
               spec_.action == A::kKillNoCheckpoint ? ", its checkpoint deleted first" : "");
  spdlog::default_logger()->flush();
  if (spec_.action == A::kKillNoCheckpoint && !checkpoint_file_.empty()) {
    std::error_code ec;
    std::filesystem::remove(checkpoint_file_, ec);
  }
  ::raise(sig);
}

bool TakeInterfaceDown(const std::string& name) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ifreq req{};
  std::strncpy(req.ifr_name, name.c_str(), IFNAMSIZ - 1);
  bool ok = ::ioctl(fd, SIOCGIFFLAGS, &req) == 0;
  if (ok) {
    req.ifr_flags = static_cast<short>(req.ifr_flags & ~IFF_UP);
    ok = ::ioctl(fd, SIOCSIFFLAGS, &req) == 0;
  }
  const int e = errno;
  ::close(fd);
  errno = e;
  return ok;
}

}  // namespace poseidon::rt
