// The meshcast command: plan, simulate and run cross-mesh resharding; generate pipeline schedules.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli_errors.h"
#include "meshcast/error.h"
#include "meshcast/version.h"
#include "verbs.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

int main(int argc, char** argv) {
#ifdef __GLIBC__
  // Keep freed memory for reuse instead of handing it back to the kernel: planning a model's
  // batch or thousands of hosts builds and frees tables of megabytes again and again, and every
  // page handed back is faulted in afresh (page faults were a sixth of `meshcast plan --batch`'s
  // CPU on the 2-core development machine). The command is short-lived, so memory is given back
  // when it ends.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
#endif
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
