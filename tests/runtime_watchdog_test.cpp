// The watchdog of collective runs (docs/reliability.md#faults-under-mpi): a phase past its timeout
// ends the process naming the phase; shorter phases and time outside a phase do not.
#include "meshcast/runtime/watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>

#include "meshcast/duration.h"
#include "meshcast/error.h"
#include "meshcast/runtime/transport.h"

namespace meshcast {
namespace {

using namespace std::chrono_literals;

TEST(WatchdogDeathTest, APhasePastTheTimeoutEndsTheProcessNamingThePhase) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Watchdog watchdog(0.2);
        watchdog.enter("run 2 of 6");
        std::this_thread::sleep_for(30s);
      },
      ::testing::ExitedWithCode(kTimeoutExitStatus),
      "run 2 of 6 did not finish within the timeout of 0.2 s \\(process [0-9]+ on host");
}

TEST(WatchdogTest, PhasesShorterThanTheTimeoutAndTimeOutsideAPhaseAreNotBounded) {
  // Three phases of 0.3 s and 1.5 s outside any, with a 1 s timeout: the process lives on (a
  // watchdog that fired would end this test binary with exit status 3).
  Watchdog watchdog(1);
  for (const char* phase : {"compiling the plan", "run 1 of 2", "run 2 of 2"}) {
    watchdog.enter(phase);
    std::this_thread::sleep_for(300ms);
  }
  watchdog.leave();
  std::this_thread::sleep_for(1500ms);
  SUCCEED();
}

TEST(WatchdogDeathTest, AHugeTimeoutMeansForever) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // 1e10 s and more overflowed the clock's nanoseconds into a deadline already past: the process
  // ended at once with exit status 3. Clamped, the phase runs on and the process exits 0.
  for (double huge : {1e10, 1e300})
    EXPECT_EXIT(
        {
          Watchdog watchdog(huge);
          watchdog.enter("run 1 of 1");
          std::this_thread::sleep_for(200ms);
          watchdog.leave();
          std::exit(0);
        },
        ::testing::ExitedWithCode(0), "")
        << huge;
}

TEST(DurationTest, SecondsAreClampedToWhatTheClockCanWaitFor) {
  EXPECT_EQ(seconds_to_duration(1.5), std::chrono::milliseconds(1500));
  EXPECT_EQ(seconds_to_duration(1e10), seconds_to_duration(kLongestSeconds));
  EXPECT_EQ(seconds_to_duration(1e300), seconds_to_duration(kLongestSeconds));
  EXPECT_GT(seconds_to_duration(kLongestSeconds), std::chrono::hours(24 * 365 * 31));
  // now() plus the longest still lies in the future.
  const auto now = std::chrono::steady_clock::now();
  EXPECT_GT(now + seconds_to_duration(1e300), now);
  EXPECT_EQ(seconds_to_duration(-1), std::chrono::steady_clock::duration::zero());
}

// A transport's deadline converts its timeout the same way: 1e10 s had passed at once.
TEST(DurationTest, ATransportDeadlineOfAHugeTimeoutNeverPasses) {
  for (double huge : {1e10, 1e300}) {
    const Deadline deadline("run", 1, huge);
    EXPECT_FALSE(deadline.passed()) << huge;
    EXPECT_NO_THROW(deadline.check(0, "device 1")) << huge;
  }
}

TEST(WatchdogTest, ANegativeOrNonFiniteTimeoutIsRefused) {
  for (double bad :
       {-1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()})
    try {
      Watchdog watchdog(bad);
      ADD_FAILURE() << "timeout " << bad << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("expected a number of seconds >= 0"), std::string::npos)
          << e.what();
    }
}

}  // namespace
}  // namespace meshcast
