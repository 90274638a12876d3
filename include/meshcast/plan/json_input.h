// Strict reading of the JSON documents meshcast accepts: every reader checks its keys here, so
// that a misspelled or missing key is an error naming it instead of a silent default.
#pragma once

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

namespace meshcast {

// The candidate closest to `word` by edit distance, or "" when none is close enough to be a
// likely misspelling (more than a third of the word's letters differ). Serves the did-you-mean
// of unknown JSON keys and of unknown command-line options.
std::string closest_name(std::string_view word, const std::vector<std::string>& candidates);

// Throws ParseError unless `object` is a JSON object whose keys are all in `required` or
// `optional` and which holds every key of `required`. `where` names the object in the message:
//   "<where>: unknown key 'nic_gbs': expected one of hosts, nic_gbps, ... (did you mean
//   'nic_gbps'?)"
//   "<where>: missing key 'order': expected keys order (required), kind, stages, ..."
void check_keys(const nlohmann::json& object, std::string_view where,
                std::initializer_list<std::string_view> required,
                std::initializer_list<std::string_view> optional = {});

// Documents nest at most this deep (a plan nests 6 levels). Deeper input is refused while it is
// parsed: reading, copying or printing it recursively could exhaust the stack.
inline constexpr int kMaxJsonDepth = 32;

// One JSON document of at most kMaxJsonDepth levels. Throws ParseError with the parser's
// message, or naming the depth, on malformed or too deeply nested input. Every reader of user
// JSON (files, Python strings) parses through here.
nlohmann::json parse_json(std::string_view text);
nlohmann::json parse_json(std::istream& in);

// A bounded rendering of a user value for error messages: shallow values as JSON cut at 80
// characters, deeper ones as "an array of N items" / "an object of N keys".
std::string json_excerpt(const nlohmann::json& j);

// The JSON document in the file `path`, described as `what` ("cluster", "plan") in messages:
// InvalidArgument "cannot read <what> file '<path>': no such file" (or "not readable") when it
// cannot be opened, ParseError "<what> file '<path>' is not JSON: ..." when it is malformed or
// nested more than kMaxJsonDepth levels.
nlohmann::json read_json_file(const std::string& path, std::string_view what);

}  // namespace meshcast
