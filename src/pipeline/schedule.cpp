#include "meshcast/pipeline/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>

#include "meshcast/checked.h"
#include "meshcast/error.h"
#include "meshcast/plan/json_input.h"

namespace meshcast::pipeline {
namespace {

constexpr std::pair<ScheduleKind, std::string_view> kKindNames[] = {
    {ScheduleKind::gpipe, "gpipe"},           {ScheduleKind::one_f_one_b, "1f1b"},
    {ScheduleKind::eager_1f1b, "eager-1f1b"}, {ScheduleKind::interleaved_1f1b, "interleaved-1f1b"},
    {ScheduleKind::custom, "custom"},
};

// `warmup` forwards, then one backward and one forward in turn until the forwards run out, then
// the remaining backwards: the shape of 1F1B and eager-1F1B on one stage.
std::vector<Step> warmup_then_alternate(int microbatches, int warmup) {
  std::vector<Step> steps;
  steps.reserve(2 * static_cast<size_t>(microbatches));
  int next_forward = 0;
  for (; next_forward < warmup; ++next_forward) steps.push_back({Pass::forward, next_forward});
  for (int b = 0; b < microbatches; ++b) {
    steps.push_back({Pass::backward, b});
    if (next_forward < microbatches) steps.push_back({Pass::forward, next_forward++});
  }
  return steps;
}

// Megatron-LM's interleaved 1F1B on stage `d`: forwards walk the chunks in groups of `n`
// microbatches, backwards walk them in reverse chunk order; the warm-up fills the time the first
// backward needs to come back through the later stages and chunks.
std::vector<Step> interleaved_order(int n, int m, int v, int d) {
  const int total = m * v;
  const int warmup = std::min((n - d - 1) * 2 + (v - 1) * n, total);
  auto step = [&](Pass pass, int k) {
    const int group = (k / n) % v;
    const int chunk = pass == Pass::forward ? group : v - 1 - group;
    return Step{pass, (k / (n * v)) * n + k % n, chunk};
  };
  std::vector<Step> steps;
  steps.reserve(2 * static_cast<size_t>(total));
  for (int k = 0; k < warmup; ++k) steps.push_back(step(Pass::forward, k));
  for (int k = 0; k < total - warmup; ++k) {
    steps.push_back(step(Pass::forward, warmup + k));
    steps.push_back(step(Pass::backward, k));
  }
  for (int k = total - warmup; k < total; ++k) steps.push_back(step(Pass::backward, k));
  return steps;
}

int parse_index(std::string_view text, std::string_view whole) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value < 0 ||
      value == std::numeric_limits<int>::max())
    throw ParseError(
        fmt::format("bad step '{}': expected [chunk]F|B<microbatch>, e.g. F3 or 1B2", whole));
  return value;
}

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (std::isspace(static_cast<unsigned char>(line[i])) || line[i] == ','))
      ++i;
    const size_t start = i;
    while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i])) && line[i] != ',')
      ++i;
    if (i > start) words.push_back(line.substr(start, i - start));
  }
  return words;
}

// Fills stages, microbatches and chunks from the largest indices of `order`.
Schedule custom_schedule(std::vector<std::vector<Step>> order) {
  Schedule s{.kind = ScheduleKind::custom, .stages = static_cast<int>(order.size())};
  for (const auto& row : order)
    for (const auto& step : row) {
      // parse_index keeps indices below INT_MAX, so the sizes fit an int.
      s.microbatches = std::max(s.microbatches, step.microbatch + 1);
      s.chunks = std::max(s.chunks, step.chunk + 1);
    }
  s.order = std::move(order);
  return s;
}

}  // namespace

std::string_view to_string(ScheduleKind kind) {
  for (const auto& [k, name] : kKindNames)
    if (k == kind) return name;
  return "?";
}

ScheduleKind parse_schedule_kind(std::string_view text) {
  for (const auto& [k, name] : kKindNames)
    if (name == text && k != ScheduleKind::custom) return k;
  throw InvalidArgument(fmt::format(
      "bad schedule kind '{}': expected gpipe, 1f1b, eager-1f1b or interleaved-1f1b", text));
}

std::vector<ScheduleKind> generated_kinds() {
  return {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::eager_1f1b,
          ScheduleKind::interleaved_1f1b};
}

void check_schedule_size(int stages, int microbatches, int chunks) {
  if (stages < 1) throw InvalidArgument(fmt::format("bad stage count {}: expected >= 1", stages));
  if (microbatches < 1)
    throw InvalidArgument(fmt::format("bad microbatch count {}: expected >= 1", microbatches));
  if (chunks < 1) throw InvalidArgument(fmt::format("bad chunk count {}: expected >= 1", chunks));
  // Three ints may overflow int64 together: the product is checked.
  const auto cells = checked_product(std::array<int64_t, 3>{stages, microbatches, chunks});
  if (!cells || *cells > kMaxScheduleCells)
    throw InvalidArgument(
        fmt::format("schedule too large: {} stages x {} microbatches x {} chunks "
                    "= {} microbatch-chunks, expected at most {}",
                    stages, microbatches, chunks,
                    cells ? fmt::format("{}", *cells) : "more than 2^63", kMaxScheduleCells));
}

Schedule make_schedule(ScheduleKind kind, int stages, int microbatches, int chunks) {
  check_schedule_size(stages, microbatches, chunks);
  if (kind != ScheduleKind::interleaved_1f1b && chunks != 1)
    throw InvalidArgument(
        fmt::format("{} has one chunk per stage, got {} chunks (only "
                    "interleaved-1f1b interleaves)",
                    to_string(kind), chunks));
  if (kind == ScheduleKind::interleaved_1f1b && chunks > 1 && microbatches % stages != 0)
    throw InvalidArgument(
        fmt::format("interleaved-1f1b needs the microbatches ({}) to be a "
                    "multiple of the stages ({})",
                    microbatches, stages));
  if (kind == ScheduleKind::custom)
    throw InvalidArgument("a custom schedule is parsed from text or JSON, not generated");

  Schedule s{.kind = kind, .stages = stages, .microbatches = microbatches, .chunks = chunks};
  s.order.resize(stages);
  for (int i = 0; i < stages; ++i) {
    switch (kind) {
      case ScheduleKind::gpipe:
        s.order[i] = warmup_then_alternate(microbatches, microbatches);
        break;
      case ScheduleKind::one_f_one_b:
        s.order[i] = warmup_then_alternate(microbatches, std::min(stages - i, microbatches));
        break;
      case ScheduleKind::eager_1f1b:
        s.order[i] =
            warmup_then_alternate(microbatches, std::min(2 * (stages - i) - 1, microbatches));
        break;
      case ScheduleKind::interleaved_1f1b:
        s.order[i] = interleaved_order(stages, microbatches, chunks, i);
        break;
      case ScheduleKind::custom:
        break;
    }
  }
  return s;
}

std::string to_string(const Step& step, bool with_chunk) {
  const char pass = step.pass == Pass::forward ? 'F' : 'B';
  return with_chunk ? fmt::format("{}{}{}", step.chunk, pass, step.microbatch)
                    : fmt::format("{}{}", pass, step.microbatch);
}

Step parse_step(std::string_view text) {
  const auto at = text.find_first_of("FfBb");
  if (at == std::string_view::npos)
    throw ParseError(
        fmt::format("bad step '{}': expected [chunk]F|B<microbatch>, e.g. F3 or 1B2", text));
  Step step;
  step.pass = (text[at] == 'F' || text[at] == 'f') ? Pass::forward : Pass::backward;
  step.chunk = at == 0 ? 0 : parse_index(text.substr(0, at), text);
  step.microbatch = parse_index(text.substr(at + 1), text);
  return step;
}

namespace {

// parse_step for the `index`-th step of stage `stage`, whose errors say where the step stands.
Step parse_step_of_stage(std::string_view text, size_t stage, size_t index) {
  try {
    return parse_step(text);
  } catch (const ParseError& e) {
    throw ParseError(fmt::format("stage {} step {}: {}", stage, index, e.what()));
  }
}

}  // namespace

std::string schedule_to_text(const Schedule& schedule) {
  std::string out;
  for (int i = 0; i < schedule.stages; ++i) {
    out += fmt::format("stage {}:", i);
    for (const auto& step : schedule.order[i]) {
      out += ' ';
      out += to_string(step, schedule.chunks > 1);
    }
    out += '\n';
  }
  return out;
}

Schedule schedule_from_text(std::string_view text) {
  std::vector<std::vector<Step>> order;
  size_t pos = 0;
  while (pos <= text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (const auto colon = line.find(':'); colon != std::string_view::npos) {
      const auto words = split_words(line.substr(0, colon));
      const auto expected = fmt::format("{}", order.size());
      if (words.size() != 2 || words[0] != "stage" || words[1] != expected)
        throw ParseError(
            fmt::format("bad schedule row '{}': expected 'stage {}: F0 ...'", line, order.size()));
      line = line.substr(colon + 1);
    } else if (split_words(line).empty()) {
      continue;
    }
    std::vector<Step> row;
    for (auto word : split_words(line))
      row.push_back(parse_step_of_stage(word, order.size(), row.size()));
    order.push_back(std::move(row));
  }
  if (order.empty()) throw ParseError("empty schedule: expected one row of steps per stage");
  return custom_schedule(std::move(order));
}

std::string schedule_to_csv(const Schedule& schedule) {
  size_t longest = 0;
  for (const auto& row : schedule.order) longest = std::max(longest, row.size());
  std::string out = "stage";
  for (size_t k = 0; k < longest; ++k) out += fmt::format(",step{}", k);
  out += '\n';
  for (int i = 0; i < schedule.stages; ++i) {
    out += fmt::format("{}", i);
    for (const auto& step : schedule.order[i]) {
      out += ',';
      out += to_string(step, schedule.chunks > 1);
    }
    out += '\n';
  }
  return out;
}

nlohmann::json schedule_to_json(const Schedule& schedule) {
  nlohmann::json order = nlohmann::json::array();
  for (const auto& row : schedule.order) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& step : row) steps.push_back(to_string(step, schedule.chunks > 1));
    order.push_back(std::move(steps));
  }
  return {{"kind", to_string(schedule.kind)},
          {"stages", schedule.stages},
          {"microbatches", schedule.microbatches},
          {"chunks", schedule.chunks},
          {"order", std::move(order)}};
}

Schedule schedule_from_json(const nlohmann::json& j) {
  check_keys(j, "schedule", {"order"}, {"kind", "stages", "microbatches", "chunks"});
  if (!j["order"].is_array())
    throw ParseError("bad schedule document: expected an object with \"order\": [[\"F0\", ...]]");
  std::vector<std::vector<Step>> order;
  for (const auto& row : j["order"]) {
    if (!row.is_array())
      throw ParseError(
          fmt::format("bad schedule row {}: expected an array of steps", json_excerpt(row)));
    std::vector<Step> steps;
    for (const auto& word : row) {
      if (!word.is_string())
        throw ParseError(fmt::format("stage {} step {}: bad step {}: expected a string like \"F3\"",
                                     order.size(), steps.size(), json_excerpt(word)));
      steps.push_back(parse_step_of_stage(word.get<std::string>(), order.size(), steps.size()));
    }
    order.push_back(std::move(steps));
  }
  Schedule s = custom_schedule(std::move(order));
  // Declared sizes win over inferred ones, so that a missing step is reported as missing; a
  // declared size below what the steps use is refused (the text form, which infers the sizes,
  // would read back another schedule).
  for (auto [key, field] : {std::pair{"microbatches", &s.microbatches}, {"chunks", &s.chunks}}) {
    if (!j.contains(key)) continue;
    const auto& value = j[key];
    if (!value.is_number_integer() || value.get<int64_t>() < 1 ||
        value.get<int64_t>() > std::numeric_limits<int>::max())
      throw ParseError(fmt::format("bad \"{}\": {}: expected an integer in 1..{}", key,
                                   json_excerpt(value), std::numeric_limits<int>::max()));
    const int declared = static_cast<int>(value.get<int64_t>());
    if (declared < *field)
      throw InvalidArgument(fmt::format(
          "schedule \"{}\" is {}, but its steps use {}: expected at least what the steps use", key,
          declared, *field));
    *field = declared;
  }
  // Checked before anything (a validation, a lowering) is sized by them.
  check_schedule_size(s.stages, s.microbatches, s.chunks);
  if (j.contains("kind") && j["kind"].is_string() && j["kind"] != "custom")
    s.kind = parse_schedule_kind(j["kind"].get<std::string>());
  return s;
}

std::vector<double> peak_activation_bytes(const Schedule& schedule,
                                          const std::vector<double>& activation_bytes) {
  if (static_cast<int>(activation_bytes.size()) != schedule.virtual_stages())
    throw InvalidArgument(fmt::format(
        "{} activation sizes for a schedule of {} virtual stages: expected one per virtual stage",
        activation_bytes.size(), schedule.virtual_stages()));
  std::vector<double> peaks;
  for (int d = 0; d < schedule.stages; ++d) {
    double held = 0;
    double peak = 0;
    for (const auto& step : schedule.order[d]) {
      const double bytes = activation_bytes[schedule.virtual_stage(d, step.chunk)];
      held += step.pass == Pass::forward ? bytes : -bytes;
      peak = std::max(peak, held);
    }
    peaks.push_back(peak);
  }
  return peaks;
}

std::vector<int> peak_in_flight(const Schedule& schedule) {
  std::vector<int> peaks;
  for (double held :
       peak_activation_bytes(schedule, std::vector<double>(schedule.virtual_stages(), 1)))
    peaks.push_back(static_cast<int>(held));
  return peaks;
}

}  // namespace meshcast::pipeline
