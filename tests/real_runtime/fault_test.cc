// Fault injection end to end: `poseidon launch` of scenarios/live/fmnist_mlp_ft.yaml with one
// process killed (SIGKILL) or stopped (SIGSTOP) at a chosen phase and clock
// (`launch --inject-fault`, real_runtime/fault_injection.h). Under BSP a restarted worker or shard must end
// the job with the parameters of a run without the fault, bit for bit; under SSP a stopped
// worker is evicted and the others still converge; losing the coordinator ends the job cleanly.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "real_runtime/fault_injection.h"
#include "tests/real_runtime/live_helpers.h"

namespace poseidon::rt {
namespace {

namespace fs = std::filesystem;
using namespace live;  // NOLINT: the shared helpers of the live end-to-end tests

// The (iteration, loss) columns of a learning curve.
std::string LossColumns(const std::string& csv) {
  std::istringstream in(ReadFile(csv));
  std::string line, out;
  while (std::getline(in, line)) {
    const size_t second = line.find(',', line.find(',') + 1);
    out += line.substr(0, second) + "\n";
  }
  return out;
}

double LastLoss(const std::string& csv) {
  std::istringstream in(ReadFile(csv));
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  const size_t a = last.find(',');
  return std::stod(last.substr(a + 1, last.find(',', a + 1) - a - 1));
}

class FaultTest : public ::testing::Test {
 protected:
  static constexpr int kIterations = 40;
  // 4,096 training images of the real data set (every process loads them in milliseconds), and
  // the fault-free run every BSP test compares with.
  static void SetUpTestSuite() {
    dir_ = new std::string(fs::temp_directory_path() / ("poseidon-fault-" + std::to_string(getpid())));
    WriteFashionMnistSubset(*dir_ + "/data");
    clean_ = new Result(Launch("clean", "", ""));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete clean_;
  }
  static Result Launch(const std::string& name, const std::string& fault, const std::string& args) {
    const std::string d = *dir_ + "/" + name;
    return Shell(kBin + " launch " + kRoot + "/scenarios/live/fmnist_mlp_ft.yaml --data-dir " + *dir_ +
                 "/data --log-dir " + d + " --set iterations=" + std::to_string(kIterations) +
                 " --no-test --print-interval 10 --csv " + d + ".csv --save-params " + d +
                 "-{rank}.bin " + (fault.empty() ? "" : "--inject-fault " + fault + " ") + args);
  }
  static std::string Dir() { return *dir_; }
  // The run ended as the fault-free one did: same losses, same parameters on both workers.
  static void ExpectSameAsClean(const std::string& name, const Result& r) {
    ASSERT_EQ(clean_->rc, 0) << clean_->out;
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(LossColumns(Dir() + "/" + name + ".csv"), LossColumns(Dir() + "/clean.csv"));
    for (int rank : {1, 2}) {
      const std::string want = ReadFile(fmt(Dir() + "/clean-", rank));
      ASSERT_FALSE(want.empty());
      EXPECT_TRUE(ReadFile(fmt(Dir() + "/" + name + "-", rank)) == want)
          << "worker rank " << rank << "'s final parameters differ from the fault-free run";
    }
  }
  static std::string fmt(const std::string& prefix, int rank) {
    return prefix + std::to_string(rank) + ".bin";
  }
  static std::string* dir_;
  static Result* clean_;
};
std::string* FaultTest::dir_ = nullptr;
Result* FaultTest::clean_ = nullptr;

TEST_F(FaultTest, BspWorkerKilledDuringPushRejoinsAndEndsBitIdentical) {
  Result r = Launch("w-push", "2:push:12:kill", "--restart-on-failure 1");
  EXPECT_NE(r.out.find("restarting worker 1 (rank 2) as incarnation 1"), std::string::npos) << r.out;
  ExpectSameAsClean("w-push", r);
  const std::string log = ReadFile(Dir() + "/w-push/rank-2-worker.log");
  EXPECT_NE(log.find("injected fault"), std::string::npos) << log;
  // It continued its data stream from its own checkpoint of clock 10, then skipped to 12.
  EXPECT_NE(log.find("data stream restored from"), std::string::npos) << log;
}

TEST_F(FaultTest, BspWorkerKilledDuringPullRejoinsAndEndsBitIdentical) {
  Result r = Launch("w-pull", "1:pull:17:kill", "--restart-on-failure 1");
  EXPECT_NE(r.out.find("restarting worker 0 (rank 1)"), std::string::npos) << r.out;
  ExpectSameAsClean("w-pull", r);
}

// The shard dies with the checkpoint of clock 20 written to its temporary file but not renamed:
// it comes back from the checkpoint of clock 10, and the workers' kept pushes replay 10..20.
TEST_F(FaultTest, BspShardKilledDuringACheckpointWriteRestoresAndEndsBitIdentical) {
  Result r = Launch("s-ckpt", "4:checkpoint:20:kill", "--restart-on-failure 1");
  EXPECT_NE(r.out.find("restarting shard 1 (rank 4)"), std::string::npos) << r.out;
  ExpectSameAsClean("s-ckpt", r);
  const std::string log = ReadFile(Dir() + "/s-ckpt/rank-4-shard.log");
  EXPECT_NE(log.find("every push of clocks below 10 applied"), std::string::npos) << log;
}

TEST_F(FaultTest, BspShardKilledDuringPushRestoresAndEndsBitIdentical) {
  Result r = Launch("s-push", "3:push:25:kill", "--restart-on-failure 1");
  EXPECT_NE(r.out.find("restarting shard 0 (rank 3)"), std::string::npos) << r.out;
  ExpectSameAsClean("s-push", r);
}

// A stopped worker (SIGSTOP, never continued) under BSP: the coordinator declares it dead, the
// launcher kills the stopped process and restarts it, it rejoins, and the job ends with the
// parameters of a run without the fault (it used to wait for SIGCONT forever).
TEST_F(FaultTest, BspStoppedWorkerIsKilledRestartedAndEndsBitIdentical) {
  Result r = Launch("w-stop", "2:push:12:stop", "--restart-on-failure 1");
  EXPECT_NE(r.out.find("the coordinator declared worker 1 (rank 2, incarnation 0) dead; killing "
                       "it (SIGKILL)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("restarting worker 1 (rank 2) as incarnation 1"), std::string::npos) << r.out;
  ExpectSameAsClean("w-stop", r);
}

// The shards' checkpoint folder is on a full disk (a 4 MiB tmpfs; a shard's checkpoint is about
// 5 MiB): the first checkpoint fails with ENOSPC, the shard exits with code 5 naming the file,
// and launch stops the job at once instead of restarting it three times into the same error.
TEST_F(FaultTest, AFullDiskStopsTheJobAtOnceNamingTheFile) {
  const std::string mnt = Dir() + "/tiny";
  fs::create_directories(mnt);
  if (geteuid() != 0 || Shell("mount -t tmpfs -o size=4m tmpfs " + mnt).rc != 0) {
    GTEST_SKIP() << "mounting a small tmpfs needs root; skipped";
  }
  Result r = Launch("tiny/log", "", "--restart-on-failure 3");
  std::string logs;
  for (const auto& e : fs::directory_iterator(mnt + "/log")) {
    if (e.path().extension() == ".log") logs += ReadFile(e.path().string());
  }
  Shell("umount " + mnt);
  // Both shards checkpoint at the same clock into the same 4 MiB: whichever writes first fills
  // it (shard 0 most often; a clean-clone CI run once saw shard 1).
  EXPECT_TRUE(std::regex_search(logs, std::regex("checkpoints/shard-[01]\\.ckpt\\.tmp: error: cannot "
                                                 "write: No space left on device; free space on "
                                                 "the disk of the folder")))
      << logs;
  EXPECT_EQ(r.rc, 5) << r.out;
  EXPECT_EQ(r.out.find("launch: restarting"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("exited with code 5; stopping the others"), std::string::npos) << r.out;
}

// A shard dies and comes back without its checkpoint (deleted, as the message for a corrupt one
// once advised): it starts from the initial values, the workers' kept pushes begin at the last
// checkpoint, and clocks 0..19 can never be replayed. The job used to sit at 0% CPU forever;
// the coordinator's progress watchdog now ends it, printing what every process waits for and,
// from the shard, which checkpoint is missing and what to do (exit code 6, within 30 s).
TEST_F(FaultTest, AShardRestartedWithoutItsCheckpointEndsTheJobWithTheMessage) {
  // The watchdog's bound is far: the job must end because the restarted shard finds the gap
  // itself (the first push a worker sends again is past what it holds), not because nothing
  // progressed; were it the watchdog, the exit code would be 6.
  Result r = Launch("s-nockpt", "3:push:25:killnockpt",
                    "--restart-on-failure 1 --progress-timeout 300");
  EXPECT_EQ(r.rc, 7) << r.out;
  EXPECT_NE(r.out.find("restarting shard 0 (rank 3)"), std::string::npos) << r.out;
  // Exit code 7 is not restarted into the same error: the launcher stops the job.
  EXPECT_NE(r.out.find("exited with code 7; stopping the others"), std::string::npos) << r.out;
  const std::string shard = ReadFile(Dir() + "/s-nockpt/rank-3-shard.log");
  EXPECT_NE(shard.find("the job cannot go on: chunk "), std::string::npos) << shard;
  EXPECT_NE(shard.find(" keeps its pushes only from clock 20 on"), std::string::npos) << shard;
  EXPECT_NE(shard.find("This shard was restarted from the initial values, with no checkpoint at "),
            std::string::npos)
      << shard;
  EXPECT_NE(shard.find("put back the newest shard-0.ckpt or start the job again"),
            std::string::npos)
      << shard;
}

// Without fault tolerance nothing declares a stopped worker dead: the job makes no progress, and
// the coordinator's watchdog ends it with what every process waits for (exit code 6); the
// launcher then ends the stopped process too (it continues it so that it takes the SIGTERM).
TEST_F(FaultTest, AJobThatMakesNoProgressEndsWithWhatEachProcessWaitsFor) {
  const std::string d = Dir() + "/stuck";
  Result r = Shell(kBin + " launch " + kRoot + "/scenarios/live/fmnist_mlp.yaml --data-dir " +
                   Dir() + "/data --log-dir " + d + " --set iterations=" +
                   std::to_string(kIterations) +
                   " --no-test --inject-fault 2:push:8:stop --progress-timeout 2");
  EXPECT_EQ(r.rc, 6) << r.out;
  const std::string coord = ReadFile(d + "/rank-0-coordinator.log");
  EXPECT_NE(coord.find("no worker finished an iteration for 2 s; the job is stuck. What each "
                       "process waits for:"),
            std::string::npos)
      << coord;
  EXPECT_NE(coord.find("worker 1: no answer (connected)"), std::string::npos) << coord;
  EXPECT_NE(coord.find("worker 0: at clock "), std::string::npos) << coord;
}

TEST(FaultSpec, MalformIsAnActionOnAMessageTheProcessSends) {
  EXPECT_EQ(ParseFaultSpec("1:push:5:malform").action, FaultSpec::Action::kMalform);
  EXPECT_EQ(ParseFaultSpec("3:pull:2:malform").action, FaultSpec::Action::kMalform);
  try {
    ParseFaultSpec("3:checkpoint:2:malform");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("malform needs PHASE push or pull"), std::string::npos)
        << e.what();
  }
  // Armed for a malformed send, the injector acts only there, once.
  FaultInjector f(ParseFaultSpec("1:push:5:malform"), "worker 0", "");
  f.At("push", 7);  // not a send: nothing happens (the process is still here)
  EXPECT_FALSE(f.MalformsSend("push", 4));
  EXPECT_FALSE(f.MalformsSend("pull", 5));
  EXPECT_TRUE(f.MalformsSend("push", 6));
  EXPECT_FALSE(f.MalformsSend("push", 7));
}

// A worker sends a push naming a chunk that does not exist (`malform`, as a buggy or hostile
// peer would): the shard's core refuses it and closes that connection, every process then loses
// a peer and none has another cause, so `launch` ends with exit code 3 and says where to look.
TEST_F(FaultTest, AMalformedPushClosesItsConnectionAndTheJobEndsWithExitCode3) {
  const std::string d = Dir() + "/malform";
  Result r = Shell(kBin + " launch " + kRoot + "/scenarios/live/fmnist_mlp.yaml --data-dir " +
                   Dir() + "/data --log-dir " + d + " --set iterations=" +
                   std::to_string(kIterations) + " --no-test --inject-fault 1:push:5:malform");
  EXPECT_EQ(r.rc, 3) << r.out;
  const bool all_lost = r.out.find("every process ended having lost a peer and none gave another "
                                   "cause") != std::string::npos;
  const bool none_said = r.out.find("no other process says why within 5 s") != std::string::npos;
  EXPECT_TRUE(all_lost || none_said) << r.out;
  EXPECT_NE(r.out.find("(it lost a peer)"), std::string::npos) << r.out;
  EXPECT_NE(ReadFile(d + "/rank-1-worker.log").find("injected fault: a malformed message"),
            std::string::npos);
  // The shard that got it names the sender, the message and why it was refused.
  std::string shards;
  for (const auto& e : fs::directory_iterator(d)) {
    if (e.path().filename().string().find("-shard.log") != std::string::npos) {
      shards += ReadFile(e.path().string());
    }
  }
  EXPECT_NE(shards.find("closing the connection with worker 0: its "), std::string::npos) << shards;
  EXPECT_NE(shards.find("unknown chunk 2147483647"), std::string::npos) << shards;
}

// SSP evicts a dead worker: a stopped one is silent like a killed one, so after the timeout the
// shards stop waiting for it, and the other worker trains to the end.
TEST_F(FaultTest, SspStoppedWorkerIsEvictedAndTheOtherConverges) {
  Result r = Launch("ssp-stop", "2:push:8:stop",
                    "--set 'protocol.consistency={model: ssp, staleness: 2}'");
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::string coord = ReadFile(Dir() + "/ssp-stop/rank-0-coordinator.log");
  EXPECT_NE(coord.find("worker 1 (epoch 0) declared dead"), std::string::npos) << coord;
  // The launcher ends the stopped process once the coordinator declared it dead.
  EXPECT_NE(r.out.find("the coordinator declared worker 1 (rank 2, incarnation 0) dead; killing "
                       "it (SIGKILL)"),
            std::string::npos)
      << r.out;
  // It learned: the last reported loss is well below the initial ~2.3 of ten classes.
  EXPECT_LT(LastLoss(Dir() + "/ssp-stop.csv"), 1.6);
}

// Without restarts, a killed SSP worker is evicted and the job trains on without it: the
// launcher does not stop the job for it.
TEST_F(FaultTest, SspKilledWorkerWithoutARestartIsEvictedAndTheJobGoesOn) {
  Result r = Launch("ssp-kill", "2:push:8:kill",
                    "--set 'protocol.consistency={model: ssp, staleness: 2}'");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("the job goes on without it"), std::string::npos) << r.out;
  const std::string coord = ReadFile(Dir() + "/ssp-kill/rank-0-coordinator.log");
  EXPECT_NE(coord.find("worker 1 (epoch 0) declared dead"), std::string::npos) << coord;
  EXPECT_LT(LastLoss(Dir() + "/ssp-kill.csv"), 1.6);
}

// An emulated cluster (a network namespace per machine, tbf-shaped links) where worker 1's
// machine loses its link at clock 8: its heartbeats stop reaching the coordinator, it is
// declared dead and evicted (SSP), and worker 0 trains on to the end with the one shard.
TEST_F(FaultTest, SspWorkerWhoseLinkGoesDownIsEvictedInAnEmulatedCluster) {
  if (!NamespacesAvailable()) {
    GTEST_SKIP() << "network namespaces need root (CAP_NET_ADMIN); skipped";
  }
  Result r = Launch("ssp-link", "2:push:8:linkdown",
                    "--emulate --emulate-gbps 1 --servers 1 "
                    "--set 'protocol.consistency={model: ssp, staleness: 2}'");
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::string coord = ReadFile(Dir() + "/ssp-link/rank-0-coordinator.log");
  EXPECT_NE(coord.find("worker 1 (epoch 0) declared dead"), std::string::npos) << coord;
  EXPECT_NE(ReadFile(Dir() + "/ssp-link/rank-2-worker.log").find("link down"), std::string::npos);
  EXPECT_LT(LastLoss(Dir() + "/ssp-link.csv"), 1.6);
}

TEST_F(FaultTest, CoordinatorKilledEndsTheJobWithACleanError) {
  Result r = Launch("c-kill", "0:heartbeat:10:kill", "--restart-on-failure 2");
  EXPECT_EQ(r.rc, 128 + 9) << r.out;
  EXPECT_NE(r.out.find("coordinator (rank 0) was killed by signal 9"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("launch: restarting"), std::string::npos) << r.out;
}

// `launch --resume`: a job stopped by a failure (a worker killed at its push of clock 15, no
// restarts: the job ends) is started again with the same --log-dir and continues from the
// shards' checkpoints of clock 10: the learning curve from there and both workers' final
// parameters are those of the run that never stopped, bit for bit.
TEST_F(FaultTest, AStoppedJobResumedFromItsCheckpointsEndsBitIdentical) {
  Result stopped = Launch("resume", "2:push:15:kill", "");
  ASSERT_NE(stopped.rc, 0) << stopped.out;
  Result resumed = Launch("resume", "", "--resume");
  ASSERT_EQ(resumed.rc, 0) << resumed.out;
  for (int rank : {3, 4}) {
    const std::string log = ReadFile(Dir() + "/resume/rank-" + std::to_string(rank) + "-shard.log");
    EXPECT_NE(log.find("every push of clocks below 10 applied"), std::string::npos) << log;
  }
  // The resumed curve starts at the row after the checkpoint and equals the clean run's rows.
  const std::string got = LossColumns(Dir() + "/resume.csv");
  const std::string clean = LossColumns(Dir() + "/clean.csv");
  EXPECT_EQ(got.substr(0, got.find('\n')), "iteration,loss");
  const std::string rows = got.substr(got.find('\n') + 1);
  ASSERT_FALSE(rows.empty()) << got;
  EXPECT_EQ(rows.rfind("20,", 0), 0u) << got;
  EXPECT_NE(clean.find(rows), std::string::npos) << "resumed:\n" << got << "clean:\n" << clean;
  for (int rank : {1, 2}) {
    const std::string want = ReadFile(fmt(Dir() + "/clean-", rank));
    ASSERT_FALSE(want.empty());
    EXPECT_TRUE(ReadFile(fmt(Dir() + "/resume-", rank)) == want)
        << "worker rank " << rank << "'s final parameters differ from the run that never stopped";
  }
}

TEST_F(FaultTest, ResumeWithoutCheckpointsSaysWhereItLooked) {
  Result r = Launch("never-ran", "", "--resume");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("never-ran/checkpoints/shard-0.ckpt: error: no checkpoint of shard 0 to "
                       "resume from"),
            std::string::npos)
      << r.out;
  Result plain = Shell(kBin + " launch " + kRoot + "/scenarios/live/fmnist_mlp.yaml --resume --log-dir " +
                       Dir() + "/plain");
  EXPECT_EQ(plain.rc, 2) << plain.out;
  EXPECT_NE(plain.out.find("needs protocol.fault_tolerance with checkpoint_every > 0"),
            std::string::npos)
      << plain.out;
}

}  // namespace
}  // namespace poseidon::rt
