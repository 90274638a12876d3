// Random schedules (fixed seeds) against a simple oracle: a schedule is runnable exactly when the
// stages can run their steps in their order one at a time, each step after what it needs.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "meshcast/error.h"
#include "meshcast/pipeline/lower.h"
#include "meshcast/pipeline/simulator.h"

namespace meshcast::pipeline {
namespace {

using Done = std::set<std::tuple<int, Pass, int>>;  // (stage, pass, microbatch)

// Chain of n stages, one chunk: F(mb) on s needs F(mb) on s-1; B(mb) on s needs F(mb) on s and
// B(mb) on s+1.
bool ready(const Done& done, int n, int s, const Step& step) {
  if (step.pass == Pass::forward)
    return s == 0 || done.contains({s - 1, Pass::forward, step.microbatch});
  return done.contains({s, Pass::forward, step.microbatch}) &&
         (s == n - 1 || done.contains({s + 1, Pass::backward, step.microbatch}));
}

// Runs the stages' orders one step at a time; true when every step could run.
bool oracle_runnable(const Schedule& s) {
  Done done;
  std::vector<size_t> next(s.stages, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int d = 0; d < s.stages; ++d)
      while (next[d] < s.order[d].size() && ready(done, s.stages, d, s.order[d][next[d]])) {
        const Step& step = s.order[d][next[d]++];
        done.insert({d, step.pass, step.microbatch});
        progress = true;
      }
  }
  for (int d = 0; d < s.stages; ++d)
    if (next[d] < s.order[d].size()) return false;
  return true;
}

// A random runnable schedule: repeatedly pick a random stage and run a random step of it that is
// ready; the per-stage orders record the picks.
Schedule random_runnable(std::mt19937& rng, int n, int m) {
  Schedule s{.kind = ScheduleKind::custom, .stages = n, .microbatches = m};
  s.order.resize(n);
  Done done;
  while (static_cast<int>(done.size()) < 2 * n * m) {
    const int d = std::uniform_int_distribution<int>(0, n - 1)(rng);
    std::vector<Step> candidates;
    for (int mb = 0; mb < m; ++mb)
      for (Pass pass : {Pass::forward, Pass::backward})
        if (!done.contains({d, pass, mb}) && ready(done, n, d, {pass, mb}))
          candidates.push_back({pass, mb});
    if (candidates.empty()) continue;
    const Step step =
        candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng)];
    done.insert({d, step.pass, step.microbatch});
    s.order[d].push_back(step);
  }
  return s;
}

bool accepted(const Schedule& s) {
  try {
    validate(s);
    return true;
  } catch (const InvalidArgument&) {
    return false;
  }
}

TEST(PipelinePropertyTest, RandomRunnableSchedulesAreAcceptedAndSimulated) {
  std::mt19937 rng(20231);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 5)(rng);
    const int m = std::uniform_int_distribution<int>(1, 6)(rng);
    const Schedule s = random_runnable(rng, n, m);
    ASSERT_TRUE(oracle_runnable(s));
    ASSERT_TRUE(accepted(s)) << schedule_to_text(s);
    for (bool overlap : {true, false}) {
      const auto r = simulate_pipeline(s, uniform_costs(n, 1, 2, 0.3), {.overlap = overlap});
      // Never faster than the busiest stage's compute, never slower than running all in series.
      EXPECT_GE(r.makespan_s, 3.0 * m - 1e-9);
      EXPECT_LE(r.makespan_s, n * m * (3.0 + 2 * 0.3) + 1e-9);
    }
  }
}

TEST(PipelinePropertyTest, ValidatorAgreesWithTheOracleOnSwappedSteps) {
  std::mt19937 rng(777);
  int rejected = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = std::uniform_int_distribution<int>(2, 4)(rng);
    const int m = std::uniform_int_distribution<int>(2, 5)(rng);
    Schedule s = random_runnable(rng, n, m);
    auto& row = s.order[std::uniform_int_distribution<int>(0, n - 1)(rng)];
    std::uniform_int_distribution<size_t> pick(0, row.size() - 1);
    std::swap(row[pick(rng)], row[pick(rng)]);
    const bool runnable = oracle_runnable(s);
    ASSERT_EQ(accepted(s), runnable) << schedule_to_text(s);
    if (runnable)
      EXPECT_NO_THROW(simulate_pipeline(s, uniform_costs(n, 1, 1, 0.5)));
    else
      ++rejected;
  }
  EXPECT_GT(rejected, 50);  // the corpus does exercise rejections
}

}  // namespace
}  // namespace meshcast::pipeline
