// JSON reading for the tools: members by name, and JSON-lines logs such as metrics.jsonl.
// Not for: writing (the writers build nlohmann values and dump them).
#pragma once

#include "dptrain/core/json.h"

#include <string>
#include <vector>

namespace dptrain {

// Absent or of another type: nullptr, fallback, "".
const Json* json_member(const Json& v, const char* key);
double json_number_or(const Json& v, const char* key, double fallback);
std::string json_string_or_empty(const Json& v, const char* key);

struct JsonRecord {
    int line = 0;  // 1-based
    Json value;
};

// Throws UserError "PATH:LINE: what" for the first malformed line. An unparsable last line
// without its newline (a killed writer) is left out with a warning.
std::vector<JsonRecord> read_jsonl_records(const std::string& path);

} // namespace dptrain
