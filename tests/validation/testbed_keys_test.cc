// The testbed's keys (validation/testbed_keys.h): the file format and its located errors, the
// overrides per link rate, the message-CPU fit, the wake-up and hand-off read from traces, where
// the shipped files' keys came from, and one real measurement of the live transport's CPU.
#include "validation/testbed_keys.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "config/scenario.h"
#include "core/trace.h"

namespace poseidon::validation {
namespace {

const char* kKeys = R"(schema_version: 1
host_message_us: 4.18
host_ns_per_byte: 0.66
host_kernel_ns_per_byte:
  - {bandwidth_gbps: 1, ns_per_byte: 0.54}
  - {bandwidth_gbps: 0.1, ns_per_byte: 0.261}
provenance: {cpu: "Intel(R) Xeon(R) Processor", cores: "2", date: "2026-12-04T10:00:00Z"}
)";

std::string ErrorOf(const std::string& text) {
  try {
    ParseTestbedKeys(text, "keys.yaml");
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(TestbedKeys, ReadsWhatItWrites) {
  const TestbedKeys k = ParseTestbedKeys(kKeys, "keys.yaml");
  EXPECT_DOUBLE_EQ(k.host_message_us, 4.18);
  EXPECT_DOUBLE_EQ(k.host_ns_per_byte, 0.66);
  ASSERT_EQ(k.kernel_ns_per_byte.size(), 2u);
  EXPECT_DOUBLE_EQ(k.kernel_ns_per_byte.at(0.1), 0.261);
  EXPECT_EQ(k.provenance.at("cores"), "2");
  TestbedKeys m = k;
  m.measurements["message_cpu"] = "256 B 4.5 us: a \"quoted\" figure";
  std::ostringstream out;
  WriteTestbedKeys(m, out);
  const TestbedKeys back = ParseTestbedKeys(out.str(), "written.yaml");
  EXPECT_EQ(back.host_message_us, m.host_message_us);
  EXPECT_EQ(back.host_ns_per_byte, m.host_ns_per_byte);
  EXPECT_EQ(back.kernel_ns_per_byte, m.kernel_ns_per_byte);
  EXPECT_EQ(back.measurements, m.measurements);
  EXPECT_EQ(back.provenance, m.provenance);
  EXPECT_EQ(back.host_wakeup_cpu_us, 0);  // a file without it: the network files' figure stays
  m.host_wakeup_cpu_us = 13.1;
  std::ostringstream with;
  WriteTestbedKeys(m, with);
  EXPECT_NE(with.str().find("\nhost_wakeup_cpu_us: 13.1\n"), std::string::npos) << with.str();
  EXPECT_EQ(ParseTestbedKeys(with.str(), "written.yaml").host_wakeup_cpu_us, 13.1);
  // The latencies likewise: absent, the network files' stay; present, they round-trip.
  EXPECT_EQ(back.host_wakeup_us, 0);
  EXPECT_EQ(back.host_handoff_us, 0);
  m.host_wakeup_us = 82.3;
  m.host_handoff_us = 15.1;
  std::ostringstream lat;
  WriteTestbedKeys(m, lat);
  EXPECT_NE(lat.str().find("\nhost_wakeup_us: 82.3\nhost_handoff_us: 15.1\n"), std::string::npos)
      << lat.str();
  const TestbedKeys l = ParseTestbedKeys(lat.str(), "written.yaml");
  EXPECT_EQ(l.host_wakeup_us, 82.3);
  EXPECT_EQ(l.host_handoff_us, 15.1);
  // A file of latencies alone ('--testbed-keys latencies'): no CPU keys written or read.
  TestbedKeys only;
  only.host_wakeup_us = 82.3;
  only.host_handoff_us = 15.1;
  only.provenance = {{"cpu", "x"}};
  std::ostringstream o;
  WriteTestbedKeys(only, o);
  EXPECT_EQ(o.str().find("host_message_us"), std::string::npos) << o.str();
  const TestbedKeys ob = ParseTestbedKeys(o.str(), "latencies.yaml");
  EXPECT_FALSE(ob.HasCpuKeys());
  EXPECT_TRUE(ParseTestbedKeys(kKeys, "keys.yaml").HasCpuKeys());
  EXPECT_EQ(ob.host_wakeup_us, 82.3);
  EXPECT_EQ(ob.host_handoff_us, 15.1);
}

TEST(TestbedKeys, BadFilesAreOneLocatedLine) {
  std::string e = ErrorOf("schema_version: 1\nhost_message_us: 4\nhost_ns_per_byte: 1\n"
                          "host_kernel_ns_per_byte: []\nprovenance: {}\n");
  EXPECT_NE(e.find("keys.yaml:4:"), std::string::npos) << e;
  EXPECT_NE(e.find("one per link rate"), std::string::npos) << e;
  e = ErrorOf("schema_version: 1\nhost_message_us: -4\nhost_ns_per_byte: 1\n"
              "host_kernel_ns_per_byte: [{bandwidth_gbps: 1, ns_per_byte: 1}]\nprovenance: {}\n");
  EXPECT_NE(e.find("keys.yaml:2:"), std::string::npos) << e;
  e = ErrorOf("schema_version: 1\nhost_message_us: 4\nhost_ns_per_byte: 1\n"
              "host_kernel_ns_per_byte:\n  - {bandwidth_gbps: 1, ns_per_byte: 1}\n"
              "  - {bandwidth_gbps: 1.0, ns_per_byte: 2}\nprovenance: {}\n");
  EXPECT_NE(e.find("keys.yaml:6:"), std::string::npos) << e;
  EXPECT_NE(e.find("a second figure for 1 Gbit/s"), std::string::npos) << e;
  e = ErrorOf("schema_version: 1\nhost_message_us: 4\nhost_ns_per_byte: 1\n"
              "host_kernel_ns_per_byte: [{bandwidth_gbps: 1, ns_per_byte: 1}]\n");
  EXPECT_NE(e.find("no 'provenance'"), std::string::npos) << e;
  e = ErrorOf("schema_version: 1\nhost_message_us: 4\nhost_ns_per_byte: 1\nhost_mesage_us: 3\n"
              "host_kernel_ns_per_byte: [{bandwidth_gbps: 1, ns_per_byte: 1}]\nprovenance: {}\n");
  EXPECT_NE(e.find("unknown key 'host_mesage_us'"), std::string::npos) << e;
  // An optional key out of range, after the three CPU keys: its own line.
  const struct {
    const char* tail;
    const char* where;
    const char* key;
  } optional[] = {{"host_wakeup_cpu_us: 0\n", "keys.yaml:5:", "host_wakeup_cpu_us"},
                  {"host_wakeup_us: 80\nhost_handoff_us: -3\n", "keys.yaml:6:", "host_handoff_us"}};
  for (const auto& c : optional) {
    e = ErrorOf(std::string("schema_version: 1\nhost_message_us: 4\nhost_ns_per_byte: 1\n"
                            "host_kernel_ns_per_byte: [{bandwidth_gbps: 1, ns_per_byte: 1}]\n") +
                c.tail + "provenance: {}\n");
    EXPECT_NE(e.find(c.where), std::string::npos) << e;
    EXPECT_NE(e.find(c.key), std::string::npos) << e;
  }
  // Latencies with part of the CPU keys: all three are asked for.
  e = ErrorOf("schema_version: 1\nhost_message_us: 4\nhost_wakeup_us: 80\nprovenance: {}\n");
  EXPECT_NE(e.find("host_ns_per_byte"), std::string::npos) << e;
  // Neither CPU keys nor latencies: the CPU keys are asked for.
  e = ErrorOf("schema_version: 1\nprovenance: {}\n");
  EXPECT_NE(e.find("host_message_us"), std::string::npos) << e;
  EXPECT_THROW(LoadTestbedKeys("/nonexistent/keys.yaml"), config::ConfigError);
}

config::NetworkSpec Links(double gbps, double wakeup_us = 0, double handoff_us = 0) {
  config::NetworkSpec n;
  n.host_bandwidth_Bps = gbps * 1e9 / 8;
  n.host_wakeup_ns = wakeup_us * 1e3;
  n.host_handoff_ns = handoff_us * 1e3;
  return n;
}

TEST(TestbedKeys, OverridesTakeTheLinkRatesFigure) {
  TestbedKeys k = ParseTestbedKeys(kKeys, "keys.yaml");
  const std::vector<std::string> o = TestbedKeyOverrides(k, Links(0.1, 115), "keys.yaml");
  ASSERT_EQ(o.size(), 3u);
  EXPECT_EQ(o[0], "cluster.network.host_message_us=4.18");
  EXPECT_EQ(o[1], "cluster.network.host_ns_per_byte=0.66");
  EXPECT_EQ(o[2], "cluster.network.host_kernel_ns_per_byte=0.261");
  // The wake-up's CPU where the file has it and the network charges wake-ups; not otherwise.
  k.host_wakeup_cpu_us = 9.5;
  const std::vector<std::string> wake = TestbedKeyOverrides(k, Links(0.1, 115), "keys.yaml");
  ASSERT_EQ(wake.size(), 4u);
  EXPECT_EQ(wake[3], "cluster.network.host_wakeup_cpu_us=9.5");
  EXPECT_EQ(TestbedKeyOverrides(k, Links(0.1), "keys.yaml").size(), 3u);
  // The latencies where the file has them and the network charges them.
  k.host_wakeup_us = 82.3;
  k.host_handoff_us = 15.1;
  // Latencies alone (a file of them: any link rate, no kernel figure needed), the CPU keys
  // untouched; with the CPU keys, after them.
  TestbedKeys only;
  only.host_wakeup_us = 82.3;
  only.host_handoff_us = 15.1;
  for (const auto& [keys, size] : {std::pair<const TestbedKeys*, size_t>{&k, 6}, {&only, 2}}) {
    const std::vector<std::string> lat =
        TestbedKeyOverrides(*keys, Links(size == 6 ? 0.1 : 10, 115, 66.8), "keys.yaml");
    ASSERT_EQ(lat.size(), size);
    EXPECT_EQ(lat[size - 2], "cluster.network.host_wakeup_us=82.3");
    EXPECT_EQ(lat[size - 1], "cluster.network.host_handoff_us=15.1");
  }
  EXPECT_EQ(TestbedKeyOverrides(k, Links(0.1, 115), "keys.yaml").size(), 5u);  // no hand-off
  EXPECT_EQ(TestbedKeyOverrides(k, Links(0.1), "keys.yaml").size(), 3u);
  try {
    TestbedKeyOverrides(k, Links(10), "keys.yaml");
    FAIL() << "a rate the file does not have";
  } catch (const config::ConfigError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("keys.yaml: error: no host_kernel_ns_per_byte for links of 10 Gbit/s"),
              std::string::npos) << w;
    EXPECT_NE(w.find("0.1, 1 Gbit/s"), std::string::npos) << w;
  }
}

TEST(TestbedKeys, TheFitRecoversTwoTerms) {
  std::vector<MessageCpuPoint> p;
  for (int64_t b : {256, 4096, 65536, 1 << 20}) p.push_back({b, 4.0 + 0.66e-3 * static_cast<double>(b)});
  const auto [c, ns] = FitMessageCpu(p);
  EXPECT_NEAR(c, 4.0, 1e-9);
  EXPECT_NEAR(ns, 0.66, 1e-9);
  EXPECT_THROW(FitMessageCpu({{256, 4.0}}), std::invalid_argument);
  EXPECT_THROW(FitMessageCpu({{256, 4.0}, {256, 5.0}}), std::invalid_argument);
  EXPECT_THROW(FitMessageCpu({{256, 0.0}, {4096, 5.0}}), std::invalid_argument);
}

TraceRecord Task(int64_t ts_us, int64_t dur_us, int64_t clock, int lane = core::kLaneCompute) {
  TraceRecord r;
  r.kind = TraceRecordKind::kTask;
  r.thread.actor = 1;
  r.thread.lane = lane;
  r.tid = core::TraceThreadId(1, 0, lane);
  r.ts = ts_us * 1000;
  r.dur = dur_us * 1000;
  r.clock = clock;
  return r;
}

TEST(TestbedKeys, WakeUpsAndHandOffsAreReadAsTheScriptReadsThem) {
  // (start, duration) in us; a task is seen at start + duration. Each task but the first starts
  // before its predecessor is seen (handed over early), so its predecessor's modelled end is its
  // start.
  //   a [0, 100), b [50, 150), c [120, 170), d [140, 180), e [145, 195)
  //   (a, b, c): b's end 120 > seen(a) 100: b's thread slept to it, a wake-up 150 - 120 = 30
  //   (b, c, d): c's end 140 <= seen(b) 150: a hand-off seen(c) - seen(b) = 20
  //   (c, d, e): d's end 145 <= seen(c) 170: a hand-off seen(d) - seen(c) = 10
  std::vector<TraceRecord> t = {Task(0, 100, 2), Task(50, 100, 2), Task(120, 50, 2),
                                Task(140, 40, 3), Task(145, 50, 3)};
  t.push_back(Task(60, 200, 2, core::kLaneCopy));  // another lane: ignored
  HostLatencySamples s;
  AddHostLatencies(t, 2, &s);
  ASSERT_EQ(s.wakeup_us.size(), 1u);
  EXPECT_DOUBLE_EQ(s.wakeup_us[0], 30);
  ASSERT_EQ(s.handoff_us.size(), 2u);
  EXPECT_DOUBLE_EQ(s.handoff_us[0], 20);
  EXPECT_DOUBLE_EQ(s.handoff_us[1], 10);
  EXPECT_EQ(s.wakeup_quiet_us, s.wakeup_us);  // no messages: every sample is quiet
  EXPECT_EQ(s.handoff_quiet_us, s.handoff_us);

  // Kept apart: samples during which a message reached the lane's process. The lane is named
  // "worker 0 compute"; a message to worker 0 lands in the wake-up (120, 150] and in the first
  // hand-off (150, 170]; one to worker 1 in the second hand-off (170, 180] does not count.
  TraceRecord lane;
  lane.phase = 'M';
  lane.kind = TraceRecordKind::kMetadata;
  lane.name = "thread_name";
  lane.tid = t[0].tid;
  lane.label = "worker 0 compute";
  auto message = [](int64_t at_us, const std::string& role, int index) {
    TraceRecord m;
    m.kind = TraceRecordKind::kMessage;
    m.ts = (at_us - 5) * 1000;
    m.dur = 5000;
    m.peer_role = role;
    m.peer_index = index;
    return m;
  };
  std::vector<TraceRecord> busy = t;
  busy.push_back(lane);
  busy.push_back(message(140, "worker", 0));
  busy.push_back(message(165, "worker", 0));
  busy.push_back(message(175, "worker", 1));
  HostLatencySamples b;
  AddHostLatencies(busy, 2, &b);
  EXPECT_EQ(b.wakeup_us, s.wakeup_us);
  EXPECT_EQ(b.handoff_us, s.handoff_us);
  EXPECT_TRUE(b.wakeup_quiet_us.empty());
  ASSERT_EQ(b.handoff_quiet_us.size(), 1u);
  EXPECT_DOUBLE_EQ(b.handoff_quiet_us[0], 10);

  // A task not handed over early (it starts after its predecessor was seen) has no modelled end.
  HostLatencySamples late;
  AddHostLatencies({Task(0, 100, 2), Task(50, 100, 2), Task(160, 10, 2)}, 2, &late);
  EXPECT_TRUE(late.wakeup_us.empty() && late.handoff_us.empty());
  // The warm-up clocks are left out: only d and e remain, no three tasks.
  HostLatencySamples warm;
  AddHostLatencies(t, 3, &warm);
  EXPECT_TRUE(warm.wakeup_us.empty() && warm.handoff_us.empty());
}

TEST(TestbedKeys, TheShippedFilesSayWhereTheirKeysWereMeasured) {
  const config::ScenarioSpec s =
      config::LoadScenarioFile(std::string(POSEIDON_SOURCE_DIR) + "/scenarios/validation/mlp_1g.yaml", {});
  TestbedKeysUsed u;
  ASSERT_TRUE(KeysUsed(s, "", nullptr, &u));
  EXPECT_DOUBLE_EQ(u.gbps, 1);
  EXPECT_DOUBLE_EQ(u.message_us, 7.4);
  EXPECT_DOUBLE_EQ(u.wakeup_cpu_us, 13.1);
  EXPECT_EQ(u.measured_on.cpu, "AMD EPYC");
  EXPECT_EQ(u.measured_on.cores, 2);
  EXPECT_FALSE(u.measured_date.empty());
  TestbedKeysEntry e{u, {}, 3};
  const HostIdentity same{"AMD EPYC", 2, "Linux 6.1"};
  const HostIdentity other{"Intel(R) Xeon(R) Processor", 2, "Linux 6.1"};
  EXPECT_EQ(TestbedKeysText({e}, same).find("another kind of machine"), std::string::npos);
  EXPECT_NE(TestbedKeysText({e}, same).find("host_handoff_us 66.8, host_wakeup_cpu_us 13.1\n"),
            std::string::npos)
      << TestbedKeysText({e}, same);
  EXPECT_NE(TestbedKeysJson({e}, same).find("\"host_wakeup_cpu_us\":13.1"), std::string::npos)
      << TestbedKeysJson({e}, same);
  EXPECT_NE(TestbedKeysText({e}, other).find("another kind of machine"), std::string::npos);
  EXPECT_NE(TestbedKeysJson({e}, other).find("\"same_kind_as_this_host\":false"), std::string::npos);

  TestbedKeys k = ParseTestbedKeys(kKeys, "keys.yaml");
  // The 1 Gbit/s scenario charged `keys` (from `file`): what KeysUsed says of it.
  auto used_with = [&](const TestbedKeys& keys, const std::string& file) {
    const config::ScenarioSpec m = config::LoadScenarioFile(
        std::string(POSEIDON_SOURCE_DIR) + "/scenarios/validation/mlp_1g.yaml",
        TestbedKeyOverrides(keys, s.network, file));
    TestbedKeysUsed out;
    EXPECT_TRUE(KeysUsed(m, file, &keys, &out));
    return out;
  };
  u = used_with(k, "keys.yaml");
  EXPECT_DOUBLE_EQ(u.message_us, 4.18);
  EXPECT_DOUBLE_EQ(u.kernel_ns_per_byte, 0.54);
  EXPECT_DOUBLE_EQ(u.wakeup_cpu_us, 13.1);  // not in the keys file: the network file's
  EXPECT_EQ(u.measured_on.cpu, "Intel(R) Xeon(R) Processor");
  EXPECT_NE(u.source.find("keys.yaml (message and kernel CPU; wake-up, its CPU"), std::string::npos)
      << u.source;
  k.host_wakeup_cpu_us = 9.5;
  u = used_with(k, "keys.yaml");
  EXPECT_DOUBLE_EQ(u.wakeup_cpu_us, 9.5);
  EXPECT_NE(u.source.find("keys.yaml (message, kernel and wake-up CPU;"), std::string::npos)
      << u.source;
  k.host_wakeup_us = 82.3;
  k.host_handoff_us = 15.1;
  u = used_with(k, "keys.yaml");
  EXPECT_DOUBLE_EQ(u.wakeup_us, 82.3);
  EXPECT_DOUBLE_EQ(u.handoff_us, 15.1);
  EXPECT_NE(u.source.find("keys.yaml (message, kernel and wake-up CPU, wake-up and hand-off "
                          "latency)"),
            std::string::npos)
      << u.source;
  TestbedKeys only;
  only.host_wakeup_us = 82.3;
  only.host_handoff_us = 15.1;
  u = used_with(only, "l.yaml");
  EXPECT_DOUBLE_EQ(u.handoff_us, 15.1);
  EXPECT_DOUBLE_EQ(u.message_us, s.network.host_message_ns / 1e3);  // the network file's
  EXPECT_EQ(u.measured_on.cpu, "AMD EPYC");  // where the file's CPU keys were measured
  EXPECT_NE(u.source.find("l.yaml (wake-up and hand-off latency; message, kernel and wake-up CPU "
                          "from "),
            std::string::npos)
      << u.source;

  // Latencies whose rounds disagreed when measured: the report says so, beside the keys.
  only.measurements["latency_warning"] = LatencyRoundsWarning("hand-off", {1.7, 49.3, 52.6});
  u = used_with(only, "l.yaml");
  EXPECT_EQ(u.latency_warning, only.measurements["latency_warning"]);
  TestbedKeysEntry flipped{u, {}, 2};
  EXPECT_NE(TestbedKeysText({flipped}, same)
                .find("    measured: the hand-off's rounds disagree (1.7, "
                      "49.3 and 52.6 us, more than twice apart)"),
            std::string::npos)
      << TestbedKeysText({flipped}, same);
  EXPECT_NE(TestbedKeysJson({flipped}, same).find("\"latency_warning\":\"the hand-off's rounds"),
            std::string::npos);
  EXPECT_NE(TestbedKeysJson({e}, same).find("\"latency_warning\":null"), std::string::npos);
  // And it survives the keys file.
  std::ostringstream written;
  WriteTestbedKeys(only, written);
  EXPECT_EQ(ParseTestbedKeys(written.str(), "w.yaml").measurements.at("latency_warning"),
            only.measurements["latency_warning"]);

  // A real cluster's network charges no host CPU: no testbed keys.
  const config::ScenarioSpec real =
      config::LoadScenarioFile(std::string(POSEIDON_SOURCE_DIR) + "/scenarios/demo.yaml", {});
  EXPECT_FALSE(KeysUsed(real, "", nullptr, &u));
}

TEST(TestbedKeys, TheLiveTransportsMessageCpuIsMeasured) {
  // A real measurement (loopback TCP, this process's CPU): it says nothing about speed, only
  // that every size costs something and a 1 MiB message more than a 256 B one.
  const std::vector<MessageCpuPoint> p = MeasureMessageCpu(1, 4 << 20);
  ASSERT_EQ(p.size(), 4u);
  for (const MessageCpuPoint& x : p) EXPECT_GT(x.us_per_message, 0) << x.bytes;
  EXPECT_GT(p.back().us_per_message, p.front().us_per_message);
}

TEST(TestbedKeys, TheWakeUpsCpuIsMeasured) {
  // A real measurement (this process's CPU over rounds of three wake-ups): every round is listed
  // as evidence and the median is one of them.
  std::vector<std::string> evidence;
  const double us = MeasureWakeupCpuUs(3, 200, &evidence);
  EXPECT_GT(us, 0);
  ASSERT_EQ(evidence.size(), 3u);
  for (const std::string& e : evidence) EXPECT_NE(e.find("200 rounds:"), std::string::npos) << e;
}

// Rounds more than twice (and 10 us) apart are named; rounds that agree, or differ by a few
// microseconds, are not.
TEST(TestbedKeys, LatencyRoundsThatDisagreeAreNamed) {
  EXPECT_EQ(
      LatencyRoundsWarning("hand-off", {1.9, 53.0, 1.8})
          .rfind("the hand-off's rounds disagree (1.9, 53.0 and 1.8 us, more than twice apart)", 0),
      0u);
  EXPECT_NE(LatencyRoundsWarning("wake-up", {10, 25, 30}), "");
  EXPECT_EQ(LatencyRoundsWarning("wake-up", {83.0, 83.2, 83.7}), "");
  EXPECT_EQ(LatencyRoundsWarning("hand-off", {1.7, 1.9, 4.4}), "");  // 2.6x, but 2.7 us apart
  EXPECT_EQ(LatencyRoundsWarning("hand-off", {30, 55}), "");         // under twice
  EXPECT_EQ(LatencyRoundsWarning("hand-off", {2.0}), "");
}

TEST(TestbedKeys, TheWakeUpAndHandOffLatenciesAreMeasured) {
  // A real measurement (this process's threads, one round at a time): it says nothing about
  // speed, only that both latencies are measured and every round is listed as evidence.
  std::vector<std::string> evidence;
  const auto [wake, handoff] = MeasureHostLatencyUs(3, 50, &evidence);
  EXPECT_GT(wake, 0);
  EXPECT_GT(handoff, 0);
  ASSERT_EQ(evidence.size(), 3u);
  for (const std::string& e : evidence) {
    EXPECT_NE(e.find("50 rounds each: wake-up median"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace poseidon::validation
