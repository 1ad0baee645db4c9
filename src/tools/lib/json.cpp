// parse_json: nlohmann-json's strict parser with a depth limit, its error turned into one line that
// says where; and the JSON-lines reader over it.
#include "dptrain/tools/json.h"

#include "dptrain/core/error.h"

#include <cstdio>
#include <fstream>

namespace dptrain {

namespace {

// "[json.exception.parse_error.101] parse error at line 3, column 7: syntax error while parsing
// array - unexpected ..." -> "line 3 column 7: array - unexpected ..." ("column 7: ..." when the
// text is one line). Bytes of the input that nlohmann quotes are kept printable: one line.
std::string where_and_what(const nlohmann::json::parse_error& e, bool one_line) {
    std::string m = e.what();
    long line = 1, column = (long)e.byte;
    const size_t at = m.find("parse error at line ");
    if (at != std::string::npos) std::sscanf(m.c_str() + at, "parse error at line %ld, column %ld", &line, &column);
    size_t colon = m.find(": ", at == std::string::npos ? 0 : at);
    std::string what = colon == std::string::npos ? m : m.substr(colon + 2);
    const std::string noise = "syntax error while parsing ";
    if (what.compare(0, noise.size(), noise) == 0) what = what.substr(noise.size());
    for (char& c : what)
        if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
    return one_line ? strfmt("column %ld: %s", column, what.c_str())
                    : strfmt("line %ld column %ld: %s", line, column, what.c_str());
}

} // namespace

Json parse_json(const std::string& text) {
    // The callback sees each value as it opens; refusing a deep one stops the parse there.
    auto depth_limit = [](int depth, Json::parse_event_t event, Json&) {
        if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
            depth >= kJsonMaxDepth)
            throw JsonError(strfmt("arrays and objects nested deeper than %d", kJsonMaxDepth));
        return true;
    };
    try {
        return Json::parse(text, depth_limit, /*allow_exceptions=*/true, /*ignore_comments=*/false);
    } catch (const nlohmann::json::parse_error& e) {
        throw JsonError(where_and_what(e, text.find('\n') == std::string::npos));
    } catch (const nlohmann::json::exception& e) {
        // A number too large for a double (found by fuzz_jsonl: "1e999" parses, 1e3750 overflows).
        std::string what = e.what();
        const size_t close = what.find("] ");
        if (close != std::string::npos) what = what.substr(close + 2);
        for (char& c : what)
            if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
        throw JsonError(what);
    }
}

const Json* json_member(const Json& v, const char* key) {
    if (!v.is_object()) return nullptr;
    auto it = v.find(key);
    return it == v.end() ? nullptr : &*it;
}

double json_number_or(const Json& v, const char* key, double fallback) {
    const Json* m = json_member(v, key);
    return m && m->is_number() ? m->get<double>() : fallback;
}

std::string json_string_or_empty(const Json& v, const char* key) {
    const Json* m = json_member(v, key);
    return m && m->is_string() ? m->get<std::string>() : std::string();
}

std::vector<JsonRecord> read_jsonl_records(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw UserError(strfmt("%s: cannot open it", path.c_str()));
    std::vector<JsonRecord> out;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        const bool unterminated = in.eof();  // getline met the end before a newline
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        JsonRecord r;
        r.line = n;
        try {
            r.value = parse_json(line);
        } catch (const JsonError& e) {
            if (unterminated) {
                std::fprintf(stderr, "warning: %s:%d: the last line is cut short (its writer stopped in it); left out\n",
                             path.c_str(), n);
                break;
            }
            throw UserError(strfmt("%s:%d: %s", path.c_str(), n, e.what()));
        }
        if (!r.value.is_object())
            throw UserError(strfmt("%s:%d: expected one JSON object per line, found another kind of value",
                                   path.c_str(), n));
        out.push_back(std::move(r));
    }
    if (in.bad()) throw UserError(strfmt("%s: read failed", path.c_str()));
    return out;
}

} // namespace dptrain
