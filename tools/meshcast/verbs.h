// The meshcast verbs: each adds its subcommand to the app; its callback does the work.
#pragma once

#include <CLI/CLI.hpp>

namespace meshcast::cli {

void add_tasks_verb(CLI::App& app);
void add_schedule_verb(CLI::App& app);
void add_pipeline_verb(CLI::App& app);
void add_plan_verb(CLI::App& app);
void add_bench_verb(CLI::App& app);
void add_simulate_verb(CLI::App& app);
void add_run_verb(CLI::App& app);
void add_model_verb(CLI::App& app);
#ifdef MESHCAST_CLI_WITH_MPI
void add_calibrate_verb(CLI::App& app);
#endif

}  // namespace meshcast::cli
