// tests/real_runtime/live_helpers.h: what the end-to-end tests of live jobs share (live_test.cc,
// multi_device_test.cc, security_test.cc, fault_test.cc, ...): running the poseidon binary,
// reading its files, a Fashion-MNIST subset that loads in milliseconds (and a suite folder that
// holds it), a job running in the background, and the job's processes in /proc.
//
//   Result r = Shell(kBin + " launch " + kRoot + "/scenarios/live/fmnist_mlp.yaml ...");
//   BackgroundJob job(kBin + " launch ...", dir + "/out.txt");  // polled, then job.Wait()
//
// The including test target defines POSEIDON_BINARY (the poseidon executable) and
// POSEIDON_SOURCE_DIR (the source tree).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/data/idx.h"
#include "tests/shell_helpers.h"

namespace poseidon::rt::live {

inline const std::string kBin = POSEIDON_BINARY;
inline const std::string kRoot = POSEIDON_SOURCE_DIR;

using Result = testing::ShellResult;
using testing::ReadFile;
using testing::WriteFile;
using testing::Shell;

// The float32 values of a raw parameter file (`launch --save-params`), in order.
inline std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<float> v;
  float x;
  while (f.read(reinterpret_cast<char*>(&x), sizeof x)) v.push_back(x);
  return v;
}

// Losses by iteration from a learning-curve CSV (iteration,loss,test_accuracy,seconds).
inline std::vector<double> Losses(const std::string& csv) {
  std::vector<double> v;
  std::istringstream in(ReadFile(csv));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream row(line);
    std::string it, loss;
    std::getline(row, it, ',');
    std::getline(row, loss, ',');
    v.push_back(std::stod(loss));
  }
  return v;
}

// A learning-curve CSV without its wall-clock column: "iteration,loss,test_accuracy" per row,
// the part two runs of the same BSP job must agree on byte for byte.
inline std::vector<std::string> CurveWithoutSeconds(const std::string& csv) {
  std::vector<std::string> rows;
  std::istringstream in(ReadFile(csv));
  std::string line;
  while (std::getline(in, line)) rows.push_back(line.substr(0, line.rfind(',')));
  return rows;
}

// Root with working network namespaces (for the emulated-cluster tests).
inline bool NamespacesAvailable() {
  const std::string probe = "poseidon-probe-" + std::to_string(getpid());
  return geteuid() == 0 && Shell("ip netns add " + probe + " && ip netns del " + probe).rc == 0;
}

// 4,096 training and 1,000 test images of the real data set, written gzipped into `dir`, so
// that every process of a test job loads its data in milliseconds.
inline void WriteFashionMnistSubset(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string src = kernels::DefaultFashionMnistDir();
  auto cut = [&](const std::string& name, int64_t n) {
    kernels::IdxArray a = kernels::ReadIdx(src + "/" + name);
    int64_t per = 1;
    for (size_t i = 1; i < a.dims.size(); ++i) per *= a.dims[i];
    a.dims[0] = n;
    a.data.resize(static_cast<size_t>(n * per));
    kernels::WriteIdx(dir + "/" + name, a, /*gzip=*/true);
  };
  cut("train-images-idx3-ubyte.gz", 4096);
  cut("train-labels-idx1-ubyte.gz", 4096);
  cut("t10k-images-idx3-ubyte.gz", 1000);
  cut("t10k-labels-idx1-ubyte.gz", 1000);
}

// A test suite whose jobs share one folder under the temp directory (Suite::kDirName, "_", the
// pid) with the Fashion-MNIST subset above in data/: made before the suite's first test, removed
// after its last. Each suite has its own folder (the template keeps one per Suite).
//   class LiveTest : public live::DataSuite<LiveTest> { static constexpr char kDirName[] = "x"; };
template <class Suite>
class DataSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           (std::string(Suite::kDirName) + "_" + std::to_string(getpid())));
    WriteFashionMnistSubset(*dir_ + "/data");
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Dir() { return *dir_; }

 private:
  static inline std::string* dir_ = nullptr;
};

// A shell command running in the background (`exec CMD > out 2>&1`, so the pid is the
// command's own); stopped with SIGTERM if still running when destroyed.
class BackgroundJob {
 public:
  BackgroundJob(const std::string& cmd, const std::string& out_file) : out_(out_file) {
    const std::string line = "exec " + cmd + " > '" + out_file + "' 2>&1";
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~BackgroundJob() {
    if (pid_ > 0 && rc_ < 0) {
      kill(pid_, SIGTERM);
      Wait();
    }
  }
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;

  pid_t pid() const { return pid_; }
  // Whether the command is still running (reaps it once it has ended).
  bool Running() {
    if (rc_ >= 0 || pid_ <= 0) return false;
    int st = 0;
    const pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == 0) return true;
    rc_ = r == pid_ && WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    return false;
  }
  // Waits for the command to end; its exit code (128 if it was killed by a signal).
  int Wait() {
    if (rc_ >= 0 || pid_ <= 0) return rc_;
    int st = 0;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    rc_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    return rc_;
  }
  std::string Output() const { return ReadFile(out_); }

 private:
  std::string out_;
  pid_t pid_ = -1;
  int rc_ = -1;
};

// Polls `done` every few milliseconds until it returns true or `timeout` has passed.
template <typename F>
bool PollUntil(F&& done, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A process's argv (/proc/PID/cmdline split at its NUL bytes); empty when it is gone.
inline std::vector<std::string> ProcArgv(pid_t pid) {
  const std::string raw = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> argv;
  std::string cur;
  for (char c : raw) {
    if (c == '\0') {
      argv.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return argv;
}

// The processes of one job whose executable is the poseidon binary and one of whose arguments
// contains `needle` (e.g. the job's log folder): pid -> argv.
inline std::map<pid_t, std::vector<std::string>> JobProcesses(const std::string& needle) {
  std::map<pid_t, std::vector<std::string>> found;
  std::error_code ec;
  const auto bin = std::filesystem::canonical(kBin, ec);
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    std::error_code ec2;
    if (std::filesystem::read_symlink(e.path() / "exe", ec2) != bin || ec2) continue;
    std::vector<std::string> argv = ProcArgv(pid);
    for (const std::string& a : argv) {
      if (a.find(needle) != std::string::npos) {
        found[pid] = std::move(argv);
        break;
      }
    }
  }
  return found;
}

// The value after `flag` in argv, or "" when absent.
inline std::string ArgAfter(const std::vector<std::string>& argv, const std::string& flag) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag) return argv[i + 1];
  }
  return "";
}

// How many file descriptors the process has open; -1 when it is gone.
inline int OpenFds(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return ec ? -1 : n;
}

}  // namespace poseidon::rt::live
