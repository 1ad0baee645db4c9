// JSON reading: a small strict parser (RFC 8259: objects, arrays, strings, numbers, true, false,
// null) and a reader for JSON-lines logs such as the run's metrics.jsonl. Not for writing JSON
// (the writers format their one-line objects with strfmt) and not for large documents: a value
// is a tree of owned nodes.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

struct JsonValue {
    enum class Kind { null, boolean, number, string, array, object };
    Kind kind = Kind::null;
    bool boolean = false;
    double number = 0;
    std::string string;
    std::vector<JsonValue> items;                              // array elements
    std::vector<std::pair<std::string, JsonValue>> members;   // object members, in file order

    bool is_number() const { return kind == Kind::number; }
    bool is_object() const { return kind == Kind::object; }
    // The object member called key (the first one if it repeats), or nullptr.
    const JsonValue* find(const std::string& key) const;
    // The member's number, or fallback when it is absent or not a number.
    double number_or(const std::string& key, double fallback) const;
    // The member's string, or "" when it is absent or not a string.
    std::string string_or_empty(const std::string& key) const;
};

// A parse failure. what() says where ("column 17: ..." or "line 3 column 17: ..." for text of
// several lines) and what was expected.
class JsonError : public std::runtime_error {
  public:
    explicit JsonError(const std::string& msg) : std::runtime_error(msg) {}
};

// Parses one JSON value that must make up the whole text (whitespace around it is allowed).
JsonValue parse_json(const std::string& text);

// One record of a JSON-lines file and the line it came from (1-based).
struct JsonRecord {
    int line = 0;
    JsonValue value;
};

// Reads a JSON-lines file in which every non-blank line is one object. Throws UserError
// "PATH: cannot open it" or "PATH:LINE: <what is wrong>" for the first malformed line, so the
// caller can print it as it stands.
std::vector<JsonRecord> read_jsonl_records(const std::string& path);

} // namespace dptrain
