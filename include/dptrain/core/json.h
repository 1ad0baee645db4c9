// JSON through nlohmann-json: ordered objects, the one way dptrain writes JSON and the one strict
// (RFC 8259, bounded nesting) way it reads users'. Not for: what any document holds.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <utility>

namespace dptrain {

using Json = nlohmann::ordered_json;

// One compact line; invalid UTF-8 (a host name, a path) becomes U+FFFD rather than failing.
std::string json_text(const Json& v);

// Whole numbers as integers (-1, not -1.0); non-finite: null.
Json json_number(double v, int digits = 6);

// what() says where. member: for nesting past the limit, the top-level member, so a request's
// error can name its field.
class JsonError : public std::runtime_error {
  public:
    explicit JsonError(const std::string& msg, std::string member_ = "")
        : std::runtime_error(msg), member(std::move(member_)) {}
    std::string member;
};

// Refused while reading, so hostile input cannot build a deep tree.
constexpr int kJsonMaxDepth = 256;

// One value making up the whole text.
Json parse_json(const std::string& text);

} // namespace dptrain
