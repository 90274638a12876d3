// One error format for the command line: CLI11's parse errors rephrased as
// "<what was wrong>: <what was expected>", with a did-you-mean for misspelled options and verbs.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace meshcast::cli {

// The message (without the "meshcast: error: " prefix) for a parse error of `app`.
std::string describe_parse_error(CLI::App& app, const CLI::ParseError& error);

// A check for a numeric option: the value must lie in [min, max]; the error names the option,
// the value and the range ("bad --limit -1: expected an integer >= 0").
CLI::Validator in_range(double min, double max = 1e300);
// A check for a numeric option that must be > 0 ("bad --nic-gbps 0: expected a number > 0"), and
// at most `max` when given ("bad --size-factor 2: expected a number > 0 and <= 1").
CLI::Validator positive(double max = 1e300);

}  // namespace meshcast::cli
