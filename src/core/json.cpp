// json_text, json_number (rounded as the metrics always were), and parse_json with a depth limit.
// Not for: any document's schema.
#include "dptrain/core/json.h"

#include "dptrain/core/error.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace dptrain {

std::string json_text(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json json_number(double v, int digits) {
    if (!std::isfinite(v)) return nullptr;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    const double r = std::strtod(buf, nullptr);
    if (r == std::floor(r) && std::fabs(r) < 1e15) return (long long)r;
    return r;
}

namespace {

// So the message stays one printable line.
std::string printable(std::string s) {
    for (char& c : s)
        if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
    return s;
}

// "[json.exception.parse_error.101] parse error at line 3, column 7: syntax error while parsing
// array - ..." -> "line 3 column 7: array - ..." (no line for one-line text).
std::string where_and_what(const nlohmann::json::parse_error& e, bool one_line) {
    std::string m = e.what();
    long line = 1, column = (long)e.byte;
    const size_t at = m.find("parse error at line ");
    if (at != std::string::npos) std::sscanf(m.c_str() + at, "parse error at line %ld, column %ld", &line, &column);
    size_t colon = m.find(": ", at == std::string::npos ? 0 : at);
    std::string what = colon == std::string::npos ? m : m.substr(colon + 2);
    const std::string noise = "syntax error while parsing ";
    if (what.compare(0, noise.size(), noise) == 0) what = what.substr(noise.size());
    what = printable(what);
    return one_line ? strfmt("column %ld: %s", column, what.c_str())
                    : strfmt("line %ld column %ld: %s", line, column, what.c_str());
}

} // namespace

Json parse_json(const std::string& text) {
    // Refused as each value opens, before the tree grows (300,000 '[' made 30 MB of values);
    // the top-level member is kept to name it.
    std::string member;
    auto depth_limit = [&member](int depth, Json::parse_event_t event, Json& parsed) {
        if (event == Json::parse_event_t::key && depth == 1) member = parsed.get<std::string>();
        if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
            depth >= kJsonMaxDepth)
            throw JsonError(strfmt("arrays and objects nested deeper than %d%s%.64s%s", kJsonMaxDepth,
                                   member.empty() ? "" : " (in \"", printable(member).c_str(),
                                   member.empty() ? "" : "\")"),
                            member);
        return true;
    };
    try {
        return Json::parse(text, depth_limit, /*allow_exceptions=*/true, /*ignore_comments=*/false);
    } catch (const nlohmann::json::parse_error& e) {
        throw JsonError(where_and_what(e, text.find('\n') == std::string::npos));
    } catch (const nlohmann::json::exception& e) {
        // Too large for a double (fuzz_jsonl found 1e3750).
        std::string what = e.what();
        const size_t close = what.find("] ");
        if (close != std::string::npos) what = what.substr(close + 2);
        throw JsonError(printable(what));
    }
}

} // namespace dptrain
