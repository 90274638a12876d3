#include "meshcast/runtime/watchdog.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "meshcast/duration.h"
#include "meshcast/error.h"

namespace meshcast {

void check_timeout(double timeout_s) {
  if (!std::isfinite(timeout_s) || timeout_s < 0)
    throw InvalidArgument(
        fmt::format("bad timeout {} s: expected a number of seconds >= 0 (0: none)", timeout_s));
}

Watchdog::Watchdog(double timeout_s) : timeout_s_(timeout_s) {
  check_timeout(timeout_s);
  if (timeout_s > 0) thread_ = std::jthread([this](std::stop_token stop) { watch(stop); });
}

Watchdog::~Watchdog() = default;

void Watchdog::enter(std::string phase) {
  if (timeout_s_ == 0) return;
  {
    std::lock_guard lock(mutex_);
    phase_ = std::move(phase);
    // A timeout beyond kLongestSeconds waits that long: forever for any run.
    deadline_ = Clock::now() + seconds_to_duration(timeout_s_);
  }
  changed_.notify_all();
}

void Watchdog::leave() {
  if (timeout_s_ == 0) return;
  {
    std::lock_guard lock(mutex_);
    deadline_.reset();
  }
  changed_.notify_all();
}

void Watchdog::watch(std::stop_token stop) {
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    if (!deadline_) {
      changed_.wait(lock, stop, [this] { return deadline_.has_value(); });
      continue;
    }
    const Clock::time_point deadline = *deadline_;
    // Wakes early when the phase changes or ends; only an unchanged deadline that passed ends
    // the process.
    if (changed_.wait_until(lock, stop, deadline, [&] { return deadline_ != deadline; })) continue;
    if (stop.stop_requested()) return;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    // Nothing that could block (no lock another thread may hold, no MPI): this thread may be
    // the only one of the process still able to act.
    std::fprintf(stderr,
                 "meshcast: error: %s did not finish within the timeout of %g s (process %d on "
                 "host %s): expected every process to keep up; a peer process may have died or "
                 "hung\n",
                 phase_.c_str(), timeout_s_, static_cast<int>(getpid()), host);
    std::fflush(stderr);
    std::_Exit(kTimeoutExitStatus);
  }
}

}  // namespace meshcast
