#include "apps/poseidon/live_command.h"

#include "apps/poseidon/cli_checks.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/job_config.h"
#include "config/scenario.h"
#include "core/trace.h"
#include "config/yaml_reader.h"
#include "kernels/checkpoint.h"
#include "kernels/sgd.h"
#include "real_runtime/launch.h"
#include "real_runtime/node.h"
#include "real_runtime/secret_file.h"
#include "real_runtime/tls_files.h"
#include "real_runtime/transport.h"

namespace poseidon::app {
namespace {

using config::ConfigError;

// The training flags `node` takes and `launch` passes on to every node.
struct TrainingFlags {
  std::string backend = "cpu", data_dir, lr_policy = "fixed", csv, save_params, save_dir;
  std::string compute = "real", decisions_dir;
  std::string tls_dir;
  double lr = 0.01, momentum = 0.9, weight_decay = 0.0005, gamma = 0.1, power = 1;
  int64_t stepsize = 0, print_interval = 100;
  int64_t progress_timeout = 600;
  bool no_test = false;

  void Add(CLI::App* c) {
    c->add_option("--backend", backend, "reference | cpu | cuda")->capture_default_str();
    c->add_option("--data-dir", data_dir, "folder with the Fashion-MNIST IDX files");
    c->add_option("--lr", lr, "base learning rate")->capture_default_str();
    c->add_option("--momentum", momentum)->capture_default_str();
    c->add_option("--weight-decay", weight_decay)->capture_default_str();
    c->add_option("--lr-policy", lr_policy, "fixed | step | poly")->capture_default_str();
    c->add_option("--gamma", gamma, "step: factor per stepsize")->capture_default_str();
    c->add_option("--stepsize", stepsize, "step: iterations (0 = iterations/3)");
    c->add_option("--power", power, "poly: power")->capture_default_str();
    c->add_option("--print-interval", print_interval)->capture_default_str();
    c->add_option("--progress-timeout", progress_timeout,
                  "coordinator: end the job, saying what every process waits for, when no "
                  "worker finished an iteration for this many seconds (0 = never)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 31));
    c->add_option("--csv", csv, "coordinator: write the learning curve here");
    c->add_flag("--no-test", no_test, "skip the test-set accuracy at the end");
    c->add_option("--compute", compute,
                  "real (kernels on Fashion-MNIST) | replay (sleep the scenario's profiled times)")
        ->capture_default_str();
    c->add_option("--decisions-dir", decisions_dir,
                  "every process writes its protocol decisions to DIR/rank-R.txt");
    c->add_option("--save-params", save_params,
                  "workers: write the final parameters (raw float32) here; {rank} = the rank");
    c->add_option("--save", save_dir,
                  "write worker 1's final parameters as a checkpoint folder (.npy + index.json, "
                  "for 'poseidon evaluate'); {rank} = every worker its own");
    c->add_option("--tls-dir", tls_dir,
                  "encrypt every connection with TLS, the job's identity from DIR (cert.pem, "
                  "key.pem, optional ca.pem; make them with 'poseidon tls-init DIR')");
  }
  std::vector<std::string> Args() const {
    std::vector<std::string> a = {"--backend", backend, "--lr", fmt::format("{}", lr),
                                  "--momentum", fmt::format("{}", momentum), "--weight-decay",
                                  fmt::format("{}", weight_decay), "--lr-policy", lr_policy,
                                  "--gamma", fmt::format("{}", gamma), "--stepsize",
                                  std::to_string(stepsize), "--power", fmt::format("{}", power),
                                  "--print-interval", std::to_string(print_interval),
                                  "--progress-timeout", std::to_string(progress_timeout)};
    if (!data_dir.empty()) a.insert(a.end(), {"--data-dir", data_dir});
    if (!csv.empty()) a.insert(a.end(), {"--csv", csv});
    if (no_test) a.push_back("--no-test");
    if (!save_params.empty()) a.insert(a.end(), {"--save-params", save_params});
    if (!save_dir.empty()) a.insert(a.end(), {"--save", save_dir});
    a.insert(a.end(), {"--compute", compute});
    if (!decisions_dir.empty()) a.insert(a.end(), {"--decisions-dir", decisions_dir});
    if (!tls_dir.empty()) a.insert(a.end(), {"--tls-dir", tls_dir});
    return a;
  }
  rt::LiveTraining Build() const {
    rt::LiveTraining t;
    t.backend = backend;
    t.data_dir = data_dir;
    if (!kernels::LrPolicyFromName(lr_policy, &t.sgd.policy)) {
      throw ConfigError(fmt::format("error: --lr-policy: unknown policy '{}'; known: {}",
                                    lr_policy, kernels::KnownLrPolicies()));
    }
    if (!(lr >= 0) || !(momentum >= 0 && momentum < 1) || !(weight_decay >= 0)) {
      throw ConfigError("error: --lr and --weight-decay must be >= 0 and --momentum in [0, 1)");
    }
    if (print_interval <= 0) throw ConfigError("error: --print-interval must be positive");
    t.sgd.base_lr = lr;
    t.sgd.momentum = momentum;
    t.sgd.weight_decay = weight_decay;
    t.sgd.gamma = gamma;
    t.sgd.stepsize = stepsize;
    t.sgd.power = power;
    t.sgd.max_iter = 0;  // the scenario's iterations
    t.print_interval = print_interval;
    t.csv = csv;
    t.test = !no_test;
    t.save_params = save_params;
    t.save_dir = save_dir;
    if (!save_dir.empty() && save_dir.find("{rank}") == std::string::npos) {
      try {  // a folder that cannot be written fails the job now, not at its end
        kernels::PrepareCheckpointDir(save_dir);
      } catch (const kernels::CheckpointError& e) {
        throw ConfigError(e.what());
      }
    }
    return t;
  }
};

// f(), with a std::runtime_error (a file problem) reported as bad input (exit 2).
template <typename F>
auto WithConfigErrors(F&& f) {
  try {
    return f();
  } catch (const ConfigError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw ConfigError(std::string("error: ") + e.what());
  }
}

bool SplitHostPort(const std::string& s, std::string* host, uint16_t* port) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  const std::string p = s.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  const int v = std::stoi(p);
  if (v > 65535) return false;
  *host = s.substr(0, colon);
  *port = static_cast<uint16_t>(v);
  return true;
}

class Commands final : public LiveCommands {
 public:
  explicit Commands(CLI::App& app) {
    node_ = app.add_subcommand("node", "run one process of a live job (a coordinator, worker or "
                                       "server shard)");
    node_->add_option("scenario", node_scenario_, "scenario YAML file")->required();
    node_->add_option("command", node_command_,
                      "a 'model: torch' job: after '--', what a worker rank runs (python "
                      "train.py ARGS), with the job in its environment (docs/torch.md)");
    node_->add_option("--set", node_overrides_, "override a scenario key: KEY=VALUE");
    node_->add_option("--rank", rank_,
                      "0 coordinator, 1..P workers (a machine each, or with cluster.client: "
                      "device a device each), P+1.. shards (default: from mpirun or Slurm)");
    node_->add_option("--coordinator", coordinator_,
                      "HOST:PORT where rank 0 listens; give the same to every rank (srun, mpirun): "
                      "rank 0 listens there, the others dial it (rank 0 alone may use --port)");
    node_->add_option("--port", port_, "rank 0: port to listen on (0 = any)");
    node_->add_option("--listen", listen_, "address to listen on")->capture_default_str();
    node_->add_option("--advertise", advertise_, "address peers dial (default: --listen)");
    node_->add_option("--secret-file", secret_file_, "file with the job's shared secret (0600)")
        ->required();
    node_->add_option("--job-id", job_id_, "the job's id, the same on every process")
        ->capture_default_str();
    node_->add_option("--ready-fd", ready_fd_, "rank 0: write the port here once listening");
    node_->add_option("--trace", trace_, "write this process's Chrome-trace JSON here");
    node_->add_option("--trace-dir", trace_dir_node_, "write it as DIR/rank-R.json");
    node_->add_option("--checkpoint-dir", checkpoint_dir_,
                      "shards: write checkpoints here (protocol.fault_tolerance.checkpoint_every)");
    node_->add_option("--inject-fault", inject_fault_,
                      "tests only: RANK:PHASE:CLOCK:ACTION (real_runtime/fault_injection.h)")
        ->group("");  // not in --help: not for users
    node_->add_option("--rendezvous-timeout", rendezvous_timeout_,
                      "seconds to wait for every process to join before failing with who is "
                      "missing (0 = forever)")
        ->capture_default_str()
        ->check(CLI::Range(0, 86400));
    node_->add_option("--incarnation", incarnation_,
                      "a restarted process: how many times this rank was started before (> 0 "
                      "rejoins the running job)")
        ->check(CLI::Range(0, 1 << 30));
    node_->add_flag("--resume", resume_,
                    "continue a stopped job from the shards' checkpoints in --checkpoint-dir "
                    "(every rank; docs/checkpoints.md)");
    node_flags_.Add(node_);

    launch_app_ = app.add_subcommand("launch", "run a whole live job on this machine, one process "
                                           "per coordinator, worker and shard");
    launch_app_->add_option("scenario", launch_.scenario_file,
                            "scenario YAML file (--torch: default scenarios/live/torch.yaml)");
    launch_app_->add_option("command", launch_.worker_command,
                            "--torch: after '--', each worker's command (python train.py ARGS)");
    launch_app_->add_flag("--torch", launch_torch_,
                          "the workers are a PyTorch training script's processes "
                          "(poseidon.torch; docs/torch.md): poseidon launch --torch [SCENARIO] "
                          "-- python train.py ARGS");
    launch_app_->add_flag("--no-workers", launch_.no_workers,
                          "--torch: start the coordinator and shards only, and print what the "
                          "workers (torchrun's, say) must export");
    launch_app_->add_option("--set", launch_.overrides, "override a scenario key: KEY=VALUE");
    launch_app_->add_option("--workers", launch_.workers,
                            "worker machines (default: the scenario's); --machines says the same")
        ->check(AtLeast(1));
    launch_app_->add_option("--machines", launch_.machines,
                            "worker machines (default: the scenario's cluster.machines)")
        ->check(AtLeast(1));
    launch_app_->add_option("--devices-per-machine", launch_.devices_per_machine,
                            "devices (GPUs, or CPU worker threads) per worker machine (default: "
                            "the scenario's; cluster.client says whether a machine runs one "
                            "process or one per device)")
        ->check(AtLeast(1));
    launch_app_->add_option("--servers", launch_.servers, "server shards (default: the scenario's)")
        ->check(AtLeast(1));
    launch_app_->add_option("--log-dir", launch_.log_dir, "one log per process, and the job's secret")
        ->capture_default_str();
    launch_app_->add_flag("--emulate", launch_.emulate,
                          "run every machine in its own network namespace, links shaped with tc "
                          "tbf (root; scripts/netns-run)");
    launch_app_->add_option("--emulate-gbps", launch_.emulate_gbps,
                            "link rate of the emulated cluster (default: the scenario's)");
    launch_app_->add_option("--job-id", launch_.job_id, "the job's id (default: launch-PID-TIME)");
    launch_app_->add_option("--trace-dir", trace_dir_, "every process writes its trace here");
    launch_app_->add_option("--inject-fault", launch_.inject_fault,
                            "tests only: RANK:PHASE:CLOCK:ACTION, given to that rank's first "
                            "incarnation (real_runtime/fault_injection.h)")
        ->group("");
    launch_app_->add_flag("--resume", launch_.resume,
                          "continue the job that stopped with this --log-dir from its checkpoints "
                          "(LOG_DIR/checkpoints; needs protocol.fault_tolerance.checkpoint_every)");
    launch_app_->add_option("--restart-on-failure", launch_.restart_on_failure,
                            "restart a worker or shard that fails, up to N restarts in all "
                            "(needs protocol.fault_tolerance)")
        ->check(AtLeast(0));
    launch_flags_.Add(launch_app_);
    launch_app_->add_flag("--tls", launch_tls_,
                          "encrypt every connection with TLS: a new identity for this job in "
                          "LOG_DIR/tls (tls-init), given to every process as --tls-dir");

    tls_init_ = app.add_subcommand(
        "tls-init", "write a job's TLS identity (a self-signed CA certificate and its key) for "
                    "node/launch --tls-dir");
    tls_init_->add_option("dir", tls_init_dir_, "folder for cert.pem and key.pem (0600)")->required();
    tls_init_->add_option("--days", tls_identity_.days, "validity in days")
        ->check(AtLeast(1))
        ->capture_default_str();
    tls_init_->add_option("--name", tls_identity_.common_name, "the certificate's common name")
        ->capture_default_str();
    tls_init_->add_flag("--force", tls_identity_.overwrite, "replace existing files");

    CLI::App* trace = app.add_subcommand("trace", "work with Chrome-trace timelines");
    merge_app_ = trace->add_subcommand("merge", "join live processes' traces into one timeline");
    merge_app_->add_option("traces", merge_inputs_, "trace JSON files (launch --trace-dir)")
        ->required();
    merge_app_->add_option("-o,--output", merge_output_, "merged trace JSON")->required();
  }

  bool TakeCommand(std::vector<std::string> words) override {
    std::vector<std::string>* command = node_->parsed()         ? &node_command_
                                        : launch_app_->parsed() ? &launch_.worker_command
                                                                : nullptr;
    if (command == nullptr) return false;
    command->insert(command->end(), std::make_move_iterator(words.begin()),
                    std::make_move_iterator(words.end()));
    return true;
  }

  int RunIfParsed() override {
    if (node_->parsed()) return RunNodeCommand();
    if (merge_app_->parsed()) return RunMerge();
    if (tls_init_->parsed()) {
      const rt::TlsFiles f =
          WithConfigErrors([&] { return rt::WriteJobTlsFiles(tls_init_dir_, tls_identity_); });
      fmt::print(stderr,
                 "wrote {} and {} (owner-only); copy {} to every machine of the job and give each "
                 "process --tls-dir {}\n",
                 f.cert, f.key, tls_init_dir_, tls_init_dir_);
      return 0;
    }
    if (launch_app_->parsed()) {
      if (launch_tls_) {
        if (!launch_flags_.tls_dir.empty()) {
          throw ConfigError("error: --tls makes a new identity and --tls-dir uses one; give one of them");
        }
        rt::TlsIdentityOptions id;
        id.overwrite = true;  // a new identity per job, like its secret
        launch_flags_.tls_dir = launch_.log_dir + "/tls";
        WithConfigErrors([&] { return rt::WriteJobTlsFiles(launch_flags_.tls_dir, id); });
      }
      if (!launch_torch_ && (!launch_.worker_command.empty() || launch_.no_workers)) {
        throw ConfigError("error: a worker command (after '--') and --no-workers are for a "
                          "PyTorch job: add --torch");
      }
      if (launch_torch_) {
        // `launch --torch -- python train.py`: CLI11 gives the command's first word to the
        // scenario; a scenario is a YAML file.
        const std::string& sc = launch_.scenario_file;
        const bool yaml = sc.size() > 5 && (sc.ends_with(".yaml") || sc.ends_with(".yml"));
        if (!sc.empty() && !yaml) {
          launch_.worker_command.insert(launch_.worker_command.begin(), sc);
          launch_.scenario_file.clear();
        }
        if (launch_.scenario_file.empty()) {
          launch_.scenario_file = std::string(POSEIDON_DATA_DIR) + "/live/torch.yaml";
        }
        if (launch_.worker_command.empty() && !launch_.no_workers) {
          throw ConfigError("error: --torch needs the workers' command after '--' (poseidon "
                            "launch --torch [SCENARIO] -- python train.py ARGS), or --no-workers");
        }
        launch_.trace_dir = trace_dir_;
        launch_.decisions_dir = launch_flags_.decisions_dir;
        launch_.tls_dir = launch_flags_.tls_dir;
      } else if (launch_.scenario_file.empty()) {
        throw ConfigError("error: launch needs a scenario file (poseidon launch SCENARIO.yaml)");
      }
      launch_.node_args = launch_flags_.Args();
      launch_.netns_script = std::string(POSEIDON_DATA_DIR) + "/../scripts/netns-run";
      (void)launch_flags_.Build();  // reject bad flags before anything starts
      if (!trace_dir_.empty()) {
        launch_.node_args.insert(launch_.node_args.end(), {"--trace-dir", trace_dir_});
      }
      return rt::RunLaunch(launch_);
    }
    return -1;
  }

 private:
  int RunMerge() {
    std::vector<std::string> texts;
    for (const std::string& path : merge_inputs_) {
      std::ifstream f(path, std::ios::binary);
      if (!f) throw ConfigError(path + ": error: cannot read the trace");
      std::stringstream ss;
      ss << f.rdbuf();
      texts.push_back(ss.str());
    }
    std::string merged, error;
    if (!core::MergeChromeTraces(texts, &merged, &error)) {
      // "input N" -> the file's name.
      const size_t at = error.find("input ");
      size_t n = 0;
      if (at != std::string::npos) n = std::stoul(error.substr(at + 6));
      throw ConfigError(fmt::format("{}: error: {}", n >= 1 && n <= merge_inputs_.size()
                                                          ? merge_inputs_[n - 1]
                                                          : merge_output_,
                                    error));
    }
    std::ofstream out(merge_output_, std::ios::binary);
    if (!out || !(out << merged) || !out.flush()) {
      throw ConfigError(merge_output_ + ": error: cannot write file; check the folder exists");
    }
    std::cerr << "merged " << merge_inputs_.size() << " traces into " << merge_output_
              << " (open it in https://ui.perfetto.dev)\n";
    return 0;
  }

  int RunNodeCommand() {
    rt::NodeOptions o;
    o.scenario = config::LoadScenarioFile(node_scenario_, node_overrides_);
    int size = -1;
    std::string source;
    if (rank_ < 0) {
      if (!rt::RankFromEnvironment(&rank_, &size, &source)) {
        throw ConfigError("error: no --rank, and no launcher's rank in the environment "
                          "(OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID); give --rank");
      }
      const int workers = config::ProtocolWorkers(o.scenario);
      const int want = 1 + workers + o.scenario.servers;
      if (size != want) {
        throw ConfigError(fmt::format(
            "error: {} says the job has {} processes but scenario {} needs {} (1 coordinator + "
            "{} workers{} + {} shards)",
            source, size, node_scenario_, want, workers,
            o.scenario.devices_per_machine == 1 ? ""
            : o.scenario.client_per_device
                ? fmt::format(": {} machines x {} devices, one per device", o.scenario.workers,
                              o.scenario.devices_per_machine)
                : fmt::format(": one per machine of {} devices", o.scenario.devices_per_machine),
            o.scenario.servers));
      }
    }
    o.rank = rank_;
    if (rank_ == 0) {
      o.coordinator_port = port_;
      if (!coordinator_.empty() && !SplitHostPort(coordinator_, &o.coordinator_host,
                                                  &o.coordinator_port)) {
        throw ConfigError("error: --coordinator must be HOST:PORT, got '" + coordinator_ + "'");
      }
    } else if (!SplitHostPort(coordinator_, &o.coordinator_host, &o.coordinator_port)) {
      throw ConfigError("error: --coordinator must be HOST:PORT (the address rank 0 listens on), "
                        "got '" + coordinator_ + "'");
    }
    if (rank_ == 0 && !coordinator_.empty() && listen_ == "127.0.0.1") listen_ = o.coordinator_host;
    if (o.scenario.model_from_workers &&
        config::BuildLayout(o.scenario).IsWorker(rank_)) {
      return ExecTorchWorker(o);
    }
    o.listen_host = listen_;
    o.advertise_host = advertise_;
    try {
      o.transport.secret = rt::LoadSecretFile(secret_file_);
    } catch (const std::runtime_error& e) {
      throw ConfigError(e.what());
    }
    o.transport.job_id = job_id_;
    // A cloud's cap on one flow, as the scenario prices it, on each of this process's connections.
    o.transport.max_pacing_Bps = o.scenario.network.connection_Bps;
    if (!node_flags_.tls_dir.empty()) {
      const rt::TlsFiles f = WithConfigErrors([&] { return rt::JobTlsFiles(node_flags_.tls_dir); });
      o.transport.tls = true;
      o.transport.tls_cert = f.cert;
      o.transport.tls_key = f.key;
      o.transport.tls_ca = f.ca;
    }
    o.ready_fd = ready_fd_;
    o.rendezvous_timeout = std::chrono::seconds(rendezvous_timeout_);
    o.progress_timeout = std::chrono::seconds(node_flags_.progress_timeout);
    o.training = node_flags_.Build();
    for (const std::string& d : {trace_dir_node_, node_flags_.decisions_dir}) {
      std::error_code ec;
      if (!d.empty()) std::filesystem::create_directories(d, ec);
    }
    if (!trace_dir_node_.empty()) {
      o.trace_file = fmt::format("{}/rank-{}.json", trace_dir_node_, rank_);
    }
    if (!trace_.empty()) o.trace_file = trace_;
    o.compute = node_flags_.compute;
    o.checkpoint_dir = checkpoint_dir_;
    o.transport.epoch = static_cast<uint32_t>(incarnation_);
    o.rejoin = incarnation_ > 0;
    o.resume = resume_;
    if (!inject_fault_.empty()) {
      try {
        o.inject = rt::ParseFaultSpec(inject_fault_);
      } catch (const std::invalid_argument& e) {
        throw ConfigError(std::string("error: ") + e.what());
      }
    }
    if (!node_flags_.decisions_dir.empty()) {
      o.decisions_file = fmt::format("{}/rank-{}.txt", node_flags_.decisions_dir, rank_);
    }
    return rt::RunNode(o);
  }

  // A worker rank of a 'model: torch' job under srun or mpirun: this process becomes the
  // training script (poseidon.torch.init() reads the job from the environment).
  int ExecTorchWorker(const rt::NodeOptions& o) {
    if (node_command_.empty()) {
      throw ConfigError(fmt::format(
          "error: rank {} is a worker of a 'model: torch' job ({}): give the training script "
          "after '--' (poseidon node SCENARIO --coordinator HOST:PORT --secret-file F -- python "
          "train.py)",
          rank_, node_scenario_));
    }
    auto absolute = [](const std::string& path) {
      std::error_code ec;
      const auto p = std::filesystem::absolute(path, ec);
      return ec ? path : p.string();
    };
    std::string set;
    for (const std::string& ov : node_overrides_) set += ov + "\n";
    const core::JobLayout layout = config::BuildLayout(o.scenario);
    const std::map<std::string, std::string> env = {
        {"POSEIDON_SCENARIO", absolute(node_scenario_)},
        {"POSEIDON_SET", set},
        {"POSEIDON_RANK", std::to_string(rank_)},
        {"POSEIDON_COORDINATOR", coordinator_},
        {"POSEIDON_SECRET_FILE", absolute(secret_file_)},
        {"POSEIDON_JOB_ID", job_id_},
        {"POSEIDON_LISTEN", listen_},
        {"POSEIDON_ADVERTISE", advertise_},
        {"POSEIDON_TRACE_DIR", trace_dir_node_.empty() ? "" : absolute(trace_dir_node_)},
        {"POSEIDON_DECISIONS_DIR",
         node_flags_.decisions_dir.empty() ? "" : absolute(node_flags_.decisions_dir)},
        {"POSEIDON_TLS_DIR", node_flags_.tls_dir.empty() ? "" : absolute(node_flags_.tls_dir)},
        {"RANK", std::to_string(layout.WorkerIndex(rank_))},
        {"WORLD_SIZE", std::to_string(layout.num_workers)},
    };
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    for (std::string& a : node_command_) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    throw ConfigError(fmt::format("error: cannot run {}: {}", node_command_[0],
                                  std::strerror(errno)));
  }

  CLI::App* node_ = nullptr;
  std::vector<std::string> node_command_;
  std::string node_scenario_;
  std::vector<std::string> node_overrides_;
  int rank_ = -1;
  std::string coordinator_;
  uint16_t port_ = 0;
  std::string listen_ = "127.0.0.1", advertise_, secret_file_, job_id_ = "poseidon";
  int ready_fd_ = -1;
  int rendezvous_timeout_ = 120;
  std::string inject_fault_;
  std::string trace_, trace_dir_node_, checkpoint_dir_;
  int incarnation_ = 0;
  bool resume_ = false;
  TrainingFlags node_flags_;

  CLI::App* merge_app_ = nullptr;
  std::vector<std::string> merge_inputs_;
  std::string merge_output_;
  CLI::App* launch_app_ = nullptr;
  rt::LaunchOptions launch_;
  bool launch_tls_ = false;
  bool launch_torch_ = false;
  CLI::App* tls_init_ = nullptr;
  std::string tls_init_dir_;
  rt::TlsIdentityOptions tls_identity_;
  std::string trace_dir_;
  TrainingFlags launch_flags_;
};

}  // namespace

std::unique_ptr<LiveCommands> AddLiveCommands(CLI::App& app) {
  return std::make_unique<Commands>(app);
}

}  // namespace poseidon::app
