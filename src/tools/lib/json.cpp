// The tools' JSON helpers: members by name, and the JSON-lines reader over core's strict parse_json.
#include "dptrain/tools/json.h"

#include "dptrain/core/error.h"

#include <fstream>

namespace dptrain {

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
