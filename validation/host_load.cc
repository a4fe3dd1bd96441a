#include "validation/host_load.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include <fmt/format.h>

namespace poseidon::validation {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The whole of a small /proc file ("" when it cannot be read: a process that just ended).
std::string ReadProc(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

bool ToInt(const std::string& s, int64_t* v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

int64_t Busy(const CpuTicks& c) { return c.user + c.nice + c.system; }

}  // namespace

bool ParseProcStat(const std::string& text, HostSample* s, std::string* error) {
  std::istringstream in(text);
  std::string line;
  bool cpu = false, running = false;
  s->cores = 0;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string key;
    f >> key;
    if (key == "cpu") {
      CpuTicks& c = s->cpu;
      f >> c.user >> c.nice >> c.system >> c.idle >> c.iowait >> c.irq >> c.softirq >> c.steal;
      if (!f) {
        *error = "the cpu line has fewer than 8 numbers: " + line;
        return false;
      }
      cpu = true;
    } else if (key.size() > 3 && key.compare(0, 3, "cpu") == 0) {
      ++s->cores;
    } else if (key == "procs_running") {
      f >> s->procs_running;
      running = static_cast<bool>(f);
    }
  }
  if (!cpu || !running || s->cores < 1) {
    *error = !cpu ? "no aggregate cpu line" : !running ? "no procs_running line" : "no cpuN lines";
    return false;
  }
  return true;
}

bool ParseProcPidStat(const std::string& text, int* ppid, int64_t* ticks) {
  // "PID (COMM) STATE PPID ..."; COMM may hold spaces and parentheses: the last ')' ends it.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream f(text.substr(close + 1));
  std::vector<std::string> fields;  // fields[0] is field 3 (state)
  std::string x;
  while (f >> x && fields.size() < 16) fields.push_back(x);
  if (fields.size() < 16) return false;
  int64_t p = 0, v[4];
  if (!ToInt(fields[1], &p)) return false;
  for (int i = 0; i < 4; ++i) {  // fields 14..17: utime stime cutime cstime
    if (!ToInt(fields[static_cast<size_t>(11 + i)], &v[i])) return false;
  }
  *ppid = static_cast<int>(p);
  *ticks = v[0] + v[1] + v[2] + v[3];
  return true;
}

HostRecord RecordFromSamples(const std::vector<HostSample>& samples, double ticks_per_s) {
  HostRecord r;
  r.samples = static_cast<int>(samples.size());
  if (samples.size() < 2) return r;
  const HostSample& a = samples.front();
  const HostSample& z = samples.back();
  r.wall_s = z.t_s - a.t_s;
  r.cores = z.cores;
  const double capacity = r.wall_s * r.cores * ticks_per_s;  // ticks
  if (capacity <= 0) return r;
  const double job = static_cast<double>(z.job_ticks - a.job_ticks);
  const double busy = static_cast<double>(Busy(z.cpu) - Busy(a.cpu));
  r.job_pct = 100 * job / capacity;
  r.others_pct = 100 * std::max(0.0, busy - job) / capacity;
  r.steal_pct = 100 * static_cast<double>(z.cpu.steal - a.cpu.steal) / capacity;
  r.irq_pct = 100 * static_cast<double>(z.cpu.irq + z.cpu.softirq - a.cpu.irq - a.cpu.softirq) /
              capacity;
  double sum = 0;
  for (const HostSample& s : samples) {
    const double ready = std::max(0, s.procs_running - 1);  // the sampling thread itself
    sum += ready;
    r.run_queue_max = std::max(r.run_queue_max, ready);
    r.job_processes_max = std::max(r.job_processes_max, s.job_processes);
  }
  r.run_queue_mean = sum / static_cast<double>(samples.size());
  return r;
}

Verdict Judge(const HostRecord& r, const ComputeLateness& late) {
  Verdict v;
  if (r.samples < 2 || r.wall_s <= 0) {
    v.why = "the host was not sampled during the run";
    return v;
  }
  const double lost = r.others_pct + r.steal_pct;
  if (lost > kMaxLostPct) {
    v.why = fmt::format("other processes used {:.1f}% and the hypervisor stole {:.1f}% of the {} "
                        "cores ({:.1f}% lost; bound {:g}%)",
                        r.others_pct, r.steal_pct, r.cores, lost, kMaxLostPct);
    return v;
  }
  if (r.job_pct > kMaxJobPct) {
    v.why = fmt::format(
        "the job's processes kept {:.1f}% of the {} cores busy (bound {:g}%): its "
        "emulated machines waited for the host's cores; a host with more cores or "
        "fewer processes per core emulates it",
        r.job_pct, r.cores, kMaxJobPct);
    v.rerun_may_help = false;
    return v;
  }
  if (late.bound_us > 0 && std::isfinite(late.median_us) && late.median_us > late.bound_us) {
    v.why = fmt::format(
        "its emulated hosts ran their compute {:.1f} us later than simulated at the "
        "median (bound {:.1f} us: one wake-up as charged) with {:.1f}% of the {} "
        "cores counted as lost",
        late.median_us, late.bound_us, lost, r.cores);
    return v;
  }
  v.faithful = true;
  return v;
}

bool RunAgain(const Verdict& v, int attempt, int reruns) {
  return !v.faithful && v.rerun_may_help && attempt <= reruns;
}

std::string HostRecordText(const HostRecord& r) {
  // Every figure in its shortest exact form: a run read back (--reuse-live) is judged and
  // printed from the very figures the live validate had.
  return fmt::format(
      "samples={} wall_s={} cores={} job_pct={} others_pct={} steal_pct={} "
      "irq_pct={} run_queue_mean={} run_queue_max={} job_processes_max={}\n",
      r.samples, r.wall_s, r.cores, r.job_pct, r.others_pct, r.steal_pct, r.irq_pct,
      r.run_queue_mean, r.run_queue_max, r.job_processes_max);
}

bool ParseHostRecordText(const std::string& text, HostRecord* r) {
  std::istringstream in(text);
  std::map<std::string, double> kv;
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos) return false;
    try {
      size_t used = 0;
      const std::string value = word.substr(eq + 1);
      kv[word.substr(0, eq)] = std::stod(value, &used);
      if (used != value.size()) return false;
    } catch (const std::exception&) {
      return false;
    }
  }
  for (const char* k : {"samples", "wall_s", "cores", "job_pct", "others_pct", "steal_pct",
                        "irq_pct", "run_queue_mean", "run_queue_max", "job_processes_max"}) {
    if (!kv.count(k)) return false;
  }
  r->samples = static_cast<int>(kv["samples"]);
  r->wall_s = kv["wall_s"];
  r->cores = static_cast<int>(kv["cores"]);
  r->job_pct = kv["job_pct"];
  r->others_pct = kv["others_pct"];
  r->steal_pct = kv["steal_pct"];
  r->irq_pct = kv["irq_pct"];
  r->run_queue_mean = kv["run_queue_mean"];
  r->run_queue_max = kv["run_queue_max"];
  r->job_processes_max = static_cast<int>(kv["job_processes_max"]);
  return true;
}

double TicksPerSecond() {
  const long hz = ::sysconf(_SC_CLK_TCK);
  return hz > 0 ? static_cast<double>(hz) : 100.0;
}

HostSample SampleHost() {
  HostSample s;
  s.t_s = Now();
  std::string error;
  if (!ParseProcStat(ReadProc("/proc/stat"), &s, &error)) return s;  // cores 0: not sampled
  // The job: this process and its descendants. Each process's reaped children are in its
  // cutime and cstime, so nothing is counted twice and nothing is lost when a child ends.
  const int self = static_cast<int>(::getpid());
  std::map<int, std::pair<int, int64_t>> procs;  // pid -> (ppid, ticks)
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    int64_t pid = 0;
    if (!ToInt(name, &pid)) continue;
    int ppid = 0;
    int64_t ticks = 0;
    if (ParseProcPidStat(ReadProc("/proc/" + name + "/stat"), &ppid, &ticks)) {
      procs[static_cast<int>(pid)] = {ppid, ticks};
    }
  }
  std::map<int, std::vector<int>> children;
  for (const auto& [pid, p] : procs) children[p.first].push_back(pid);
  std::vector<int> todo = {self};
  while (!todo.empty()) {
    const int pid = todo.back();
    todo.pop_back();
    const auto it = procs.find(pid);
    if (it == procs.end()) continue;
    s.job_ticks += it->second.second;
    ++s.job_processes;
    for (int c : children[pid]) todo.push_back(c);
  }
  return s;
}

HostSampler::HostSampler(int period_ms) {
  samples_.push_back(SampleHost());
  // The thread starts with every signal blocked, so that SIGINT and SIGCHLD keep going to the
  // launcher's thread (its waitpid must see EINTR).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this, period_ms] {
    while (!stop_.load()) {
      for (int waited = 0; waited < period_ms && !stop_.load(); waited += 10) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (stop_.load()) break;
      HostSample s = SampleHost();
      std::lock_guard<std::mutex> lock(mu_);
      samples_.push_back(std::move(s));
    }
  });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

HostSampler::~HostSampler() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::vector<HostSample> HostSampler::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  samples_.push_back(SampleHost());
  std::vector<HostSample> out;
  for (HostSample& s : samples_) {
    if (s.cores > 0) out.push_back(std::move(s));  // an unreadable /proc/stat: left out
  }
  return out;
}

QuietWait WaitForQuietHost(double max_s, double window_s) {
  QuietWait w;
  const double start = Now();
  const double hz = TicksPerSecond();
  HostSample a = SampleHost();
  while (true) {
    std::this_thread::sleep_for(std::chrono::duration<double>(window_s));
    const HostSample z = SampleHost();
    const double capacity = (z.t_s - a.t_s) * std::max(1, z.cores) * hz;
    w.busy_pct = capacity > 0 ? 100 * static_cast<double>(Busy(z.cpu) - Busy(a.cpu) + z.cpu.steal -
                                                         a.cpu.steal) /
                                    capacity
                              : 0;
    w.waited_s = z.t_s - start;
    if (w.busy_pct <= kMaxLostPct) {
      w.quiet = true;
      return w;
    }
    if (w.waited_s >= max_s) return w;
    a = z;
  }
}

}  // namespace poseidon::validation
