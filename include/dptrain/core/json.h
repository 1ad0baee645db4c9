// JSON values, through nlohmann-json: ordered objects (members keep the order they were added or
// read in), the one way dptrain writes them, and the one way it reads users' JSON (strict: RFC 8259,
// no comments, no trailing commas, valid UTF-8; nesting bounded; errors that say where).
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <utility>

namespace dptrain {

using Json = nlohmann::ordered_json;

// One line of compact JSON. Text that is not valid UTF-8 (a host name, a path) is written with
// U+FFFD in place of the bad bytes rather than failing.
std::string json_text(const Json& v);

// A finite number as a JSON value with `digits` significant digits (whole numbers as integers:
// -1, not -1.0); a non-finite one as null.
Json json_number(double v, int digits = 6);

// A parse failure. what() says where ("column 17: ..." or "line 3 column 17: ..." for text of
// several lines) and what was wrong. member: for nesting past the limit, the top-level object's
// member it happened in ("" otherwise), so a request's error can name its field.
class JsonError : public std::runtime_error {
  public:
    explicit JsonError(const std::string& msg, std::string member_ = "")
        : std::runtime_error(msg), member(std::move(member_)) {}
    std::string member;
};

// Nesting deeper than this is refused as it is read (a hostile file cannot make a deep tree).
constexpr int kJsonMaxDepth = 256;

// Parses one JSON value that must make up the whole text (whitespace around it is allowed).
Json parse_json(const std::string& text);

} // namespace dptrain
