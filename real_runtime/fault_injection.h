// real_runtime/fault_injection.h: the tests' fault injection, kept out of the runtime's paths.
//
// Test-only. A FaultInjector makes the one process it is given to fail at a protocol phase of a
// chosen clock, so that a test's fault lands where the test says, not when a timer fires. It is
// given only through `poseidon node --inject-fault SPEC` or `poseidon launch --inject-fault SPEC`
// (which passes it to that rank's first incarnation alone); nothing reads the environment, and
// taking a link down is one ioctl, not a shell command.
//
//   SPEC = RANK:PHASE:CLOCK:ACTION
//   PHASE   push (a worker sends, a shard receives, a push of the clock), pull (a shard sends, a
//           worker receives, fresh values of the clock), checkpoint (a shard has written the
//           checkpoint covering the clock to its temporary file, not yet renamed it), heartbeat
//           (the coordinator hears a heartbeat of that clock); at CLOCK or the first later one
//   ACTION  kill (SIGKILL), stop (SIGSTOP), killnockpt (a shard deletes its checkpoint, then
//           SIGKILL), linkdown (the machine's link, eth0 of its network namespace, goes down),
//           malform (the process's message of that phase goes out naming a chunk that does not
//           exist, as a buggy or hostile peer's would: a worker's push, a shard's pull; its
//           receiver's core refuses it and that connection closes)
#pragma once

#include <cstdint>
#include <string>

namespace poseidon::rt {

struct FaultSpec {
  enum class Action { kKill, kKillNoCheckpoint, kStop, kLinkDown, kMalform };
  int rank = -1;
  std::string phase;
  int64_t clock = 0;
  Action action = Action::kKill;
};

// Throws std::invalid_argument saying what the spec must look like.
FaultSpec ParseFaultSpec(const std::string& spec);

class FaultInjector {
 public:
  FaultInjector() = default;  // injects nothing
  // `who` names the process in the log line; `checkpoint_file` is what killnockpt deletes.
  FaultInjector(FaultSpec spec, std::string who, std::string checkpoint_file);

  bool armed() const { return armed_; }
  bool at_checkpoint() const { return armed_ && spec_.phase == "checkpoint"; }
  // The host reached `phase` of `clock`: acts (once) if that is the spec's (not malform).
  void At(const char* phase, int64_t clock);
  // The host is about to send a message of `phase` and `clock`: true (once) if a malform spec
  // says to send it malformed (the host then does).
  bool MalformsSend(const char* phase, int64_t clock);

 private:
  void Act(const char* phase, int64_t clock);
  FaultSpec spec_;
  std::string who_, checkpoint_file_;
  bool armed_ = false;
};

// Takes network interface `name` down (SIOCSIFFLAGS); false, with errno, on failure.
bool TakeInterfaceDown(const std::string& name);

}  // namespace poseidon::rt
