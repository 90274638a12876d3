// The meshcast command: plan, simulate and run cross-mesh resharding; generate pipeline schedules.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli_errors.h"
#include "meshcast/error.h"
#include "meshcast/version.h"
#include "verbs.h"

int main(int argc, char** argv) {
  CLI::App app{"meshcast: cross-mesh resharding and pipeline schedules for model parallelism"};
  app.set_version_flag("--version", meshcast::kVersion);
  app.require_subcommand(1);
  meshcast::cli::add_tasks_verb(app);
  meshcast::cli::add_schedule_verb(app);
  meshcast::cli::add_pipeline_verb(app);
  meshcast::cli::add_plan_verb(app);
  meshcast::cli::add_bench_verb(app);
  meshcast::cli::add_simulate_verb(app);
  meshcast::cli::add_run_verb(app);
  meshcast::cli::add_model_verb(app);
#ifdef MESHCAST_CLI_WITH_MPI
  meshcast::cli::add_calibrate_verb(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "meshcast: error: {}\n", meshcast::cli::describe_parse_error(app, e));
    return 2;
  } catch (const meshcast::Error& e) {
    fmt::print(stderr, "meshcast: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "meshcast: internal error: {}\n", e.what());
    return 1;
  }
  return 0;
}
