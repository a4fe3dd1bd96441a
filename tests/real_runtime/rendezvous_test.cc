// The rendezvous's clock sync and the coordinator's progress watchdog, alone.
#include "real_runtime/rendezvous.h"

#include <gtest/gtest.h>

#include <asio/io_context.hpp>
#include <functional>
#include <map>
#include <string>

#include "real_runtime/progress_watchdog.h"

namespace poseidon::rt {
namespace {

TEST(ClockSyncTest, TheSampleWithTheSmallestRoundTripSetsTheOffset) {
  ClockSync c;
  // The local clock runs 1,000 ns behind the coordinator's. A slow sample whose answer the
  // coordinator stamped late in its round trip gives a skewed estimate; the fast one the truth.
  c.OnPong(/*sent=*/0, /*coordinator=*/1'900, /*received=*/2'000);   // rtt 2000 -> +900
  EXPECT_EQ(c.offset(), 900);
  c.OnPong(/*sent=*/5'000, /*coordinator=*/6'050, /*received=*/5'100);  // rtt 100 -> +1000
  EXPECT_EQ(c.offset(), 1'000);
  EXPECT_EQ(c.round_trip(), 100);
  c.OnPong(/*sent=*/9'000, /*coordinator=*/20'000, /*received=*/9'500);  // slower: ignored
  EXPECT_EQ(c.offset(), 1'000);
  EXPECT_EQ(c.samples(), 3);
  EXPECT_FALSE(c.done());
}

TEST(ClockSyncTest, ANegativeRoundTripCountsButIsNeverBelieved) {
  ClockSync c;
  for (int i = 0; i < kClockPings; ++i) c.OnPong(/*sent=*/100, /*coordinator=*/7, /*received=*/50);
  EXPECT_TRUE(c.done());
  EXPECT_EQ(c.offset(), 0);
}

TEST(ProgressWatchdogTest, NoProgressAsksEveryoneAndEndsWithTheAnswers) {
  asio::io_context io;
  int asked = 0, stuck = 0;
  std::map<int, std::string> got;
  ProgressWatchdog::Callbacks cb;
  cb.ask = [&] {
    ++asked;
    return true;
  };
  cb.stuck = [&](const std::map<int, std::string>& answers) {
    ++stuck;
    got = answers;
  };
  ProgressWatchdog w(io, std::chrono::seconds(1), /*processes=*/2, cb);
  w.Progress();
  EXPECT_FALSE(w.asking());
  // Once asked, the two answers end the wait at once (not after kAnswerWait).
  asio::steady_timer answer(io);
  std::function<void()> poll = [&] {
    if (!w.asking()) {
      answer.expires_after(std::chrono::milliseconds(20));
      answer.async_wait([&](const std::error_code&) { poll(); });
      return;
    }
    w.Answer(1, "worker 1: waits for its pull of clock 3");
    w.Progress();  // ignored while asking
    w.Answer(2, "shard 0: waits for the push of worker 1");
  };
  poll();
  io.run();
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(stuck, 1);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[2], "shard 0: waits for the push of worker 1");
}

TEST(ProgressWatchdogTest, AJobThatIsEndingAnywayIsNotDeclaredStuck) {
  asio::io_context io;
  int stuck = 0;
  ProgressWatchdog::Callbacks cb;
  cb.ask = [] { return false; };
  cb.stuck = [&](const std::map<int, std::string>&) { ++stuck; };
  ProgressWatchdog w(io, std::chrono::seconds(1), 1, cb);
  w.Progress();
  io.run();
  EXPECT_FALSE(w.asking());
  EXPECT_EQ(stuck, 0);
}

TEST(ProgressWatchdogTest, ZeroTurnsItOff) {
  asio::io_context io;
  int asked = 0;
  ProgressWatchdog::Callbacks cb;
  cb.ask = [&] { return ++asked > 0; };
  cb.stuck = [](const std::map<int, std::string>&) {};
  ProgressWatchdog w(io, std::chrono::seconds(0), 1, cb);
  w.Progress();
  EXPECT_EQ(io.run(), 0u);  // nothing armed: the loop has no work
  EXPECT_EQ(asked, 0);
}

}  // namespace
}  // namespace poseidon::rt
