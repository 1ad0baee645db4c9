// JSON reading for the tools: members by name, and a reader for JSON-lines logs such as the run's
// metrics.jsonl, over core's strict parse_json (core/json.h).
// Not for: writing (the writers build nlohmann values and dump them).
#pragma once

#include "dptrain/core/json.h"

#include <string>
#include <vector>

namespace dptrain {

// The object member called key, or nullptr (also when v is not an object).
const Json* json_member(const Json& v, const char* key);
// The member's number, or fallback when it is absent or not a number.
double json_number_or(const Json& v, const char* key, double fallback);
// The member's string, or "" when it is absent or not a string.
std::string json_string_or_empty(const Json& v, const char* key);

// One record of a JSON-lines file and the line it came from (1-based).
struct JsonRecord {
    int line = 0;
    Json value;
};

// Reads a JSON-lines file in which every non-blank line is one object. Throws UserError
// "PATH: cannot open it" or "PATH:LINE: <what is wrong>" for the first malformed line, so the
// caller can print it as it stands.
// A last line without its newline that does not parse (a writer stopped in the middle of it: a
// killed run's metrics) is left out, with a warning on stderr naming it.
std::vector<JsonRecord> read_jsonl_records(const std::string& path);

} // namespace dptrain
