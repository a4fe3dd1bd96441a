// Fault tolerance of the protocol core (core/job.h FaultConfig): heartbeats and failure
// detection, eviction, exactly-once pushes, worker rejoin, shard checkpoints and restore, on the
// in-memory host with crashes (tests/core/fault_cluster.h).
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "tests/core/fault_cluster.h"
#include "tests/core/test_models.h"

namespace poseidon {
namespace {

using core::ActorId;
using core::Consistency;
using core::MsgType;
using core::TaskKind;
using testing::FaultCluster;
using testing::RecordingShardStore;

constexpr core::TimeNs kHeartbeat = 100;
constexpr core::TimeNs kTimeout = 2000;

core::ProtocolConfig Config(Consistency consistency, int64_t staleness, int64_t iterations) {
  core::ProtocolConfig cfg;
  cfg.consistency = consistency;
  cfg.staleness = staleness;
  cfg.iterations = iterations;
  cfg.chunk_bytes = 1024;  // SmallNet: 24 chunks
  cfg.batch = 4;
  return cfg;
}

core::ProtocolConfig FaultConfig(Consistency consistency, int64_t staleness, int64_t iterations,
                                 int64_t checkpoint_every, bool evict) {
  core::ProtocolConfig cfg = Config(consistency, staleness, iterations);
  cfg.fault.heartbeat_ns = kHeartbeat;
  cfg.fault.failure_timeout_ns = kTimeout;
  cfg.fault.checkpoint_every = checkpoint_every;
  cfg.fault.evict_dead_workers = evict;
  return cfg;
}

const char* Name(Consistency c) { return core::ConsistencyName(c); }

// Watches a run: what was delivered, which versions workers computed with, how many pushes each
// worker kept.
struct Observer {
  explicit Observer(FaultCluster* cluster) : c(cluster) {
    const core::ProtocolConfig& cfg = c->config();
    c->on_send = [this](ActorId, const core::Message& m) {
      if (m.type == MsgType::kMembership) {
        sent_memberships.push_back({c->now(), m});
      }
    };
    c->on_start_compute = [this, cfg](ActorId a, const core::ComputeTask& t) {
      if (!c->layout().IsWorker(a) || t.kind != TaskKind::kForward) return;
      const int w = c->layout().WorkerIndex(a);
      forwards.push_back({w, c->incarnation(a), t.clock, t.layer});
      if (cfg.consistency == Consistency::kAsp) return;
      // The values a forward pass of clock t.clock runs with: under BSP exactly version t.clock
      // (every update of clocks 0..t.clock-1, nothing later); under SSP at least t.clock - s.
      for (int32_t cid : c->placement().chunks_of_layer(t.layer)) {
        const int64_t held = c->worker_store(w).held(cid);
        const bool ok = cfg.consistency == Consistency::kBsp ? held == t.clock
                                                             : held >= t.clock - cfg.staleness;
        if (!ok) {
          stale.push_back("worker " + std::to_string(w) + " (incarnation " +
                          std::to_string(c->incarnation(a)) + ") computed layer " +
                          std::to_string(t.layer) + " at clock " + std::to_string(t.clock) +
                          " with chunk " + std::to_string(cid) + " at version " +
                          std::to_string(held));
        }
      }
    };
    c->after_step = [this](const FaultCluster::Event& e) {
      if (e.action->kind == FaultCluster::Kind::kMessage && !e.dropped) {
        const core::Message& m = e.action->msg;
        delivered.push_back({e.now, m});
        from_incarnation.push_back(e.action->from_incarnation);
        if (m.type == MsgType::kMembership) memberships.push_back({e.now, m});
      }
      for (int w = 0; w < c->layout().num_workers; ++w) {
        if (c->state(c->layout().worker(w)) != FaultCluster::State::kAlive) continue;
        max_retained[w] = std::max(max_retained[w], c->worker(w).retained_pushes());
      }
    };
  }

  // Delivered messages of a type to an actor.
  int Count(MsgType type, ActorId to) const {
    int n = 0;
    for (const auto& [t, m] : delivered) n += m.type == type && m.to == to ? 1 : 0;
    return n;
  }
  // The first forward clock of a worker's incarnation (-1 when it computed nothing).
  int64_t FirstForward(int w, int incarnation) const {
    for (const auto& f : forwards) {
      if (f.worker == w && f.incarnation == incarnation) return f.clock;
    }
    return -1;
  }

  struct Forward {
    int worker;
    int incarnation;
    int64_t clock;
    int layer;
  };
  FaultCluster* c;
  std::vector<std::pair<core::TimeNs, core::Message>> delivered;
  std::vector<int> from_incarnation;  // of each delivered message's sender
  std::vector<std::pair<core::TimeNs, core::Message>> memberships;       // delivered
  std::vector<std::pair<core::TimeNs, core::Message>> sent_memberships;  // when sent
  std::vector<Forward> forwards;
  std::vector<std::string> stale;
  std::map<int, size_t> max_retained;
};

// The final values of every chunk of a shard hold each clock's update exactly once, in clock
// order, each averaging every worker's push.
void ExpectHistoryIsEveryClockOnceWithAllWorkers(FaultCluster& c, int shard, int64_t iterations,
                                                 const std::string& what) {
  std::vector<int> all(static_cast<size_t>(c.layout().num_workers));
  std::iota(all.begin(), all.end(), 0);
  for (int32_t cid : c.placement().chunks_of_shard(shard)) {
    const testing::ChunkValue& v = c.shard_store(shard).value(cid);
    ASSERT_EQ(v.history.size(), static_cast<size_t>(iterations))
        << what << ": chunk " << cid << " of shard " << shard;
    for (int64_t k = 0; k < iterations; ++k) {
      EXPECT_EQ(v.history[static_cast<size_t>(k)].first, k) << what << ": chunk " << cid;
      EXPECT_EQ(v.history[static_cast<size_t>(k)].second, all)
          << what << ": chunk " << cid << " clock " << k;
    }
  }
}

// Every Apply of a BSP/SSP store averaged what was accumulated for it, and the task said so.
void ExpectAppliesAveragedTheirPushes(FaultCluster& c, const std::string& what) {
  for (int s = 0; s < c.layout().num_servers; ++s) {
    for (const RecordingShardStore::ApplyRecord& r : c.shard_store(s).applies) {
      EXPECT_EQ(static_cast<size_t>(r.num_pushes), r.pushers.size())
          << what << ": shard " << s << " chunk " << r.chunk << " clock " << r.clock;
    }
  }
}

void ExpectJobFinished(FaultCluster& c, const FaultCluster::RunResult& r, const std::string& what) {
  ASSERT_FALSE(r.step_limit) << what << "\n" << c.WaitingFor();
  EXPECT_TRUE(c.coordinator().finished()) << what << "\n" << c.WaitingFor();
  EXPECT_TRUE(c.AllLiveFinished()) << what << "\n" << c.WaitingFor();
  int job_done = 0;
  for (const auto& e : c.trace) job_done += e.kind == core::TraceKind::kJobDone ? 1 : 0;
  EXPECT_EQ(job_done, 1) << what;
}

// ---------------------------------------------------------------------------------------------
// 1. Fault features on, no fault: the same protocol, the same result.

class NoFault : public ::testing::TestWithParam<std::tuple<Consistency, int64_t>> {};

std::vector<std::tuple<ActorId, int32_t, int64_t>> AppliedSequence(const FaultCluster& c) {
  std::vector<std::tuple<ActorId, int32_t, int64_t>> v;
  for (const auto& e : c.trace) {
    if (e.kind == core::TraceKind::kClockApplied) v.emplace_back(e.actor, e.chunk, e.clock);
  }
  return v;
}

TEST_P(NoFault, HeartbeatsAndCheckpointsDoNotChangeTheResult) {
  const auto [consistency, staleness] = GetParam();
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int64_t iterations = 6, every = 2;
  const int P = 3, S = 2;
  const core::JobLayout layout = core::JobLayout::Colocated(P, S);
  FaultCluster plain(model, layout, Config(consistency, staleness, iterations));
  const auto plain_run = plain.Run();
  ExpectJobFinished(plain, plain_run, "faults off");
  FaultCluster ft(model, layout,
                  FaultConfig(consistency, staleness, iterations, every, /*evict=*/true));
  Observer watch(&ft);
  const auto ft_run = ft.Run();
  ExpectJobFinished(ft, ft_run, "faults on");

  // Heartbeats did go, nobody was declared dead, no push was sent twice.
  EXPECT_GT(watch.Count(MsgType::kHeartbeat, core::JobLayout::coordinator()), 0);
  EXPECT_GT(ft.timers_fired, 0);
  EXPECT_EQ(plain.timers_fired, 0);
  EXPECT_EQ(ft.coordinator().epoch(), 0u);
  EXPECT_TRUE(watch.memberships.empty());
  for (int s = 0; s < S; ++s) EXPECT_EQ(ft.shard(s).duplicates(), 0);
  EXPECT_TRUE(watch.stale.empty()) << watch.stale.front();

  // The same updates in the same order (in the FIFO schedule the heartbeats only interleave).
  EXPECT_EQ(AppliedSequence(ft), AppliedSequence(plain));
  for (int s = 0; s < S; ++s) {
    const auto& a = ft.shard_store(s).applies;
    const auto& b = plain.shard_store(s).applies;
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(std::tie(a[i].chunk, a[i].clock, a[i].num_pushes, a[i].pushers),
                std::tie(b[i].chunk, b[i].clock, b[i].num_pushes, b[i].pushers));
    }
    for (int32_t cid : ft.placement().chunks_of_shard(s)) {
      EXPECT_EQ(ft.shard(s).version(cid), consistency == Consistency::kAsp ? 0 : iterations);
      EXPECT_EQ(ft.shard_store(s).value(cid).updates,
                consistency == Consistency::kAsp ? P * iterations : iterations);
    }
  }
  for (int w = 0; w < P; ++w) {
    EXPECT_EQ(ft.worker(w).clock(), iterations);
    for (int l : model.param_layers()) EXPECT_EQ(ft.worker(w).version(l), iterations);
  }

  // Checkpoints: under BSP/SSP one per multiple of `every` that a shard's slowest chunk
  // reaches, under ASP one per worker and multiple (each worker's pushes progress on their own).
  // The plain run never checkpoints.
  for (int s = 0; s < S; ++s) {
    EXPECT_TRUE(plain.shard_store(s).checkpoints.empty());
    const auto& cps = ft.shard_store(s).checkpoints;
    const size_t chunks = ft.placement().chunks_of_shard(s).size();
    if (consistency == Consistency::kAsp) {
      ASSERT_EQ(cps.size(), static_cast<size_t>(P * iterations / every)) << "shard " << s;
      for (size_t i = 1; i < cps.size(); ++i) {
        EXPECT_GE(cps[i].state.floor, cps[i - 1].state.floor);
      }
      EXPECT_EQ(cps.back().state.floor, iterations);
      // Every worker crossed every multiple exactly once.
      std::map<std::pair<int, int64_t>, int> crossings;
      for (size_t i = 0; i < cps.size(); ++i) {
        for (int w = 0; w < P; ++w) {
          int64_t progress = core::ProtocolConfig::kUnbounded;
          for (const core::ChunkProgress& p : cps[i].state.chunks) {
            ASSERT_EQ(p.applied_by_worker.size(), static_cast<size_t>(P));
            progress = std::min(progress, p.applied_by_worker[static_cast<size_t>(w)]);
          }
          if (progress % every == 0 && progress > 0) crossings[{w, progress}]++;
        }
      }
      for (int w = 0; w < P; ++w) {
        for (int64_t k = every; k <= iterations; k += every) {
          EXPECT_GE((crossings[{w, k}]), 1) << "worker " << w << " progress " << k;
        }
      }
    } else {
      ASSERT_EQ(cps.size(), static_cast<size_t>(iterations / every)) << "shard " << s;
      for (size_t i = 0; i < cps.size(); ++i) {
        const int64_t floor = every * static_cast<int64_t>(i + 1);
        EXPECT_EQ(cps[i].state.floor, floor);
        ASSERT_EQ(cps[i].state.chunks.size(), chunks);
        for (const core::ChunkProgress& p : cps[i].state.chunks) {
          // BSP (all-layers gate): no chunk of a shard can be a clock ahead of its slowest.
          if (consistency == Consistency::kBsp) {
            EXPECT_EQ(p.version, floor) << "chunk " << p.chunk;
          } else {
            EXPECT_GE(p.version, floor) << "chunk " << p.chunk;
            EXPECT_LE(p.version, floor + staleness + 1) << "chunk " << p.chunk;
          }
          // The values checkpointed hold exactly those updates.
          EXPECT_EQ(cps[i].values.at(p.chunk).updates, p.version);
        }
      }
    }
  }
  // Workers keep only what the last checkpoint may not hold: after the job, nothing below the
  // last multiple of `every`.
  for (int w = 0; w < P; ++w) {
    EXPECT_LE(watch.max_retained[w],
              static_cast<size_t>((every + 2)) * ft.placement().chunks().size());
    EXPECT_EQ(ft.worker(w).retained_pushes(), 0u) << "worker " << w;
  }
}

INSTANTIATE_TEST_SUITE_P(Consistency, NoFault,
                         ::testing::Values(std::make_tuple(Consistency::kBsp, int64_t{0}),
                                           std::make_tuple(Consistency::kSsp, int64_t{1}),
                                           std::make_tuple(Consistency::kAsp, int64_t{0})));

// Shuffled schedules with fault features on and no fault: every clock applied once, nobody
// declared dead.
TEST(NoFaultShuffled, EveryClockAppliedOnceAndNobodyDies) {
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  for (uint64_t seed : {3u, 8u, 21u, 77u}) {
    for (Consistency cons : {Consistency::kBsp, Consistency::kSsp}) {
      const int64_t iterations = 6;
      FaultCluster c(model, core::JobLayout::Colocated(3, 2),
                     FaultConfig(cons, cons == Consistency::kSsp ? 2 : 0, iterations, 2, false),
                     seed);
      Observer watch(&c);
      const auto r = c.Run();
      const std::string what = std::string(Name(cons)) + " seed " + std::to_string(seed);
      ExpectJobFinished(c, r, what);
      EXPECT_EQ(c.coordinator().epoch(), 0u) << what;
      EXPECT_TRUE(watch.stale.empty()) << what << ": " << watch.stale.front();
      for (int s = 0; s < 2; ++s) {
        ExpectHistoryIsEveryClockOnceWithAllWorkers(c, s, iterations, what);
        EXPECT_EQ(c.shard(s).duplicates(), 0) << what;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 2. Failure detection by heartbeats; SSP with eviction goes on without the dead worker.

enum class Fault { kKill, kStop };

class Detection : public ::testing::TestWithParam<Fault> {};

TEST_P(Detection, SilentWorkerIsDeclaredDeadAndEvicted) {
  const Fault fault = GetParam();
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int P = 3, S = 2;
  const int64_t iterations = 8, kill_clock = 3;
  const int victim = 1;
  FaultCluster c(model, core::JobLayout::Colocated(P, S),
                 FaultConfig(Consistency::kSsp, 1, iterations, 0, /*evict=*/true));
  Observer watch(&c);
  const ActorId vid = c.layout().worker(victim);
  const int top = model.param_layers().back();
  core::TimeNs died_at = -1;
  // In the middle of clock 3's backward pass: the top layer's chunks are pushed, no other.
  c.When(
      [&](const FaultCluster::Event& e) {
        return e.is_task(TaskKind::kBackward) && e.action->actor == vid &&
               e.action->task.clock == kill_clock && e.action->task.layer == top;
      },
      [&] {
        died_at = c.now();
        if (fault == Fault::kKill) {
          c.Kill(vid);
        } else {
          c.Stop(vid);
        }
      });
  // The shards' update tasks: (shard, chunk, clock) -> the pushes the task says it averages.
  std::map<std::tuple<ActorId, int32_t, int64_t>, int64_t> task_pushes;
  c.on_task_done = [&](core::TimeNs, ActorId a, const core::ComputeTask& t) {
    if (t.kind == TaskKind::kServerUpdate) task_pushes[{a, t.chunk, t.clock}] = t.peer;
  };
  const auto r = c.Run();
  ExpectJobFinished(c, r, "after the death");
  ASSERT_GE(died_at, 0);

  // Declared dead once, after the timeout, and every live actor heard it.
  EXPECT_EQ(c.coordinator().epoch(), 1u);
  EXPECT_FALSE(c.coordinator().alive(vid));
  ASSERT_FALSE(watch.sent_memberships.empty());
  core::TimeNs last_heard = 0;
  for (const auto& [t, m] : watch.delivered) {
    if (m.from == vid && m.to == core::JobLayout::coordinator()) last_heard = t;
  }
  std::set<ActorId> told;
  for (const auto& [t, m] : watch.sent_memberships) {
    EXPECT_EQ(m.step, vid);
    EXPECT_EQ(m.chunk, core::kMemberDead);
    EXPECT_EQ(m.clock, 1);
    EXPECT_GT(t - last_heard, kTimeout);
    EXPECT_LE(t - last_heard, kTimeout + kHeartbeat + 10);
    told.insert(m.to);
  }
  std::set<ActorId> others;
  for (ActorId a = 1; a < c.layout().num_actors(); ++a) {
    if (a != vid) others.insert(a);
  }
  EXPECT_EQ(told, others);
  std::set<ActorId> heard;
  for (const auto& [t, m] : watch.memberships) heard.insert(m.to);
  EXPECT_EQ(heard, others);

  // The others ran to the end; the victim did not.
  for (int w = 0; w < P; ++w) {
    if (w == victim) continue;
    EXPECT_TRUE(c.worker(w).finished());
    EXPECT_EQ(c.worker(w).clock(), iterations);
    for (int l : model.param_layers()) EXPECT_EQ(c.worker(w).version(l), iterations);
  }
  EXPECT_FALSE(c.finished(vid));
  if (fault == Fault::kStop) {
    EXPECT_GT(r.held, 0u);  // its frozen timers and messages
  }
  for (int s = 0; s < S; ++s) {
    for (int32_t cid : c.placement().chunks_of_shard(s)) {
      EXPECT_EQ(c.shard(s).version(cid), iterations);
    }
  }

  // Each update averaged the pushes the shard had from members: the victim's pushes of a clock
  // count if they arrived before the shard heard of its death, later ones do not.
  ExpectAppliesAveragedTheirPushes(c, "eviction");
  std::map<ActorId, core::TimeNs> evicted_at;  // shard -> when it heard
  for (const auto& [t, m] : watch.memberships) {
    if (c.layout().IsServer(m.to)) evicted_at[m.to] = t;
  }
  std::map<std::tuple<ActorId, int32_t, int64_t>, int> counted;  // (shard, chunk, clock)
  int victim_pushes_after_death = 0;
  for (const auto& [t, m] : watch.delivered) {
    if (m.type != MsgType::kPushGrad) continue;
    if (m.from == vid && t > died_at && m.clock == kill_clock) ++victim_pushes_after_death;
    if (m.from == vid && t > evicted_at[m.to]) continue;
    counted[{m.to, m.chunk, m.clock}]++;
  }
  int partial = 0, full = 0;
  for (int s = 0; s < S; ++s) {
    for (const RecordingShardStore::ApplyRecord& a : c.shard_store(s).applies) {
      const int want = counted[{c.layout().server(s), a.chunk, a.clock}];
      EXPECT_EQ((task_pushes[{c.layout().server(s), a.chunk, a.clock}]), want)
          << "shard " << s << " chunk " << a.chunk << " clock " << a.clock;
      EXPECT_EQ(a.num_pushes, want)
          << "shard " << s << " chunk " << a.chunk << " clock " << a.clock;
      if (a.clock < kill_clock) {
        EXPECT_EQ(a.num_pushes, P);
      }
      if (a.clock > kill_clock) {
        EXPECT_EQ(a.num_pushes, P - 1);
      }
      if (a.clock == kill_clock) (a.num_pushes == P ? full : partial)++;
    }
  }
  // Clock 3: the chunks the victim had pushed (in flight when it was killed) averaged P pushes,
  // the others P-1. A stopped victim's pushes never left.
  const int top_chunks = static_cast<int>(c.placement().chunks_of_layer(top).size());
  const int chunks = static_cast<int>(c.placement().chunks().size());
  if (fault == Fault::kKill) {
    EXPECT_EQ(victim_pushes_after_death, top_chunks);
    EXPECT_EQ(full, top_chunks);
    EXPECT_EQ(partial, chunks - top_chunks);
  } else {
    EXPECT_EQ(victim_pushes_after_death, 0);
    EXPECT_EQ(full, 0);
    EXPECT_EQ(partial, chunks);
  }
  EXPECT_TRUE(watch.stale.empty()) << watch.stale.front();
}

INSTANTIATE_TEST_SUITE_P(KillOrStop, Detection, ::testing::Values(Fault::kKill, Fault::kStop),
                         [](const ::testing::TestParamInfo<Fault>& i) {
                           return i.param == Fault::kKill ? std::string("Kill")
                                                          : std::string("Stop");
                         });

// A stall shorter than the timeout is no failure: nobody is declared dead and every update
// has every push.
TEST(Detection, ShortStallIsNotAFailure) {
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int P = 3;
  const int64_t iterations = 6;
  FaultCluster c(model, core::JobLayout::Colocated(P, 2),
                 FaultConfig(Consistency::kBsp, 0, iterations, 0, /*evict=*/true));
  Observer watch(&c);
  const ActorId vid = c.layout().worker(2);
  core::TimeNs stopped_at = -1;
  c.When(
      [&](const FaultCluster::Event& e) {
        return e.is_task(TaskKind::kForward) && e.action->actor == vid && e.action->task.clock == 2;
      },
      [&] {
        stopped_at = c.now();
        c.Stop(vid);
        c.When([&](const FaultCluster::Event& e) { return e.now >= stopped_at + kTimeout / 2; },
               [&] { c.Resume(vid); });
      });
  const auto r = c.Run();
  ExpectJobFinished(c, r, "stall");
  ASSERT_GE(stopped_at, 0);
  EXPECT_GT(c.now(), stopped_at + kTimeout / 2);
  EXPECT_EQ(c.coordinator().epoch(), 0u);
  EXPECT_TRUE(watch.memberships.empty());
  for (int s = 0; s < 2; ++s)
    ExpectHistoryIsEveryClockOnceWithAllWorkers(c, s, iterations, "stall");
}

// ---------------------------------------------------------------------------------------------
// 3. BSP, waiting for the dead worker: it restarts, rejoins at its clock, and every push of
// every clock is applied exactly once.

struct RejoinCase {
  std::string name;
  int kill_after_layer;  // 0: conv1 ... ; the backward task of this layer at clock 3
  bool restart_after_detection;
  bool drop_outgoing;  // its last pushes die with it
  int64_t checkpoint_every;
};

class BspRejoin : public ::testing::TestWithParam<RejoinCase> {};

// Checks of a BSP run (the dead worker waited for) in which a worker was killed and restarted.
void ExpectExactBspRejoin(FaultCluster& c, const Observer& watch, int64_t iterations,
                          const std::string& what) {
  const int P = c.layout().num_workers;
  const int S = c.layout().num_servers;
  // Every (chunk, clock) applied exactly once, with every worker's push.
  std::map<std::pair<int32_t, int64_t>, int> applied;
  for (int s = 0; s < S; ++s) {
    for (const auto& a : c.shard_store(s).applies) applied[{a.chunk, a.clock}]++;
    ExpectHistoryIsEveryClockOnceWithAllWorkers(c, s, iterations, what);
  }
  EXPECT_EQ(applied.size(), c.placement().chunks().size() * static_cast<size_t>(iterations))
      << what;
  for (const auto& [key, n] : applied) {
    EXPECT_EQ(n, 1) << what << ": chunk " << key.first << " clock " << key.second;
  }
  ExpectAppliesAveragedTheirPushes(c, what);
  for (int w = 0; w < P; ++w) {
    EXPECT_EQ(c.worker(w).clock(), iterations) << what;
    for (int32_t cid = 0; cid < static_cast<int32_t>(c.placement().chunks().size()); ++cid) {
      EXPECT_EQ(c.worker_store(w).held(cid), iterations) << what << ": worker " << w;
    }
  }
  // BSP stays exact: every forward pass, the restarted worker's included, ran with the values
  // of exactly its clock.
  EXPECT_TRUE(watch.stale.empty())
      << what << ": " << watch.stale.size() << " stale, first " << watch.stale.front();
}

TEST_P(BspRejoin, RestartedWorkerRejoinsAtItsClock) {
  const RejoinCase& tc = GetParam();
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int P = 3, S = 2;
  const int64_t iterations = 6, kill_clock = 3;
  const int victim = 0;
  FaultCluster c(model, core::JobLayout::Colocated(P, S),
                 FaultConfig(Consistency::kBsp, 0, iterations, tc.checkpoint_every,
                             /*evict=*/false));
  Observer watch(&c);
  const ActorId vid = c.layout().worker(victim);
  const int layer = model.param_layers()[static_cast<size_t>(tc.kill_after_layer)];
  int pushed_before_death = 0;
  bool killed = false;
  c.When(
      [&](const FaultCluster::Event& e) {
        return e.is_task(TaskKind::kBackward) && e.action->actor == vid &&
               e.action->task.clock == kill_clock && e.action->task.layer == layer;
      },
      [&] {
        for (int l : model.param_layers()) {
          if (l >= layer)
            pushed_before_death += static_cast<int>(c.placement().chunks_of_layer(l).size());
        }
        killed = true;
        c.Kill(vid, tc.drop_outgoing);
        if (!tc.restart_after_detection) {
          c.Restart(vid);
          return;
        }
        c.When([&](const FaultCluster::Event&) { return c.coordinator().epoch() >= 1; },
               [&] { c.Restart(vid); });
      });
  const auto r = c.Run();
  ASSERT_TRUE(killed);
  ExpectJobFinished(c, r, tc.name);
  EXPECT_EQ(c.incarnation(vid), 1);
  EXPECT_EQ(c.coordinator().epoch(), tc.restart_after_detection ? 2u : 1u);
  ASSERT_GT(pushed_before_death, 0);
  ASSERT_LT(pushed_before_death, static_cast<int>(c.placement().chunks().size()));

  // It asked every shard, heard every chunk's current values, and rejoined at clock 3: the
  // shards' slowest chunks were at version 3.
  int rejoins = 0, current = 0, previous = 0;
  int64_t min_version = core::ProtocolConfig::kUnbounded;
  for (const auto& [t, m] : watch.delivered) {
    if (m.type == MsgType::kRejoin) ++rejoins;
    if (m.type == MsgType::kParams && m.to == vid && m.step == core::kRejoinCurrent) {
      ++current;
      min_version = std::min(min_version, m.clock);
    }
    if (m.type == MsgType::kParams && m.to == vid && m.step == core::kRejoinPrevious) ++previous;
  }
  EXPECT_EQ(rejoins, S);
  EXPECT_EQ(current, static_cast<int>(c.placement().chunks().size()));
  EXPECT_EQ(min_version, kill_clock);
  EXPECT_EQ(watch.FirstForward(victim, 1), kill_clock);
  EXPECT_GT(previous, 0);  // BSP: every chunk at version > 0 sends its previous values too
  // Its pushes of clock 3 that reached the shards (all of them, unless those still on the wire
  // died with it) were not applied twice: the new process's pushes of them were duplicates.
  int old_pushes = 0;
  for (size_t i = 0; i < watch.delivered.size(); ++i) {
    const core::Message& m = watch.delivered[i].second;
    old_pushes += m.type == MsgType::kPushGrad && m.from == vid && m.clock == kill_clock &&
                          watch.from_incarnation[i] == 0
                      ? 1
                      : 0;
  }
  if (tc.drop_outgoing) {
    EXPECT_LT(old_pushes, pushed_before_death) << tc.name;
  } else {
    EXPECT_EQ(old_pushes, pushed_before_death) << tc.name;
  }
  int64_t duplicates = 0;
  for (int s = 0; s < S; ++s) duplicates += c.shard(s).duplicates();
  EXPECT_EQ(duplicates, old_pushes) << tc.name;
  ExpectExactBspRejoin(c, watch, iterations, tc.name);
}

INSTANTIATE_TEST_SUITE_P(
    KillPoints, BspRejoin,
    ::testing::Values(RejoinCase{"TopLayerPushedRestartAtOnce", 2, false, false, 0},
                      RejoinCase{"TopLayerPushedRestartAfterDetection", 2, true, false, 0},
                      RejoinCase{"MostPushedRestartAtOnce", 1, false, false, 2},
                      RejoinCase{"MostPushedRestartAfterDetection", 1, true, false, 2},
                      RejoinCase{"PushesLostRestartAtOnce", 2, false, true, 0},
                      RejoinCase{"PushesLostRestartAfterDetection", 1, true, true, 2}),
    [](const ::testing::TestParamInfo<RejoinCase>& i) { return i.param.name; });

// ---------------------------------------------------------------------------------------------
// 4. A shard crashes and comes back from its last checkpoint.

struct ShardCrashCase {
  std::string name;
  Consistency consistency;
  int64_t staleness;
  enum Point { kDuringPush, kAfterApply, kAfterCheckpoint } point;
  bool restart_after_detection;
  uint64_t seed;
};

class ShardCrash : public ::testing::TestWithParam<ShardCrashCase> {};

TEST_P(ShardCrash, RestoredShardReplaysTheClocksAfterItsCheckpointOnce) {
  const ShardCrashCase& tc = GetParam();
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int P = 3, S = 2, victim = 1;
  const int64_t iterations = 8, every = 2;
  FaultCluster c(model, core::JobLayout::Colocated(P, S),
                 FaultConfig(tc.consistency, tc.staleness, iterations, every, /*evict=*/false),
                 tc.seed);
  Observer watch(&c);
  const ActorId sid = c.layout().server(victim);
  RecordingShardStore& store = c.shard_store(victim);
  std::function<bool(const FaultCluster::Event&)> when;
  bool drop_outgoing = false;
  switch (tc.point) {
    case ShardCrashCase::kDuringPush:  // it holds some of clock 5's pushes
      when = [&](const FaultCluster::Event& e) {
        return e.is_message(MsgType::kPushGrad) && e.action->msg.to == sid &&
               e.action->msg.clock == 5;
      };
      break;
    case ShardCrashCase::kAfterApply:  // it applied (and answered) one chunk of clock 4
      when = [&](const FaultCluster::Event& e) {
        return e.is_task(TaskKind::kServerUpdate) && e.action->actor == sid &&
               e.action->task.clock == 4;
      };
      break;
    case ShardCrashCase::kAfterCheckpoint:  // its checkpoint of clock 4 is durable, its answers
                                            // of clock 3 are lost
      when = [&](const FaultCluster::Event&) { return store.checkpoints.size() == 2; };
      drop_outgoing = true;
      break;
  }
  bool killed = false;
  int64_t old_max_applied = -1;
  c.When(when, [&] {
    killed = true;
    for (const auto& a : store.applies) old_max_applied = std::max(old_max_applied, a.clock);
    c.Kill(sid, drop_outgoing);
    if (!tc.restart_after_detection) {
      c.Restart(sid);
      return;
    }
    c.When([&](const FaultCluster::Event&) { return c.coordinator().epoch() >= 1; },
           [&] { c.Restart(sid); });
  });
  const auto r = c.Run();
  ASSERT_TRUE(killed) << tc.name;
  ExpectJobFinished(c, r, tc.name);
  EXPECT_EQ(c.incarnation(sid), 1);
  EXPECT_EQ(store.incarnation(), 1);
  EXPECT_EQ(c.coordinator().epoch(), tc.restart_after_detection ? 2u : 1u);
  ASSERT_EQ(c.restored_from.size(), 1u);
  ASSERT_TRUE(c.restored_from[0].second.has_value()) << "killed before its first checkpoint";
  const core::ShardCheckpoint& restored = *c.restored_from[0].second;
  EXPECT_GE(restored.floor, every);
  std::map<int32_t, int64_t> restored_version;
  for (const core::ChunkProgress& p : restored.chunks) restored_version[p.chunk] = p.version;

  // Every shard's chunks reach the end; the final values hold every clock once.
  for (int s = 0; s < S; ++s) {
    for (int32_t cid : c.placement().chunks_of_shard(s)) {
      EXPECT_EQ(c.shard(s).version(cid), iterations) << tc.name;
    }
    ExpectHistoryIsEveryClockOnceWithAllWorkers(c, s, iterations, tc.name);
  }
  ExpectAppliesAveragedTheirPushes(c, tc.name);
  // Per incarnation no clock is applied twice; the new one starts at the restored versions and
  // applies each clock after them once.
  std::map<std::tuple<int, int32_t, int64_t>, int> applied;  // (incarnation, chunk, clock)
  for (const auto& a : store.applies) {
    applied[{a.incarnation, a.chunk, a.clock}]++;
    if (a.incarnation == 1) {
      EXPECT_GE(a.clock, restored_version.at(a.chunk)) << tc.name << ": chunk " << a.chunk;
    }
  }
  for (const auto& [key, n] : applied) {
    EXPECT_EQ(n, 1) << tc.name << ": incarnation " << std::get<0>(key) << " chunk "
                    << std::get<1>(key) << " clock " << std::get<2>(key);
  }
  int replayed = 0;
  for (int32_t cid : c.placement().chunks_of_shard(victim)) {
    for (int64_t k = restored_version.at(cid); k < iterations; ++k) {
      EXPECT_EQ((applied[{1, cid, k}]), 1) << tc.name << ": chunk " << cid << " clock " << k;
      if (k <= old_max_applied) ++replayed;
    }
  }
  if (tc.point == ShardCrashCase::kAfterCheckpoint) {
    // Nothing applied was lost, but answers were: the workers sent those pushes again and the
    // shard answered them without applying them again.
    EXPECT_EQ(replayed, 0) << tc.name;
    EXPECT_GT(c.shard(victim).duplicates(), 0) << tc.name;
  } else {
    // The restore did lose applied clocks, which the workers' retained pushes brought back.
    EXPECT_GT(replayed, 0) << tc.name;
  }
  // The workers heard the shard came back, and kept a bounded number of pushes.
  const size_t chunks = c.placement().chunks().size();
  for (int w = 0; w < P; ++w) {
    bool heard = false;
    for (const auto& [t, m] : watch.memberships) {
      heard |= m.to == c.layout().worker(w) && m.step == sid && m.chunk == core::kMemberJoined;
    }
    EXPECT_TRUE(heard) << tc.name << ": worker " << w;
    EXPECT_LE(watch.max_retained[w], static_cast<size_t>(every + 2 + tc.staleness) * chunks)
        << tc.name << ": worker " << w;
    EXPECT_GT(watch.max_retained[w], 0u);
    EXPECT_EQ(c.worker(w).clock(), iterations);
    for (int l : model.param_layers()) EXPECT_EQ(c.worker(w).version(l), iterations);
  }
  EXPECT_TRUE(watch.stale.empty()) << tc.name << ": " << watch.stale.front();
}

std::vector<ShardCrashCase> ShardCrashCases() {
  std::vector<ShardCrashCase> v;
  const std::pair<Consistency, int64_t> models[] = {{Consistency::kBsp, 0}, {Consistency::kSsp, 1}};
  const std::pair<ShardCrashCase::Point, const char*> points[] = {
      {ShardCrashCase::kDuringPush, "DuringPush"},
      {ShardCrashCase::kAfterApply, "AfterApply"},
      {ShardCrashCase::kAfterCheckpoint, "AfterCheckpoint"}};
  for (const auto& [cons, s] : models) {
    for (const auto& [point, pname] : points) {
      for (bool detect : {false, true}) {
        for (uint64_t seed : {0u, 5u}) {
          ShardCrashCase tc;
          tc.consistency = cons;
          tc.staleness = s;
          tc.point = point;
          tc.restart_after_detection = detect;
          tc.seed = seed;
          tc.name = std::string(Name(cons)) + pname +
                    (detect ? "RestartAfterDetection" : "RestartAtOnce") +
                    (seed ? "Seed" + std::to_string(seed) : "Fifo");
          v.push_back(tc);
        }
      }
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Points, ShardCrash, ::testing::ValuesIn(ShardCrashCases()),
                         [](const ::testing::TestParamInfo<ShardCrashCase>& i) {
                           return i.param.name;
                         });

// A shard restored from an older checkpoint than the newest, or without one: the workers keep
// only the pushes since the newest, so the clocks in between are gone. The shard finds out from
// the first push each worker sends again, and the job ends with what is missing (kStateLost)
// instead of waiting forever for pushes nobody has.
struct LostCheckpointCase {
  std::string name;
  Consistency consistency;
  int64_t staleness;
  size_t lose_newest;  // checkpoints gone at the restart (3 = all of them)
};

class LostCheckpoint : public ::testing::TestWithParam<LostCheckpointCase> {};

TEST_P(LostCheckpoint, TheRestoredShardEndsTheJobNamingTheMissingClocks) {
  const LostCheckpointCase& tc = GetParam();
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int P = 2, S = 2, victim = 1;
  const int64_t iterations = 12, every = 2;
  FaultCluster c(model, core::JobLayout::Colocated(P, S),
                 FaultConfig(tc.consistency, tc.staleness, iterations, every, /*evict=*/false));
  const ActorId sid = c.layout().server(victim);
  RecordingShardStore& store = c.shard_store(victim);
  bool killed = false;
  // Three checkpoints are durable (the newest of clock 6): every worker has seen the versions of
  // the second and keeps its pushes from clock 4 on at least.
  c.When([&](const FaultCluster::Event&) { return store.checkpoints.size() == 3; },
         [&] {
           killed = true;
           c.Kill(sid);
           c.Restart(sid, tc.lose_newest);
         });
  const auto r = c.Run();
  ASSERT_TRUE(killed);
  EXPECT_FALSE(r.step_limit);
  if (tc.lose_newest == 0) {  // the control: restored from the newest, it replays and finishes
    EXPECT_TRUE(c.state_lost.empty()) << c.state_lost[0].second;
    ExpectJobFinished(c, r, tc.name);
    return;
  }
  ASSERT_EQ(c.state_lost.size(), 1u) << "the job went on or hung without saying why";
  EXPECT_EQ(c.state_lost[0].first, sid);
  const std::string& why = c.state_lost[0].second;
  EXPECT_NE(why.find("keeps its pushes only from clock "), std::string::npos) << why;
  EXPECT_NE(why.find("are in no checkpoint it was restored from"), std::string::npos) << why;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LostCheckpoint,
    ::testing::Values(LostCheckpointCase{"BspNewestCheckpoint", Consistency::kBsp, 0, 0},
                      LostCheckpointCase{"BspOlderCheckpoint", Consistency::kBsp, 0, 2},
                      LostCheckpointCase{"BspNoCheckpoint", Consistency::kBsp, 0, 3},
                      LostCheckpointCase{"SspOlderCheckpoint", Consistency::kSsp, 1, 2},
                      LostCheckpointCase{"SspNoCheckpoint", Consistency::kSsp, 1, 3},
                      LostCheckpointCase{"SspNewestCheckpoint", Consistency::kSsp, 1, 0},
                      LostCheckpointCase{"AspNewestCheckpoint", Consistency::kAsp, 0, 0},
                      LostCheckpointCase{"AspNoCheckpoint", Consistency::kAsp, 0, 3}),
    [](const ::testing::TestParamInfo<LostCheckpointCase>& i) { return i.param.name; });

// ---------------------------------------------------------------------------------------------
// 5. Worker rejoin on shuffled schedules: answers before the rejoin's, interleaved with them.

TEST(BspRejoinShuffled, ExactOnEverySchedule) {
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int P = 3, S = 2;
  const int64_t iterations = 6;
  int interleaved_runs = 0, early_answers = 0;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    FaultCluster c(model, core::JobLayout::Colocated(P, S),
                   FaultConfig(Consistency::kBsp, 0, iterations, seed % 2 ? 2 : 0, false), seed);
    Observer watch(&c);
    const int victim = static_cast<int>(seed % P);
    const ActorId vid = c.layout().worker(victim);
    const int64_t kill_clock = 1 + static_cast<int64_t>(seed % 4);
    const int nth_push = 1 + static_cast<int>((seed * 7) % 20);
    const int delay = seed % 3 == 0 ? 0 : (seed % 3 == 1 ? 150 : -1);  // -1: after detection
    int pushes = 0;
    bool killed = false;
    size_t kill_index = 0;  // deliveries before the kill
    c.on_send = [&](ActorId from, const core::Message& m) {
      if (m.type == MsgType::kMembership) watch.sent_memberships.push_back({c.now(), m});
      if (from == vid && m.type == MsgType::kPushGrad && m.clock == kill_clock &&
          c.incarnation(vid) == 0) {
        ++pushes;
      }
    };
    c.When([&](const FaultCluster::Event&) { return pushes >= nth_push; },
           [&] {
             killed = true;
             kill_index = watch.delivered.size();
             const core::TimeNs at = c.now();
             c.Kill(vid, seed % 5 == 0);
             if (delay == 0) {
               c.Restart(vid);
             } else if (delay > 0) {
               c.When([&, at](const FaultCluster::Event& e) { return e.now >= at + delay; },
                      [&] { c.Restart(vid); });
             } else {
               c.When([&](const FaultCluster::Event&) { return c.coordinator().epoch() >= 1; },
                      [&] { c.Restart(vid); });
             }
           });
    const auto r = c.Run();
    const std::string what = "seed " + std::to_string(seed);
    ASSERT_TRUE(killed) << what;
    ExpectJobFinished(c, r, what);
    // The new incarnation rejoined at the slowest chunk's version.
    int64_t min_version = core::ProtocolConfig::kUnbounded;
    size_t last_reply = 0, first_reply = watch.delivered.size();
    for (size_t i = 0; i < watch.delivered.size(); ++i) {
      const core::Message& m = watch.delivered[i].second;
      if (m.type != MsgType::kParams || m.to != vid) continue;
      if (m.step == core::kRejoinCurrent || m.step == core::kRejoinPrevious) {
        if (m.step == core::kRejoinCurrent) min_version = std::min(min_version, m.clock);
        last_reply = i;
        first_reply = std::min(first_reply, i);
      }
    }
    ASSERT_LT(first_reply, watch.delivered.size()) << what;
    EXPECT_EQ(watch.FirstForward(victim, 1), min_version) << what;
    // Normal answers that reached the new incarnation before its last rejoin answer: before
    // the first (early), or between two of them (interleaved).
    bool interleaved = false;
    for (size_t i = kill_index; i < last_reply; ++i) {
      const core::Message& m = watch.delivered[i].second;
      if (m.type == MsgType::kParams && m.to == vid && m.step == -1) {
        ++early_answers;
        interleaved |= i > first_reply;
      }
    }
    interleaved_runs += interleaved ? 1 : 0;
    ExpectExactBspRejoin(c, watch, iterations, what);
  }
  // The schedules did explore answers that came early and answers between rejoin answers.
  EXPECT_GT(early_answers, 0);
  EXPECT_GT(interleaved_runs, 0);
}

// ---------------------------------------------------------------------------------------------
// 6. ASP: a shard restart; every worker's every push is applied exactly once.

class AspShardCrash : public ::testing::TestWithParam<std::tuple<uint64_t, bool, int>> {};

TEST_P(AspShardCrash, EveryPushAppliedOnce) {
  const auto [seed, restart_after_detection, kill_after_applies] = GetParam();
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int P = 3, S = 2, victim = 1;
  const int64_t iterations = 8, every = 2;
  FaultCluster c(model, core::JobLayout::Colocated(P, S),
                 FaultConfig(Consistency::kAsp, 0, iterations, every, /*evict=*/false), seed);
  Observer watch(&c);
  const ActorId sid = c.layout().server(victim);
  RecordingShardStore& store = c.shard_store(victim);
  bool killed = false;
  c.When(
      [&](const FaultCluster::Event&) {
        return store.applies.size() >= static_cast<size_t>(kill_after_applies);
      },
      [&] {
        killed = true;
        c.Kill(sid);
        if (!restart_after_detection) {
          c.Restart(sid);
          return;
        }
        c.When([&](const FaultCluster::Event&) { return c.coordinator().epoch() >= 1; },
               [&] { c.Restart(sid); });
      });
  const auto r = c.Run();
  const std::string what =
      "seed " + std::to_string(seed) + " after " + std::to_string(kill_after_applies) + " applies";
  ASSERT_TRUE(killed) << what;
  ExpectJobFinished(c, r, what);
  ASSERT_EQ(c.restored_from.size(), 1u);
  std::map<int32_t, std::vector<int64_t>> restored;  // chunk -> per worker
  if (c.restored_from[0].second) {
    for (const core::ChunkProgress& p : c.restored_from[0].second->chunks) {
      restored[p.chunk] = p.applied_by_worker;
    }
  }
  // Final values: every (worker, clock) of every chunk exactly once.
  for (int s = 0; s < S; ++s) {
    for (int32_t cid : c.placement().chunks_of_shard(s)) {
      std::map<std::pair<int, int64_t>, int> seen;
      for (const auto& [clock, pushers] : c.shard_store(s).value(cid).history) {
        ASSERT_EQ(pushers.size(), 1u) << what;
        seen[{pushers[0], clock}]++;
      }
      EXPECT_EQ(seen.size(), static_cast<size_t>(P * iterations)) << what << ": chunk " << cid;
      for (const auto& [key, n] : seen) {
        EXPECT_EQ(n, 1) << what << ": chunk " << cid << " worker " << key.first << " clock "
                        << key.second;
      }
    }
  }
  // Per incarnation once; the new incarnation never below what its checkpoint held.
  std::map<std::tuple<int, int32_t, int, int64_t>, int> applied;
  for (const auto& a : store.applies) {
    ASSERT_EQ(a.pushers.size(), 1u);
    applied[{a.incarnation, a.chunk, a.pushers[0], a.clock}]++;
    if (a.incarnation == 1 && restored.count(a.chunk)) {
      EXPECT_GE(a.clock, restored[a.chunk][static_cast<size_t>(a.pushers[0])]) << what;
    }
  }
  for (const auto& [key, n] : applied) EXPECT_EQ(n, 1) << what;
  for (int w = 0; w < P; ++w) {
    EXPECT_EQ(c.worker(w).clock(), iterations) << what;
    for (int l : model.param_layers()) EXPECT_EQ(c.worker(w).version(l), iterations) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, AspShardCrash,
                         ::testing::Combine(::testing::Values(0u, 4u, 9u, 31u), ::testing::Bool(),
                                            ::testing::Values(30, 100)));

// ---------------------------------------------------------------------------------------------
// More membership cases.

// SSP with eviction: the dead worker is evicted, the others go on, then it restarts and rejoins
// (it is waited for again): the job ends with every worker done and every clock applied once.
TEST(SspRejoin, EvictedWorkerComesBack) {
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int P = 3, S = 2;
  const int64_t iterations = 10;
  for (uint64_t seed : {0u, 3u, 7u, 12u}) {
    FaultCluster c(model, core::JobLayout::Colocated(P, S),
                   FaultConfig(Consistency::kSsp, 1, iterations, 2, /*evict=*/true), seed);
    Observer watch(&c);
    const int victim = 2;
    const ActorId vid = c.layout().worker(victim);
    bool killed = false;
    c.When(
        [&](const FaultCluster::Event& e) {
          return e.is_task(TaskKind::kBackward) && e.action->actor == vid &&
                 e.action->task.clock == 2 && e.action->task.layer == model.param_layers()[1];
        },
        [&] {
          killed = true;
          c.Kill(vid);
          // Back once the others have run ahead without it.
          c.When(
              [&](const FaultCluster::Event&) {
                return c.coordinator().epoch() >= 1 && c.worker(0).clock() >= 5;
              },
              [&] { c.Restart(vid); });
        });
    const auto r = c.Run();
    const std::string what = "seed " + std::to_string(seed);
    ASSERT_TRUE(killed) << what;
    ExpectJobFinished(c, r, what);
    EXPECT_EQ(c.coordinator().epoch(), 2u) << what;
    EXPECT_TRUE(c.coordinator().alive(vid)) << what;
    EXPECT_GT(watch.FirstForward(victim, 1), 2) << what << ": it rejoins where the shards are";
    EXPECT_TRUE(watch.stale.empty()) << what << ": " << watch.stale.front();
    ExpectAppliesAveragedTheirPushes(c, what);
    std::map<std::pair<int32_t, int64_t>, int> applied;
    int without_victim = 0;
    for (int s = 0; s < S; ++s) {
      for (const auto& a : c.shard_store(s).applies) {
        applied[{a.chunk, a.clock}]++;
        without_victim += std::count(a.pushers.begin(), a.pushers.end(), victim) ? 0 : 1;
      }
      for (int32_t cid : c.placement().chunks_of_shard(s)) {
        EXPECT_EQ(c.shard(s).version(cid), iterations) << what;
      }
    }
    EXPECT_GT(without_victim, 0) << what;
    EXPECT_EQ(applied.size(), c.placement().chunks().size() * static_cast<size_t>(iterations));
    for (const auto& [key, n] : applied) EXPECT_EQ(n, 1) << what;
    for (int w = 0; w < P; ++w) {
      EXPECT_TRUE(c.worker(w).finished()) << what;
      for (int l : model.param_layers()) EXPECT_EQ(c.worker(w).version(l), iterations) << what;
    }
    // After it rejoined, the last clocks averaged every worker's push again.
    for (int s = 0; s < S; ++s) {
      for (const auto& a : c.shard_store(s).applies) {
        if (a.clock == iterations - 1) {
          EXPECT_EQ(a.num_pushes, P) << what;
        }
      }
    }
  }
}

// Two faults at once (BSP): a worker and a shard die together; the worker comes back first, so
// its kRejoin to the dead shard is lost; it asks again when the shard is back, and the job ends
// with every chunk at the last clock.
TEST(BspRejoin, WorkerRejoiningWhileAShardIsDownAsksAgainWhenItIsBack) {
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int P = 3, S = 2;
  const int64_t iterations = 10;
  for (uint64_t seed : {0u, 4u, 9u}) {
    FaultCluster c(model, core::JobLayout::Colocated(P, S),
                   FaultConfig(Consistency::kBsp, 0, iterations, 2, /*evict=*/false), seed);
    const ActorId worker = c.layout().worker(0);
    const ActorId shard = c.layout().server(1);
    bool both_back = false;
    c.When(
        [&](const FaultCluster::Event& e) {
          return e.is_task(TaskKind::kBackward) && e.action->actor == worker &&
                 e.action->task.clock == 4;
        },
        [&] {
          c.Kill(worker);
          c.Kill(shard);
          c.Restart(worker);
          // The shard comes back only once the worker's kRejoin to it was lost.
          c.When(
              [&](const FaultCluster::Event& e) {
                return e.dropped && e.is_message(core::MsgType::kRejoin) && e.action->msg.to == shard;
              },
              [&] {
                c.Restart(shard);
                both_back = true;
              });
        });
    const auto r = c.Run();
    const std::string what = "seed " + std::to_string(seed);
    ASSERT_TRUE(both_back) << what;
    ExpectJobFinished(c, r, what);
    for (int s = 0; s < S; ++s) {
      for (int32_t cid : c.placement().chunks_of_shard(s)) {
        EXPECT_EQ(c.shard(s).version(cid), iterations) << what;
      }
    }
  }
}

// Two faults: a worker is evicted (SSP), then a shard dies and comes back from its checkpoint. The
// restored shard starts with no memory of the eviction; the coordinator tells it who is dead, so
// it does not wait for the evicted worker's pushes, and the job ends.
TEST(SspRejoin, RestoredShardLearnsOfAnEarlierEviction) {
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int P = 3, S = 2;
  const int64_t iterations = 12;
  for (uint64_t seed : {0u, 5u}) {
    FaultCluster c(model, core::JobLayout::Colocated(P, S),
                   FaultConfig(Consistency::kSsp, 1, iterations, 2, /*evict=*/true), seed);
    const ActorId victim = c.layout().worker(2);
    const ActorId shard = c.layout().server(1);
    bool shard_back = false;
    c.When(
        [&](const FaultCluster::Event& e) {
          return e.is_task(TaskKind::kBackward) && e.action->actor == victim &&
                 e.action->task.clock == 2;
        },
        [&] {
          c.Kill(victim);
          c.When([&](const FaultCluster::Event&) { return c.coordinator().epoch() >= 1 && c.worker(0).clock() >= 6; },
                 [&] {
                   c.Kill(shard);
                   c.Restart(shard);
                   shard_back = true;
                 });
        });
    const auto r = c.Run();
    const std::string what = "seed " + std::to_string(seed);
    ASSERT_TRUE(shard_back) << what;
    ExpectJobFinished(c, r, what);
    EXPECT_FALSE(c.coordinator().alive(victim)) << what;
    for (int32_t cid : c.placement().chunks_of_shard(1)) {
      EXPECT_EQ(c.shard(1).version(cid), iterations) << what;
    }
  }
}

// A shard that owns no chunk has nothing to do from the start; it must not be taken for dead.
TEST(Detection, ShardWithoutChunksIsNotDeclaredDead) {
  const core::Model model = core::Model::Build(testing::SingleFcSpec(4, 2));  // one chunk
  core::ProtocolConfig cfg = FaultConfig(Consistency::kBsp, 0, 60, 0, false);
  cfg.fault.heartbeat_ns = 10;
  cfg.fault.failure_timeout_ns = 100;
  FaultCluster c(model, core::JobLayout::Colocated(2, 3), cfg);
  ASSERT_TRUE(c.placement().chunks_of_shard(1).empty());
  ASSERT_TRUE(c.placement().chunks_of_shard(2).empty());
  Observer watch(&c);
  const auto r = c.Run();
  ExpectJobFinished(c, r, "idle shards");
  EXPECT_GT(c.now(), 10 * cfg.fault.failure_timeout_ns);
  EXPECT_EQ(c.coordinator().epoch(), 0u);
  for (const auto& [t, m] : watch.sent_memberships) {
    ADD_FAILURE() << c.layout().ActorName(m.step) << " declared dead at " << t;
  }
}

// The last worker still running dies after the others finished: with eviction the job is over
// (and says so once).
TEST(Detection, LastRunningWorkerDiesAfterTheOthersFinished) {
  const core::Model model = core::Model::Build(testing::SmallNetSpec());
  const int P = 2;
  const int64_t iterations = 6;
  FaultCluster c(model, core::JobLayout::Colocated(P, 1),
                 FaultConfig(Consistency::kAsp, 0, iterations, 0, /*evict=*/true));
  Observer watch(&c);
  const ActorId vid = c.layout().worker(1);
  // Worker 1 stalls at its first forward pass; worker 0 (ASP) runs to its end, then 1 dies.
  c.When(
      [&](const FaultCluster::Event& e) {
        return e.is_task(TaskKind::kForward) && e.action->actor == vid && e.action->task.clock == 1;
      },
      [&] {
        c.Stop(vid);
        c.When([&](const FaultCluster::Event&) { return c.worker(0).finished(); },
               [&] { c.Kill(vid); });
      });
  const auto r = c.Run();
  ExpectJobFinished(c, r, "last worker dead");
  EXPECT_EQ(c.coordinator().epoch(), 1u);
  EXPECT_TRUE(c.worker(0).finished());
}

}  // namespace
}  // namespace poseidon
