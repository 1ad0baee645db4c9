// JSON reading for the tools, through nlohmann-json: strict parsing (RFC 8259; no comments, no
// trailing commas, valid UTF-8) into ordered values (members stay in file order), errors that say
// where, and a reader for JSON-lines logs such as the run's metrics.jsonl.
// Not for: writing (the writers build nlohmann values and dump them).
#pragma once

#include "dptrain/core/json.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace dptrain {

// A parse failure. what() says where ("column 17: ..." or "line 3 column 17: ..." for text of
// several lines) and what was wrong.
class JsonError : public std::runtime_error {
  public:
    explicit JsonError(const std::string& msg) : std::runtime_error(msg) {}
};

// Nesting deeper than this is refused as it is read (a hostile file cannot make a deep tree).
constexpr int kJsonMaxDepth = 256;

// Parses one JSON value that must make up the whole text (whitespace around it is allowed).
Json parse_json(const std::string& text);

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
