// Watchdog: a bound on how long a process waits in one phase of a collective run (compiling a
// plan, one run, a verification, a pipeline step). A process blocked inside MPI on a peer that
// died or hangs cannot be woken from inside the call; when a phase runs past its timeout, the
// watchdog prints what the process waited in and ends it with kTimeoutExitStatus, and mpirun,
// which stops a job when one of its processes exits non-zero, then stops every other rank.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace meshcast {

// The exit status of a process ended by its watchdog.
inline constexpr int kTimeoutExitStatus = 3;
// Seconds one phase may last unless the caller says otherwise (`--timeout` of run and bench).
inline constexpr double kDefaultTimeoutS = 300;

// Throws InvalidArgument unless `timeout_s` is a finite number of seconds >= 0 (0: no bound);
// every timeout a user gives (the watchdog's, an executor's) is checked here.
void check_timeout(double timeout_s);

class Watchdog {
 public:
  // `timeout_s`: seconds one phase may last; 0 turns the watchdog off, and one above
  // kLongestSeconds (meshcast/duration.h, about 31.7 years) waits that long, i.e. forever. Throws
  // InvalidArgument when it is negative or not a finite number.
  explicit Watchdog(double timeout_s);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts timing a phase; `phase` (e.g. "run 3 of 6") is what the message says was waited in.
  // Entering a phase ends the one before.
  void enter(std::string phase);
  // Ends the current phase: time outside a phase (a caller's own work between runs) is not
  // bounded.
  void leave();

  double timeout_s() const { return timeout_s_; }

 private:
  using Clock = std::chrono::steady_clock;
  void watch(std::stop_token stop);

  const double timeout_s_;
  std::mutex mutex_;
  std::condition_variable_any changed_;
  std::string phase_;
  std::optional<Clock::time_point> deadline_;  // none outside a phase
  std::jthread thread_;  // last: stopped and joined before the members it reads go away
};

}  // namespace meshcast
