#include "cli_errors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <regex>
#include <vector>

#include "meshcast/plan/json_input.h"

namespace meshcast::cli {
namespace {

// The verb the user named, or the top-level app when none was parsed.
CLI::App& verb_of(CLI::App& app) {
  const auto verbs = app.get_subcommands();
  return verbs.empty() ? app : *verbs.front();
}

std::string verb_name(CLI::App& app) {
  CLI::App& verb = verb_of(app);
  return &verb == &app ? "meshcast" : fmt::format("meshcast {}", verb.get_name());
}

std::vector<std::string> long_option_names(CLI::App& verb) {
  std::vector<std::string> names;
  for (const CLI::Option* option : verb.get_options())
    for (const auto& name : option->get_lnames()) names.push_back("--" + name);
  return names;
}

std::vector<std::string> verb_names(CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* verb : app.get_subcommands({})) names.push_back(verb->get_name());
  return names;
}

// "unknown option '--src_mesh': expected an option of `meshcast plan --help` (did you mean
// '--src-mesh'?)" for the first unexpected argument.
std::string describe_extras(CLI::App& app) {
  CLI::App& verb = verb_of(app);
  const auto extras = app.remaining(true);
  const std::string help = fmt::format("`{} --help`", verb_name(app));
  for (const auto& word : extras) {
    if (word.rfind("-", 0) != 0) continue;
    const std::string name = word.substr(0, word.find('='));
    const std::string guess = closest_name(name, long_option_names(verb));
    return fmt::format("unknown option '{}': expected an option of {}{}", name, help,
                       guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess));
  }
  if (&verb == &app && !extras.empty()) {
    const std::string guess = closest_name(extras.front(), verb_names(app));
    return fmt::format("unknown verb '{}': expected one of {}{}", extras.front(),
                       fmt::join(verb_names(app), ", "),
                       guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess));
  }
  return fmt::format(
      "unexpected argument{} '{}': expected options of {} (values follow their "
      "option, e.g. --src-mesh 2x4)",
      extras.size() > 1 ? "s" : "", fmt::join(extras, " "), help);
}

// Values in [min, max], or in (min, max] when `above_min`.
CLI::Validator range_check(double min, double max, bool above_min) {
  const std::string bounded = max >= 1e300 ? "" : fmt::format(" and <= {}", max);
  const std::string expected = above_min      ? fmt::format("> {}{}", min, bounded)
                               : max >= 1e300 ? fmt::format(">= {}", min)
                                              : fmt::format("in {}..{}", min, max);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double value = 0;
        try {
          size_t used = 0;
          value = std::stod(text, &used);
          if (used != text.size()) throw std::invalid_argument(text);
        } catch (const std::exception&) {
          return fmt::format("bad '{}': expected a number {}", text, expected);
        }
        if ((above_min ? value > min : value >= min) && value <= max) return "";
        return fmt::format("bad {}: expected a number {}", text, expected);
      },
      fmt::format("NUMBER {}", expected));
}

}  // namespace

std::string describe_parse_error(CLI::App& app, const CLI::ParseError& error) {
  const std::string what = error.what();
  std::smatch m;
  if (dynamic_cast<const CLI::ExtrasError*>(&error)) return describe_extras(app);
  if (std::regex_match(what, m, std::regex("Could not convert: (\\S+) = (.*)")))
    return fmt::format("bad {} '{}': expected a number", m[1].str(), m[2].str());
  if (std::regex_match(what, m, std::regex("(\\S+): bad (.*)")))
    return fmt::format("bad {} {}", m[1].str(), m[2].str());
  if (std::regex_match(what, m, std::regex("(\\S+) excludes (\\S+)")))
    return fmt::format(
        "{} conflicts with {}: expected one of them, not both (the other would "
        "be ignored)",
        m[1].str(), m[2].str());
  if (std::regex_match(what, m, std::regex("(\\S+) requires (\\S+)")))
    return fmt::format("{} without {}: expected {} too", m[1].str(), m[2].str(), m[2].str());
  if (std::regex_match(what, m, std::regex("(\\S+) is required")))
    return fmt::format("missing {}: expected it (see `{} --help`)", m[1].str(), verb_name(app));
  if (dynamic_cast<const CLI::RequiredError*>(&error) && app.get_subcommands().empty())
    return app.remaining().empty()
               ? fmt::format("missing verb: expected one of {}", fmt::join(verb_names(app), ", "))
               : describe_extras(app);
  if (std::regex_match(what, m, std::regex("(\\S+): (\\S+) not in \\{(.*)\\}")))
    return fmt::format("bad {} '{}': expected one of {}", m[1].str(), m[2].str(), m[3].str());
  if (std::regex_match(what, m, std::regex("(\\S+): 1 required .* missing")))
    return fmt::format("{} has no value: expected a value after it", m[1].str());
  return fmt::format("{}: expected the usage of `{} --help`", what, verb_name(app));
}

CLI::Validator in_range(double min, double max) {
  return range_check(min, max, false);
}

CLI::Validator positive(double max) {
  return range_check(0, max, true);
}

}  // namespace meshcast::cli
