// JSON values, through nlohmann-json: ordered objects (members keep the order they were added or
// read in), and the one way dptrain writes them. Not for: parsing users' files (tools/json.h has
// the strict reader with its errors).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace dptrain {

using Json = nlohmann::ordered_json;

// One line of compact JSON. Text that is not valid UTF-8 (a host name, a path) is written with
// U+FFFD in place of the bad bytes rather than failing.
std::string json_text(const Json& v);

// A finite number as a JSON value with `digits` significant digits (whole numbers as integers:
// -1, not -1.0); a non-finite one as null.
Json json_number(double v, int digits = 6);

} // namespace dptrain
