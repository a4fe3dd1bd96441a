#include "real_runtime/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <memory>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "config/job_config.h"
#include "config/scenario.h"
#include "config/yaml_reader.h"
#include "real_runtime/fault_injection.h"
#include "real_runtime/node.h"

namespace poseidon::rt {
namespace {

using config::ConfigError;

volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

struct Child {
  pid_t pid = -1;
  int rank = 0;
  std::string name;
  std::string log;
};

std::string RandomHex(size_t bytes) {
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  std::string raw(bytes, '\0');
  if (!urandom.read(raw.data(), static_cast<std::streamsize>(bytes))) {
    throw ConfigError("error: cannot read /dev/urandom for the job's secret");
  }
  std::string hex;
  for (unsigned char c : raw) hex += fmt::format("{:02x}", c);
  return hex;
}

// fork + exec `argv` with stdout/stderr redirected (-1 = inherit); extra_fd stays open in the
// child (the coordinator's ready pipe); `env` (KEY=VALUE) is added to the child's environment,
// and argv[0] is looked up in PATH when it has no slash (a user's command). The child dies with
// the launcher.
pid_t Spawn(const std::vector<std::string>& argv, int out_fd, int err_fd, int keep_fd,
            const std::vector<std::string>& env = {}) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw ConfigError(fmt::format("error: fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    if (keep_fd >= 0) fcntl(keep_fd, F_SETFD, 0);
    // Several processes share the cores: one OpenMP thread each unless the user said otherwise.
    setenv("OMP_NUM_THREADS", "1", /*overwrite=*/0);
    for (const std::string& kv : env) {
      const size_t eq = kv.find('=');
      setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
    }
    execvp(args[0], args.data());
    std::fprintf(stderr, "poseidon launch: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  return pid;
}

// Whether the scenario file or a --set names `cluster.KEY` (devices or devices_per_machine, two
// forms of one count), so that a flag overrides the form in use.
bool NamesClusterKey(const std::string& file, const std::vector<std::string>& overrides,
                     const std::string& key) {
  for (const std::string& o : overrides) {
    if (o.rfind("cluster." + key + "=", 0) == 0) return true;
  }
  try {
    const YAML::Node root = YAML::LoadFile(file);
    return root.IsMap() && root["cluster"].IsMap() && root["cluster"][key].IsDefined();
  } catch (const YAML::Exception&) {
    return false;  // LoadScenarioFile says what is wrong with the file
  }
}

// Whether port is free on the loopback now.
bool PortFree(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// A TCP port free on this host now (for MASTER_PORT: a script that also starts torch.distributed,
// which binds it later). A random one outside net.ipv4.ip_local_port_range: a port bind(0) hands
// out is an ephemeral one, which any outgoing connection may take before the script binds it.
int FreePort() {
  int lo = 32768, hi = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  if (!(range >> lo >> hi)) lo = 32768, hi = 60999;
  std::random_device rd;
  std::mt19937 gen(rd());
  const bool below = lo - 10000 >= 65535 - hi;  // the larger span outside the ephemeral range
  if (below ? lo - 1 < 10000 : hi + 1 > 65535) return 29500;
  std::uniform_int_distribution<int> pick(below ? 10000 : hi + 1, below ? lo - 1 : 65535);
  for (int i = 0; i < 200; ++i) {
    const int port = pick(gen);
    if (PortFree(port)) return port;
  }
  return 29500;  // torch.distributed's default; its bind error names the port
}

std::string Absolute(const std::string& path) {
  std::error_code ec;
  const auto p = std::filesystem::absolute(path, ec);
  return ec ? path : p.string();
}

// The log's last error line, indented, with a newline (empty when there is none): what the
// user needs first when a process fails.
std::string LastError(const std::string& log) {
  std::ifstream f(log);
  std::string line, last;
  while (std::getline(f, line)) {
    if (line.find("[error]") != std::string::npos || line.rfind("poseidon", 0) == 0) last = line;
  }
  if (last.empty()) return "";
  const size_t at = last.find("[error] ");
  return "  " + (at == std::string::npos ? last : last.substr(at + 8)) + "\n";
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  return "ended";
}

}  // namespace

std::string Capture(const std::vector<std::string>& argv, const std::string& what) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw ConfigError("error: pipe failed");
  const pid_t pid = Spawn(argv, fds[1], -1, -1);
  ::close(fds[1]);
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw ConfigError(fmt::format("error: {} failed (see the message above)", what));
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}


int RunLaunch(const LaunchOptions& o) {
  std::vector<std::string> overrides = o.overrides;
  if (o.workers > 0 && o.machines > 0) {
    throw ConfigError("error: --machines and --workers say the same (the worker machines); give "
                      "one of them");
  }
  if (o.devices_per_machine < 0 || o.workers < 0 || o.machines < 0 || o.servers < 0) {
    throw ConfigError("error: --machines, --workers, --devices-per-machine and --servers must "
                      "be positive (0 or absent: the scenario's)");
  }
  const int machines = o.machines > 0 ? o.machines : o.workers;
  if (machines > 0) {
    // Replaces the scenario's under either name (config::LoadScenarioFile); by the older name
    // only where a --set gave that one, since one key set by both names is an error.
    const bool older = std::any_of(overrides.begin(), overrides.end(), [](const std::string& v) {
      return v.rfind("cluster.workers=", 0) == 0;
    });
    overrides.push_back(fmt::format("cluster.{}={}", older ? "workers" : "machines", machines));
  }
  if (o.servers > 0) overrides.push_back(fmt::format("cluster.servers={}", o.servers));
  if (o.devices_per_machine > 0) {
    if (NamesClusterKey(o.scenario_file, overrides, "devices")) {
      // The scenario counts all devices: keep its key, with the machines' total (the scenario's
      // machines unless a flag gave them: its own device count need not divide those).
      const int m = machines > 0 ? machines
                                 : config::LoadScenarioFile(o.scenario_file, overrides).workers;
      overrides.push_back(fmt::format("cluster.devices={}", m * o.devices_per_machine));
    } else {
      overrides.push_back(fmt::format("cluster.devices_per_machine={}", o.devices_per_machine));
    }
  }
  const config::ScenarioSpec s = config::LoadScenarioFile(o.scenario_file, overrides);
  CheckLiveScenario(s);
  const bool torch = !o.worker_command.empty() || o.no_workers;
  if (torch && !s.model_from_workers) {
    throw ConfigError(fmt::format(
        "{}: error: --torch runs a training script's processes as the workers, but this scenario "
        "names its model ('model: {}'); give a scenario with 'model: torch' (scenarios/live/"
        "torch.yaml)",
        o.scenario_file, s.model.name));
  }
  if (!torch && s.model_from_workers) {
    throw ConfigError(fmt::format(
        "{}: error: this scenario's workers are a training script's processes ('model: torch'): "
        "poseidon launch --torch {} -- python train.py ARGS (docs/torch.md)",
        o.scenario_file, o.scenario_file));
  }
  const core::JobLayout layout = config::BuildLayout(s);
  const std::string exe = o.self_exe.empty() ? "/proc/self/exe" : o.self_exe;

  std::error_code ec;
  std::filesystem::create_directories(o.log_dir, ec);
  if (ec) {
    throw ConfigError(fmt::format("{}: error: cannot create the log folder: {}", o.log_dir,
                                  ec.message()));
  }
  // The job's secret: random, owner-only, never on a command line.
  const std::string secret_file = o.log_dir + "/job.secret";
  {
    const int fd = ::open(secret_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || fchmod(fd, 0600) != 0) {
      throw ConfigError(fmt::format("{}: error: cannot write the job's secret: {}", secret_file,
                                    std::strerror(errno)));
    }
    const std::string secret = RandomHex(32);
    const bool ok = ::write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size());
    ::close(fd);
    if (!ok) throw ConfigError(secret_file + ": error: cannot write the job's secret");
  }
  if (o.restart_on_failure > 0 && !s.fault.enabled) {
    throw ConfigError(fmt::format("{}: error: --restart-on-failure needs a protocol.fault_tolerance "
                                  "section (heartbeats tell the job who is gone)",
                                  o.scenario_file));
  }
  int inject_rank = -1;
  if (!o.inject_fault.empty()) {
    try {
      inject_rank = ParseFaultSpec(o.inject_fault).rank;
    } catch (const std::invalid_argument& e) {
      throw ConfigError(std::string("error: ") + e.what());
    }
  }
  std::string checkpoint_dir;
  if (o.resume && (!s.fault.enabled || s.fault.checkpoint_every <= 0)) {
    throw ConfigError(fmt::format(
        "{}: error: --resume continues from the shards' checkpoints: the scenario needs "
        "protocol.fault_tolerance with checkpoint_every > 0, as the stopped job had",
        o.scenario_file));
  }
  if (o.resume) {
    checkpoint_dir = o.log_dir + "/checkpoints";
    for (int j = 0; j < s.servers; ++j) {
      const std::string f = fmt::format("{}/shard-{}.ckpt", checkpoint_dir, j);
      if (!std::filesystem::exists(f)) {
        throw ConfigError(fmt::format(
            "{}: error: no checkpoint of shard {} to resume from: give the --log-dir of the "
            "stopped job (and its --workers, --servers and --set), whose shards checkpointed "
            "there",
            f, j));
      }
    }
  } else if (s.fault.enabled) {
    checkpoint_dir = o.log_dir + "/checkpoints";
    std::filesystem::create_directories(checkpoint_dir, ec);
    if (ec) {
      throw ConfigError(fmt::format("{}: error: cannot create the checkpoint folder: {}",
                                    checkpoint_dir, ec.message()));
    }
    // A new job starts from its initial values, not from an earlier job's checkpoints.
    for (const auto& e : std::filesystem::directory_iterator(checkpoint_dir, ec)) {
      std::filesystem::remove(e.path(), ec);
    }
  }
  const std::string job_id = !o.job_id.empty() ? o.job_id : fmt::format("launch-{}-{}", getpid(),
                                         std::chrono::system_clock::now().time_since_epoch().count());

  // Emulated cluster: one network namespace per machine of the layout (a colocated shard shares
  // its worker's namespace and talks to it over loopback), every link shaped to the rate.
  std::string netns_prefix;
  std::string exe_path = exe;
  if (o.emulate) {
    char buf[4096];
    const ssize_t n = readlink(exe.c_str(), buf, sizeof buf - 1);
    if (n > 0) exe_path.assign(buf, static_cast<size_t>(n));
    const double gbps = o.emulate_gbps > 0 ? o.emulate_gbps : s.network.host_bandwidth_Bps * 8 / 1e9;
    const std::string rate = fmt::format("{}kbit", static_cast<int64_t>(gbps * 1e6));
    netns_prefix = Capture({"/bin/bash", o.netns_script, "create", "-n",
                            std::to_string(layout.num_machines), "--rate", rate},
                           o.netns_script + " create");
    // The hosts' TCP settings (congestion control, no slow start after idle, small queues) are
    // netns-run's, the same that calibrate-net measured the links with.
    fmt::print(stderr, "launch: emulated cluster {}: {} namespaces, links shaped to {} Gbit/s\n",
               netns_prefix, layout.num_machines, gbps);
  }
  auto addr_of = [&](int rank) {
    return fmt::format("10.77.0.{}", layout.machine_of[static_cast<size_t>(rank)] + 1);
  };
  auto node_argv = [&](int rank) {
    std::vector<std::string> a = {exe_path, "node", o.scenario_file, "--rank", std::to_string(rank),
                                  "--secret-file", secret_file, "--job-id", job_id};
    for (const std::string& ov : overrides) {
      a.push_back("--set");
      a.push_back(ov);
    }
    a.insert(a.end(), o.node_args.begin(), o.node_args.end());
    if (!checkpoint_dir.empty()) a.insert(a.end(), {"--checkpoint-dir", checkpoint_dir});
    if (o.resume) a.push_back("--resume");
    if (o.emulate) {
      a.insert(a.end(), {"--listen", addr_of(rank)});
      const std::string ns = fmt::format("{}-{}", netns_prefix, layout.machine_of[static_cast<size_t>(rank)]);
      a.insert(a.begin(), {"/usr/bin/ip", "netns", "exec", ns});
    }
    return a;
  };
  const std::string coordinator_host = o.emulate ? addr_of(0) : "127.0.0.1";
  auto destroy_netns = [&] {
    if (netns_prefix.empty()) return;
    const pid_t pid = Spawn({"/bin/bash", o.netns_script, "destroy", netns_prefix}, -1, -1, -1);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  };

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: waitpid returns EINTR on a signal
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_signal = 0;

  std::map<pid_t, Child> children;
  auto open_log = [&](int rank, bool append = false) {
    Child c;
    c.rank = rank;
    c.name = layout.ActorName(rank);
    std::string role = rank == 0 ? "coordinator" : layout.IsWorker(rank) ? "worker" : "shard";
    c.log = fmt::format("{}/rank-{}-{}.log", o.log_dir, rank, role);
    const int fd = ::open(c.log.c_str(),
                          O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0644);
    if (fd < 0) throw ConfigError(fmt::format("{}: error: cannot create log file", c.log));
    return std::make_pair(c, fd);
  };
  auto stop_all = [&](int sig) {
    for (const auto& [pid, c] : children) {
      kill(pid, sig);
      // A stopped process (SIGSTOP, a debugger's) takes the signal only once continued: without
      // this the launcher would wait for it forever.
      if (sig != SIGKILL) kill(pid, SIGCONT);
    }
  };

  int result = 0;
  try {
    // The coordinator first; it reports its port through a pipe.
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) throw ConfigError("error: pipe failed");
    auto [coord, coord_log] = open_log(0);
    std::vector<std::string> argv0 = node_argv(0);
    argv0.insert(argv0.end(), {"--port", "0", "--ready-fd", std::to_string(pipefd[1])});
    if (inject_rank == 0) argv0.insert(argv0.end(), {"--inject-fault", o.inject_fault});
    coord.pid = Spawn(argv0, /*out=*/-1, coord_log, pipefd[1]);
    ::close(coord_log);
    ::close(pipefd[1]);
    children[coord.pid] = coord;
    std::string line;
    char ch;
    while (line.size() < 16) {
      const ssize_t n = ::read(pipefd[0], &ch, 1);
      if (n == 1 && ch != '\n') {
        line += ch;
        continue;
      }
      if (n < 0 && errno == EINTR && !g_signal) continue;
      break;
    }
    // The same pipe then carries the coordinator's "dead RANK EPOCH" notices (node.h, ready_fd).
    int notice_fd = pipefd[0];
    std::string notices;
    if (line.empty()) {
      ::close(notice_fd);
      stop_all(SIGTERM);
      int status = 0;
      waitpid(coord.pid, &status, 0);
      children.clear();
      std::ifstream log(coord.log);
      std::string last, l;
      while (std::getline(log, l)) {
        if (!l.empty()) last = l;
      }
      throw ConfigError(fmt::format("error: the coordinator {} before it listened: {} (log: {})",
                                    Describe(status), last, coord.log));
    }
    if (s.devices_per_machine > 1) {
      fmt::print(stderr,
                 "launch: {} machines x {} devices ({}), {} shards; coordinator on {}:{}; logs "
                 "in {}\n",
                 s.workers, s.devices_per_machine,
                 s.client_per_device ? "one worker process per device"
                                     : "one worker process per machine",
                 s.servers, coordinator_host, line, o.log_dir);
    } else {
      fmt::print(stderr, "launch: {} workers, {} shards; coordinator on {}:{}; logs in {}\n",
                 s.workers, s.servers, coordinator_host, line, o.log_dir);
    }
    const std::string master_port = std::to_string(FreePort());
    for (int rank = 1; rank < layout.num_actors(); ++rank) {
      if (torch && layout.IsWorker(rank)) {
        if (o.no_workers) continue;
        // A training script's process, with the job in its environment.
        auto [c, fd] = open_log(rank);
        std::string set;
        for (const std::string& ov : overrides) set += ov + "\n";
        std::vector<std::string> env = {
            "POSEIDON_SCENARIO=" + Absolute(o.scenario_file), "POSEIDON_SET=" + set,
            "POSEIDON_RANK=" + std::to_string(rank),
            "POSEIDON_COORDINATOR=" + coordinator_host + ":" + line,
            "POSEIDON_SECRET_FILE=" + Absolute(secret_file), "POSEIDON_JOB_ID=" + job_id,
            "POSEIDON_LOCAL_RANK=" + std::to_string(layout.WorkerIndex(rank)),
            "POSEIDON_LOCAL_SIZE=" + std::to_string(layout.num_workers),
            "RANK=" + std::to_string(layout.WorkerIndex(rank)),
            "WORLD_SIZE=" + std::to_string(layout.num_workers),
            "LOCAL_RANK=" + std::to_string(layout.WorkerIndex(rank)),
            "LOCAL_WORLD_SIZE=" + std::to_string(layout.num_workers),
            "MASTER_ADDR=" + coordinator_host, "MASTER_PORT=" + master_port};
        if (!o.trace_dir.empty()) env.push_back("POSEIDON_TRACE_DIR=" + Absolute(o.trace_dir));
        if (!o.decisions_dir.empty()) {
          env.push_back("POSEIDON_DECISIONS_DIR=" + Absolute(o.decisions_dir));
        }
        if (!o.tls_dir.empty()) env.push_back("POSEIDON_TLS_DIR=" + Absolute(o.tls_dir));
        std::vector<std::string> a = o.worker_command;
        if (o.emulate) {
          env.push_back("POSEIDON_LISTEN=" + addr_of(rank));
          const std::string ns =
              fmt::format("{}-{}", netns_prefix, layout.machine_of[static_cast<size_t>(rank)]);
          a.insert(a.begin(), {"/usr/bin/ip", "netns", "exec", ns});
        }
        c.pid = Spawn(a, rank == 1 ? -1 : fd, fd, -1, env);
        ::close(fd);
        children[c.pid] = c;
        continue;
      }
      auto [c, fd] = open_log(rank);
      std::vector<std::string> a = node_argv(rank);
      a.insert(a.end(), {"--coordinator", coordinator_host + ":" + line});
      if (inject_rank == rank) a.insert(a.end(), {"--inject-fault", o.inject_fault});
      c.pid = Spawn(a, fd, fd, -1);
      ::close(fd);
      children[c.pid] = c;
    }
    if (o.no_workers) {
      std::string set;
      for (const std::string& ov : overrides) set += (set.empty() ? "" : "\\n") + ov;
      fmt::print("# the coordinator and shards run; start the {} workers with these (torchrun: "
                 "RANK becomes the worker):\n"
                 "export POSEIDON_SCENARIO={} POSEIDON_COORDINATOR={}:{} "
                 "POSEIDON_SECRET_FILE={} POSEIDON_JOB_ID={}{}\n",
                 layout.num_workers, Absolute(o.scenario_file), coordinator_host, line,
                 Absolute(secret_file), job_id,
                 set.empty() ? "" : fmt::format(" POSEIDON_SET=$'{}'", set));
      std::fflush(stdout);
    }
    bool stopping = false;
    const bool evict = config::EvictsDeadWorkers(s);
    int restarts = 0;
    std::map<int, int> incarnation;  // rank -> times restarted
    auto restart = [&](const Child& dead) {
      const int k = ++incarnation[dead.rank];
      ++restarts;
      fmt::print(stderr, "launch: restarting {} (rank {}) as incarnation {} (restart {} of {})\n",
                 dead.name, dead.rank, k, restarts, o.restart_on_failure);
      auto [c, fd] = open_log(dead.rank, /*append=*/true);
      std::vector<std::string> a = node_argv(dead.rank);
      a.insert(a.end(), {"--coordinator", coordinator_host + ":" + line, "--incarnation",
                         std::to_string(k)});
      c.pid = Spawn(a, fd, fd, -1);
      ::close(fd);
      children[c.pid] = c;
    };
    // A process the coordinator declared dead that still runs (SIGSTOPped, hung in the kernel)
    // holds its rank forever: kill it, and the restart below (or the job's end) follows.
    auto on_notice = [&](const std::string& notice) {
      int rank = -1;
      unsigned epoch = 0;
      if (std::sscanf(notice.c_str(), "dead %d %u", &rank, &epoch) != 2) return;
      const auto inc = incarnation.find(rank);
      if ((inc == incarnation.end() ? 0u : static_cast<unsigned>(inc->second)) != epoch) return;
      for (const auto& [pid, c] : children) {
        if (c.rank != rank) continue;
        fmt::print(stderr, "launch: the coordinator declared {} (rank {}, incarnation {}) dead; "
                           "killing it (SIGKILL), as it may be stopped\n",
                   c.name, rank, epoch);
        kill(pid, SIGKILL);
      }
    };
    // Waits up to 100 ms for a notice (or a signal) and handles the complete lines.
    auto poll_notices = [&] {
      if (notice_fd < 0) {
        ::poll(nullptr, 0, 100);
        return;
      }
      pollfd p{notice_fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) return;
      char buf[512];
      const ssize_t n = ::read(notice_fd, buf, sizeof buf);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) return;
        ::close(notice_fd);  // the coordinator is gone
        notice_fd = -1;
        return;
      }
      notices.append(buf, static_cast<size_t>(n));
      for (size_t nl; (nl = notices.find('\n')) != std::string::npos;) {
        on_notice(notices.substr(0, nl));
        notices.erase(0, nl + 1);
        if (notices.size() > 4096) notices.clear();  // not the coordinator's lines
      }
    };
    // When the coordinator exited cleanly (the job is over); empty while it runs.
    std::optional<std::chrono::steady_clock::time_point> over_since;
    // When a process left only because it lost a peer: its cause (the coordinator's watchdog, a
    // disk error, ...) is usually exiting at the same moment, and its code is the job's. The
    // others are stopped once it is in, or after a grace period.
    std::optional<std::chrono::steady_clock::time_point> peer_lost_since;
    while (!children.empty()) {
      if (peer_lost_since && !stopping &&
          std::chrono::steady_clock::now() - *peer_lost_since > std::chrono::seconds(5)) {
        fmt::print(stderr, "launch: no other process says why within 5 s; stopping the others\n");
        result = kExitPeerLost;
        stopping = true;
        stop_all(SIGTERM);
      }
      if (over_since) {
        // The job ended; a process that does not follow within a grace period (a stopped one,
        // evicted long ago) is killed.
        int status = 0;
        const pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
          children.erase(pid);
          continue;
        }
        if (std::chrono::steady_clock::now() - *over_since > std::chrono::seconds(5)) {
          for (const auto& [p, c] : children) {
            fmt::print(stderr, "launch: {} (rank {}) still runs after the job ended; killing it\n",
                       c.name, c.rank);
          }
          stop_all(SIGKILL);
          for (const auto& [p, c] : children) waitpid(p, nullptr, 0);
          children.clear();
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      if (g_signal && !stopping) {
        fmt::print(stderr, "launch: signal {}: stopping all {} processes\n",
                   static_cast<int>(g_signal), children.size());
        stopping = true;
        result = 130;
        stop_all(SIGTERM);
      }
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid == 0) {
        poll_notices();
        continue;
      }
      if (pid < 0) {
        if (errno == EINTR) continue;
        break;
      }
      auto it = children.find(pid);
      if (it == children.end()) continue;
      const Child c = it->second;
      children.erase(it);
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (stopping && result == kExitPeerLost && WIFEXITED(status) &&
          WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != kExitPeerLost) {
        // The first process out only lost a peer; this one says why (the coordinator's
        // watchdog, a disk error, ...): its code is the job's.
        fmt::print(stderr, "launch: {} (rank {}) {}: the cause; see {}\n", c.name, c.rank,
                   Describe(status), c.log);
        result = WEXITSTATUS(status);
      }
      if (c.rank == 0 && ok && !stopping) {
        // A process that left having lost a peer still failed, though the job ended.
        if (peer_lost_since) result = kExitPeerLost;
        over_since = std::chrono::steady_clock::now();
        continue;
      }
      // A bad scenario, a disk that is full, read-only or forbidden, or a shard restored without
      // its newest checkpoint: a restart would fail the same way.
      const bool config_error =
          WIFEXITED(status) && (WEXITSTATUS(status) == kExitConfig ||
                                WEXITSTATUS(status) == kExitStorage ||
                                WEXITSTATUS(status) == kExitStateLost);
      if (!ok && !stopping && c.rank != 0 && !config_error && restarts < o.restart_on_failure) {
        fmt::print(stderr, "launch: {} (rank {}) {}; see {}\n", c.name, c.rank, Describe(status),
                   c.log);
        restart(c);
        continue;
      }
      if (!ok && !stopping && layout.IsWorker(c.rank) && !config_error && evict) {
        // The job evicts a dead worker (SSP/ASP by default) and trains on without it.
        fmt::print(stderr, "launch: {} (rank {}) {}; the job goes on without it (evicted once "
                           "the coordinator declares it dead); see {}\n",
                   c.name, c.rank, Describe(status), c.log);
        continue;
      }
      if (!ok && !stopping && WIFEXITED(status) && WEXITSTATUS(status) == kExitPeerLost) {
        fmt::print(stderr, "launch: {} (rank {}) {} (it lost a peer); waiting up to 5 s for the "
                           "cause; see {}\n",
                   c.name, c.rank, Describe(status), c.log);
        if (!peer_lost_since) peer_lost_since = std::chrono::steady_clock::now();
        continue;
      }
      if (!ok && !stopping) {
        fmt::print(stderr, "launch: {} (rank {}) {}; stopping the others; see {}\n{}", c.name,
                   c.rank, Describe(status), c.log, LastError(c.log));
        result = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        stopping = true;
        stop_all(SIGTERM);
      }
    }
    if (notice_fd >= 0) ::close(notice_fd);
    if (peer_lost_since && result == 0) {
      // Every process left within the grace period, each having lost a peer, and none said why
      // (a connection that both ends refused): the job failed all the same.
      fmt::print(stderr, "launch: every process ended having lost a peer and none gave another "
                         "cause; see the 'closing the connection' lines in {}/rank-*.log\n",
                 o.log_dir);
      result = kExitPeerLost;
    }
  } catch (...) {
    stop_all(SIGKILL);
    for (const auto& [pid, c] : children) waitpid(pid, nullptr, 0);
    destroy_netns();
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    throw;
  }
  destroy_netns();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return result;
}

}  // namespace poseidon::rt
