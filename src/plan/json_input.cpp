#include "meshcast/plan/json_input.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "meshcast/error.h"

namespace meshcast {
namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
// neighbouring letters ("plna" is one step from "plan").
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// Depth of `j`, counting no further than `limit` levels.
int depth_up_to(const nlohmann::json& j, int limit) {
  if (!j.is_structured() || limit == 0) return 0;
  int deepest = 0;
  for (const auto& item : j) deepest = std::max(deepest, depth_up_to(item, limit - 1));
  return deepest + 1;
}

// Throws when a value of `text` lies inside more than kMaxJsonDepth arrays and objects (what the
// parser's callback did, value by value: this scan costs a fraction of that, and the parse without
// a callback is faster too). Brackets inside strings do not count; malformed text is left to the
// parser.
void check_depth(std::string_view text) {
  int open = 0;  // arrays and objects around the current character
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == ']' || c == '}') {
      --open;
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == ',' || c == ':') continue;
    // A value (or a key, a string too), or a character of one.
    if (open > kMaxJsonDepth)
      throw ParseError(fmt::format("JSON nested more than {} levels deep", kMaxJsonDepth));
    if (c == '[' || c == '{') ++open;
    in_string = c == '"';
  }
}

}  // namespace

nlohmann::json parse_json(std::string_view text) {
  check_depth(text);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ParseError(e.what());
  }
}

nlohmann::json parse_json(std::istream& in) {
  return parse_json(std::string(std::istreambuf_iterator<char>(in), {}));
}

std::string json_excerpt(const nlohmann::json& j) {
  constexpr int kShownDepth = 4;
  constexpr size_t kShownChars = 80;
  if (depth_up_to(j, kShownDepth + 1) > kShownDepth)
    return j.is_array() ? fmt::format("an array of {} items", j.size())
                        : fmt::format("an object of {} keys", j.size());
  std::string text = j.dump();
  if (text.size() > kShownChars) text = text.substr(0, kShownChars) + "...";
  return text;
}

std::string closest_name(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(word.size() / 3, 1) + 1;
  for (const auto& candidate : candidates) {
    const size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

void check_keys(const nlohmann::json& object, std::string_view where,
                std::initializer_list<std::string_view> required,
                std::initializer_list<std::string_view> optional) {
  std::vector<std::string> accepted(required.begin(), required.end());
  accepted.insert(accepted.end(), optional.begin(), optional.end());
  if (!object.is_object())
    throw ParseError(fmt::format("{}: got {}: expected an object with keys {}", where,
                                 object.type_name(), fmt::join(accepted, ", ")));
  for (const auto& [key, value] : object.items()) {
    if (std::find(accepted.begin(), accepted.end(), key) != accepted.end()) continue;
    const std::string guess = closest_name(key, accepted);
    throw ParseError(fmt::format("{}: unknown key '{}': expected one of {}{}", where, key,
                                 fmt::join(accepted, ", "),
                                 guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess)));
  }
  for (const auto key : required)
    if (!object.contains(key))
      throw ParseError(fmt::format("{}: missing key '{}': expected the keys {}", where, key,
                                   fmt::join(required, ", ")));
}

nlohmann::json read_json_file(const std::string& path, std::string_view what) {
  std::ifstream in(path);
  if (!in)
    throw InvalidArgument(
        fmt::format("cannot read {} file '{}': {}", what, path,
                    std::filesystem::exists(path) ? "not readable" : "no such file"));
  try {
    return parse_json(in);
  } catch (const ParseError& e) {
    throw ParseError(fmt::format("{} file '{}' is not JSON: {}", what, path, e.what()));
  }
}

}  // namespace meshcast
