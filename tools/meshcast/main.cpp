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
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

// Where the kernel gives no huge pages ("never"), there is nothing to restart for.
bool huge_pages_possible() {
  std::FILE* mode = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!mode) return false;
  char text[64] = {};
  const bool read = std::fgets(text, sizeof text, mode) != nullptr;
  std::fclose(mode);
  return read && !std::strstr(text, "[never]");
}

// Planning thousands of hosts touches hundreds of megabytes, each page once: on 4 KiB pages the
// kernel maps them one fault at a time, a third of the planning time of 4,096 x 8 hosts on the
// 2-core development machine. glibc backs malloc's memory with transparent huge pages only when
// asked as the program starts (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, an madvise that the kernel
// honours in its default "madvise" mode), so the command starts itself again, once, with that
// set. A GLIBC_TUNABLES of the user's (any value, even empty) is kept and turns this off; so does
// valgrind, whose preloaded library the new image would run without.
void restart_with_huge_pages(char** argv) {
  if (std::getenv("GLIBC_TUNABLES") || !huge_pages_possible()) return;
  if (const char* preload = std::getenv("LD_PRELOAD"); preload && std::strstr(preload, "vgpreload"))
    return;
  if (setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("GLIBC_TUNABLES");  // the restart failed: go on as we are
}

}  // namespace
#endif

int main(int argc, char** argv) {
#ifdef __GLIBC__
  restart_with_huge_pages(argv);
  // Keep freed memory for reuse instead of handing it back to the kernel: planning a model's
  // batch or thousands of hosts builds and frees tables of megabytes again and again, and every
  // page handed back is faulted in afresh (page faults were a sixth of `meshcast plan --batch`'s
  // CPU on the 2-core development machine). Blocks of any size, too: malloc maps the largest
  // (a table of a quarter million ops) afresh for each and unmaps them on free, and the kernel
  // zeroed their huge pages again, up to 0.4 s of system time in some 4096-host plans. The
  // command is short-lived, so memory is given back when it ends.
  mallopt(M_MMAP_MAX, 0);
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
