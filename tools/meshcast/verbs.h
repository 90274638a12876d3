// The meshcast verbs: each adds its subcommand to the app; its callback does the work.
#pragma once

#include <CLI/CLI.hpp>

namespace meshcast::cli {

void add_tasks_verb(CLI::App& app);

}  // namespace meshcast::cli
