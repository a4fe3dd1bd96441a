// validation/host_load.h: what the host did while a live run ran, and whether that run was a
// faithful emulation of the cluster it stands for.
//
// A live run of `validate` emulates several machines on this one: each emulated host is a
// process that must get a CPU when it wakes. When something else takes the CPUs (another
// program, the hypervisor's steal), the emulated hosts wake late and the run is slower than the
// cluster it stands for; that is not the simulator's error. So every live run is sampled:
//
//   HostSampler sampler;             // /proc every 200 ms, on a thread of its own
//   int rc = rt::RunLaunch(...);     // the job: this process's descendants
//   const HostRecord r = RecordFromSamples(sampler.Stop(), TicksPerSecond());
//   const Verdict v = Judge(r);      // v.faithful, v.why
//
// and judged by one rule, fixed in code (Judge) and in docs/validation.md ("Faithful runs")
// before any set was drawn with it:
//
//   a run is faithful when the CPU time that processes outside the job used, plus the time the
//   hypervisor stole, is at most kMaxLostPct (10%) of the machine's CPU time over the run
//   (cores x wall time);
//
// and, since 2026-12-06 (before held-out set 36 was drawn), when its emulated hosts ran their
// compute on time:
//
//   its replayed compute tasks ended, at the median, at most one wake-up (the host_wakeup_us
//   the simulator charged) later than the simulated run's (ComputeLateness).
//
// A host can lose capacity that /proc/stat does not show (a hypervisor that runs other guests on
// the same cores without accounting it as steal, a core shared with a noisy neighbour): the
// emulated hosts then wake late although nothing is stolen. A replayed task sleeps its profile
// time, so what it takes beyond the simulated task is how much later the host woke it than the
// simulator's host model (which charges the latencies measured before predicting) says.
//
// The job's processes are this process and its descendants (the launcher's children and theirs),
// their CPU time read from /proc/PID/stat (utime + stime, and cutime + cstime for the children
// they reaped); everything else the CPUs did in user, nice or system time (/proc/stat) is
// "others". Interrupt and softirq time (mostly the emulated links' packets) is reported apart and
// not counted as lost: it is the emulation's own cost. The parsers and the rule are pure
// functions, tested on recorded /proc text (tests/validation/host_load_test.cc).
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace poseidon::validation {

// The rule's bounds, percent of cores x wall time: others' CPU + steal, and the job's own CPU.
inline constexpr double kMaxLostPct = 10;
inline constexpr double kMaxJobPct = 60;

// /proc/stat's aggregate "cpu" line, in clock ticks (USER_HZ).
struct CpuTicks {
  int64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
};

struct HostSample {
  double t_s = 0;           // steady clock, seconds
  CpuTicks cpu;
  int cores = 0;            // "cpuN" lines of /proc/stat
  int procs_running = 0;    // /proc/stat's procs_running (the sampling thread included)
  int64_t job_ticks = 0;    // CPU ticks of the job's processes so far
  int job_processes = 0;    // the job's processes alive (this one included)
};

// /proc/stat text -> s->cpu, cores, procs_running. False (and *error says what is missing) for a
// text that is not /proc/stat.
bool ParseProcStat(const std::string& text, HostSample* s, std::string* error);
// /proc/PID/stat text -> its parent and utime + stime + cutime + cstime (ticks). False when the
// text is not one.
bool ParseProcPidStat(const std::string& text, int* ppid, int64_t* ticks);

// What the host did over a run: from its first sample to its last.
struct HostRecord {
  int samples = 0;
  double wall_s = 0;
  int cores = 0;
  double job_pct = 0;      // CPU of the job's processes, % of cores x wall
  double others_pct = 0;   // CPU of every other process (user + nice + system - job)
  double steal_pct = 0;    // stolen by the hypervisor
  double irq_pct = 0;      // interrupts and softirq (the emulated links' packets, mostly)
  double run_queue_mean = 0, run_queue_max = 0;  // processes ready to run, the sampler left out
  int job_processes_max = 0;
};
HostRecord RecordFromSamples(const std::vector<HostSample>& samples, double ticks_per_s);

// How late a run's emulated hosts ran their compute: the median, over its replayed compute tasks,
// of live duration - simulated duration (us; NaN when no task matched or the traces could not
// be read), and the bound the rule holds it to: the wake-up latency the simulator charged
// (host_wakeup_us; 0 when it charges none, e.g. hosts that are not emulated: then the clause is
// not applied).
struct ComputeLateness {
  double median_us = NAN;
  double bound_us = 0;
};

struct Verdict {
  bool faithful = false;
  std::string why;  // when not: what the host did, against the rule's bound (no comma: a CSV field)
  // When not: whether the same run on the same host may be faithful next time (something else
  // took the CPUs, or the host woke the job late); false when the job itself needs more of the
  // host than the rule allows.
  bool rerun_may_help = true;
};
// The rule (above). A record of fewer than two samples cannot be judged: not faithful. The
// lateness clause applies when `late` has a median and a bound.
Verdict Judge(const HostRecord& r, const ComputeLateness& late = {});

// Whether `validate --rerun-disturbed N` runs a live run judged `v` again after its attempt
// `attempt` (the first is 1): only a run that was not faithful for a reason that may go away
// (Verdict::rerun_may_help), and only while fewer than N reruns were made.
bool RunAgain(const Verdict& v, int attempt, int reruns);

// A line of "key=value" pairs, stored beside a run (DIR/host.txt) and read back by --reuse-live;
// every figure in its shortest exact form, so a run read back is judged on the same figures.
std::string HostRecordText(const HostRecord& r);
bool ParseHostRecordText(const std::string& text, HostRecord* r);

// USER_HZ.
double TicksPerSecond();
// One sample of this host now (the job: this process and its descendants).
HostSample SampleHost();

// Samples the host every `period_ms` on a thread of its own (signals blocked there: the launcher
// keeps handling them), from construction to Stop().
class HostSampler {
 public:
  explicit HostSampler(int period_ms = 200);
  ~HostSampler();
  HostSampler(const HostSampler&) = delete;
  HostSampler& operator=(const HostSampler&) = delete;
  // Stops, takes a last sample and returns them all.
  std::vector<HostSample> Stop();

 private:
  std::vector<HostSample> samples_;
  std::mutex mu_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Waits until the host is quiet: over a window of `window_s`, the CPU every process used (no
// job runs yet) plus steal is within the rule's bound. Gives up after `max_s`. Returns whether it
// got quiet, the seconds waited and the last window's busy percentage.
struct QuietWait {
  bool quiet = false;
  double waited_s = 0;
  double busy_pct = 0;
};
QuietWait WaitForQuietHost(double max_s, double window_s = 1.0);

}  // namespace poseidon::validation
