// The fields the completions and chat APIs share (api_fields.h).
#include "dptrain/infer/api_fields.h"

#include "dptrain/core/error.h"

#include <algorithm>

namespace dptrain::api {

[[noreturn]] void refuse(const std::string& param, const std::string& message, int status) {
    throw ApiError{status, param, message};
}

// A number field within [lo, hi] (absent or null: def).
double number_field(const Json& j, const char* key, double def, double lo, double hi, const char* range) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return def;
    if (!it->is_number() || !(it->get<double>() >= lo && it->get<double>() <= hi))
        refuse(key, strfmt("%s must be a number %s", key, range));
    return it->get<double>();
}

long integer_field(const Json& j, const char* key, long def, long lo, long hi, const std::string& range) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return def;
    if (!it->is_number_integer()) refuse(key, strfmt("%s must be an integer %s", key, range.c_str()));
    if (it->is_number_unsigned() && it->get<uint64_t>() > (uint64_t)hi)
        refuse(key, strfmt("%s must be an integer %s", key, range.c_str()));
    const long v = it->get<long>();
    if (v < lo || v > hi) refuse(key, strfmt("%s must be an integer %s", key, range.c_str()));
    return v;
}

namespace {

// Edits (insertions, deletions, substitutions) from a to b, for "did you mean".
size_t edits(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

} // namespace

// A field the API does not have: 400 naming it (an answer that ignored "max_token" would look right).
void unknown_fields(const Json& j, const std::vector<const char*>& known_list, const char* api) {
    for (const auto& item : j.items()) {
        const std::string& key = item.key();
        const auto known = [&](const char* f) { return key == f; };
        if (std::any_of(known_list.begin(), known_list.end(), known)) continue;
        std::string like;
        for (const char* f : known_list)
            if (like.empty() && key.size() < 64 && edits(key, f) <= 2) like = f;
        refuse(key.substr(0, 64),
               strfmt("unknown field \"%.64s\"%s; this server takes the %s API's fields (docs/SERVING.md)",
                      key.c_str(), like.empty() ? "" : strfmt(" (did you mean %s?)", like.c_str()).c_str(), api));
    }
}

namespace {

std::vector<std::string> stop_strings(const Json& j) {
    auto it = j.find("stop");
    std::vector<std::string> out;
    if (it == j.end() || it->is_null()) return out;
    if (it->is_string()) {
        out.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= 4) {
        for (const Json& s : *it) {
            if (!s.is_string()) refuse("stop", "stop must be a string or an array of up to 4 strings");
            out.push_back(s.get<std::string>());
        }
    } else {
        refuse("stop", "stop must be a string or an array of up to 4 strings");
    }
    for (const std::string& s : out)
        if (s.empty() || s.size() > 256) refuse("stop", "each stop string must have 1 to 256 bytes");
    return out;
}

// Options of the API that dptrain does not compute: refused when asked for, not ignored.
void unsupported(const Json& j) {
    auto set = [&](const char* key) {
        auto it = j.find(key);
        return it != j.end() && !it->is_null();
    };
    if (set("n") && !(j["n"].is_number_integer() && j["n"].get<long>() == 1))
        refuse("n", "n must be 1: one answer per request");
    if (set("best_of") && !(j["best_of"].is_number_integer() && j["best_of"].get<long>() == 1))
        refuse("best_of", "best_of must be 1");
    if (set("suffix")) refuse("suffix", "suffix is not supported");
    for (const char* k : {"presence_penalty", "frequency_penalty"})
        if (set(k) && !(j[k].is_number() && j[k].get<double>() == 0.0)) refuse(k, std::string(k) + " is not supported");
    if (set("logit_bias") && !(j["logit_bias"].is_object() && j["logit_bias"].empty()))
        refuse("logit_bias", "logit_bias is not supported");
}

} // namespace

Json request_object(const std::string& body, const ApiLimits& limits) {
    Json j;
    try {
        j = parse_json(body);
    } catch (const JsonError& e) {
        refuse(e.member, std::string("the body is not valid JSON (") + e.what() + ")");
    }
    if (!j.is_object()) refuse("", "the body must be a JSON object");
    // Named by its first bytes or its type: dumping a value recurses, and nested arrays would
    // overflow the stack.
    auto model = j.find("model");
    if (model != j.end() && !model->is_null() && !model->is_string())
        refuse("model", strfmt("model must be a string (not %s); GET /v1/models lists \"%s\"", model->type_name(),
                               limits.model.c_str()));
    if (model != j.end() && model->is_string() && model->get<std::string>() != limits.model)
        refuse("model", strfmt("model \"%.64s\" is not served here; GET /v1/models lists \"%s\"",
                               model->get<std::string>().c_str(), limits.model.c_str()),
               404);
    return j;
}

void sampling_fields(const Json& j, Completion& c, const char* max_key, int min_tokens, const ApiLimits& limits,
                     uint64_t default_seed, bool* stream) {
    c.max_tokens = (int)integer_field(j, max_key, 16, min_tokens, limits.max_tokens,
                                      strfmt("in %d..%d", min_tokens, limits.max_tokens));
    c.temperature = number_field(j, "temperature", 1.0, 0.0, 2.0, "in [0, 2]");
    c.top_p = number_field(j, "top_p", 1.0, 1e-9, 1.0, "in (0, 1]");
    c.top_k = (int)integer_field(j, "top_k", 0, 0, 1L << 30, ">= 0");
    auto seed = j.find("seed");
    c.seed = default_seed;
    if (seed != j.end() && !seed->is_null()) {
        if (!seed->is_number_integer()) refuse("seed", "seed must be an integer");
        c.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : (uint64_t)seed->get<int64_t>();
    }
    c.stop = stop_strings(j);
    unsupported(j);
    auto s = j.find("stream");
    if (s != j.end() && !s->is_null() && !s->is_boolean()) refuse("stream", "stream must be true or false");
    *stream = s != j.end() && s->is_boolean() && s->get<bool>();
}

} // namespace dptrain::api
