// The watchdog of collective runs (docs/reliability.md#faults-under-mpi): a phase past its timeout
// ends the process naming the phase; shorter phases and time outside a phase do not.
#include "meshcast/runtime/watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <string>
#include <thread>

#include "meshcast/error.h"

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
