// The completions API's bodies and rules (serve_api.h). Not for: sockets (serve.cpp).
#include "dptrain/infer/serve_api.h"

#include "dptrain/core/error.h"
#include "dptrain/core/json.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <vector>

namespace dptrain {

namespace {

[[noreturn]] void refuse(const std::string& param, const std::string& message, int status = 400) {
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

std::vector<int> prompt_tokens(const Json& j, const CompletionEngine& engine) {
    auto it = j.find("prompt");
    if (it == j.end() || it->is_null()) refuse("prompt", "prompt is required (a string, or an array of token ids)");
    const int V = engine.config().vocab_size, T = engine.config().block_size;
    std::vector<int> ids;
    const Json* p = &*it;
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];  // ["text"]: one prompt
    if (p->is_string()) {
        if (p->get<std::string>().empty()) refuse("prompt", "prompt must not be empty");
        // No token spans 256 bytes, so a longer text is over the context however it splits:
        // refused before tokenizing it.
        if (p->get<std::string>().size() > (size_t)T * 256)
            refuse("prompt", strfmt("prompt has %zu bytes, more than the model's context of %d tokens can hold",
                                    p->get<std::string>().size(), T));
        try {
            ids = engine.tokenizer().encode(p->get<std::string>());
        } catch (const UserError& e) {
            refuse("prompt", std::string("prompt: ") + e.what());
        }
    } else if (p->is_array()) {
        for (const Json& t : *p) {
            if (!t.is_number_integer() || t.get<long>() < 0 || t.get<long>() >= V)
                refuse("prompt", strfmt("prompt: a token id must be an integer in 0..%d (the vocabulary)", V - 1));
            ids.push_back(t.get<int>());
        }
    } else {
        refuse("prompt", "prompt must be a string, or an array of token ids (one prompt per request)");
    }
    if (ids.empty()) refuse("prompt", "prompt must not be empty");
    if ((int)ids.size() > T)
        refuse("prompt", strfmt("prompt has %zu tokens; the model's context is %d tokens", ids.size(), T));
    return ids;
}

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
    if (set("echo") && j["echo"] != false) refuse("echo", "echo is not supported");
    if (set("logprobs") && j["logprobs"] != 0) refuse("logprobs", "logprobs are not supported");
    if (set("suffix")) refuse("suffix", "suffix is not supported");
    for (const char* k : {"presence_penalty", "frequency_penalty"})
        if (set(k) && !(j[k].is_number() && j[k].get<double>() == 0.0)) refuse(k, std::string(k) + " is not supported");
    if (set("logit_bias") && !(j["logit_bias"].is_object() && j["logit_bias"].empty()))
        refuse("logit_bias", "logit_bias is not supported");
}

// The request fields of OpenAI's completions API that dptrain computes, or refuses with a reason
// (unsupported), or takes and ignores by design (user: an end user's id; stream_options: the last
// streamed chunk carries the usage already), and dptrain's top_k.
const char* const kRequestFields[] = {"model",     "prompt",     "max_tokens", "temperature",      "top_p",
                                      "top_k",     "n",          "best_of",    "stream",           "stream_options",
                                      "logprobs",  "echo",       "stop",       "presence_penalty", "frequency_penalty",
                                      "logit_bias", "user",      "suffix",     "seed"};

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

// A field the API does not have: 400 naming it (an answer that ignored "max_token" would look right).
void unknown_fields(const Json& j) {
    for (const auto& item : j.items()) {
        const std::string& key = item.key();
        const auto known = [&](const char* f) { return key == f; };
        if (std::any_of(std::begin(kRequestFields), std::end(kRequestFields), known)) continue;
        std::string like;
        for (const char* f : kRequestFields)
            if (like.empty() && key.size() < 64 && edits(key, f) <= 2) like = f;
        refuse(key.substr(0, 64),
               strfmt("unknown field \"%.64s\"%s; this server takes the completions API's fields (docs/SERVING.md)",
                      key.c_str(), like.empty() ? "" : strfmt(" (did you mean %s?)", like.c_str()).c_str()));
    }
}

const char* error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

} // namespace

std::shared_ptr<Completion> parse_completion_request(const std::string& body, const CompletionEngine& engine,
                                                     const ApiLimits& limits, bool* stream, uint64_t default_seed) {
    Json j;
    try {
        j = parse_json(body);
    } catch (const JsonError& e) {
        refuse(e.member, std::string("the body is not valid JSON (") + e.what() + ")");
    }
    if (!j.is_object()) refuse("", "the body must be a JSON object");
    unknown_fields(j);
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
    auto c = std::make_shared<Completion>();
    c->prompt = prompt_tokens(j, engine);
    c->max_tokens =
        (int)integer_field(j, "max_tokens", 16, 1, limits.max_tokens, strfmt("in 1..%d", limits.max_tokens));
    c->temperature = number_field(j, "temperature", 1.0, 0.0, 2.0, "in [0, 2]");
    c->top_p = number_field(j, "top_p", 1.0, 1e-9, 1.0, "in (0, 1]");
    c->top_k = (int)integer_field(j, "top_k", 0, 0, 1L << 30, ">= 0");
    auto seed = j.find("seed");
    c->seed = default_seed;
    if (seed != j.end() && !seed->is_null()) {
        if (!seed->is_number_integer()) refuse("seed", "seed must be an integer");
        c->seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : (uint64_t)seed->get<int64_t>();
    }
    c->stop = stop_strings(j);
    unsupported(j);
    auto s = j.find("stream");
    if (s != j.end() && !s->is_null() && !s->is_boolean()) refuse("stream", "stream must be true or false");
    *stream = s != j.end() && s->is_boolean() && s->get<bool>();
    return c;
}

std::string error_body(int status, const std::string& message, const std::string& param) {
    Json e = Json::object();
    e["message"] = message;
    e["type"] = error_type(status);
    e["param"] = param.empty() ? Json(nullptr) : Json(param);
    e["code"] = nullptr;
    return json_text(Json{{"error", e}});
}

std::string completion_body(const std::string& id, long created, const std::string& model, const Completion& c,
                            const std::string& text, bool chunk, bool last) {
    Json choice = Json::object();
    choice["text"] = text;
    choice["index"] = 0;
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = last ? Json(c.finish_reason) : Json(nullptr);
    Json j = Json::object();
    j["id"] = id;
    j["object"] = "text_completion";
    j["created"] = created;
    j["model"] = model;
    j["system_fingerprint"] = strfmt("dptrain-step-%ld", c.model_step);
    j["model_step"] = c.model_step;
    j["choices"] = Json::array({choice});
    if (!chunk || last) {
        const long p = (long)c.prompt.size(), n = c.completion_tokens;
        j["usage"] = {{"prompt_tokens", p}, {"completion_tokens", n}, {"total_tokens", p + n}};
    }
    return json_text(j);
}

std::string models_body(const std::string& model, long created, long step) {
    Json m = {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "dptrain"}, {"model_step", step}};
    return json_text(Json{{"object", "list"}, {"data", Json::array({m})}});
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
    std::lock_guard<std::mutex> lk(mu_);
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++count_;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& help) const {
    std::lock_guard<std::mutex> lk(mu_);
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    long acc = 0;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
        acc += counts_[i];
        const std::string le = i < bounds_.size() ? strfmt("%g", bounds_[i]) : "+Inf";
        out += strfmt("%s_bucket{le=\"%s\"} %ld\n", name.c_str(), le.c_str(), acc);
    }
    out += strfmt("%s_sum %.6f\n%s_count %ld\n", name.c_str(), sum_, name.c_str(), count_);
}

std::string metrics_text(const EngineStats& s, ServeCounters& counters, const Histogram& latency,
                         const Histogram& first_token) {
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
        out += strfmt("# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
    };
    std::lock_guard<std::mutex> lk(counters.mu);
    out += "# HELP dptrain_serve_requests_total Completion requests answered, by HTTP status.\n"
           "# TYPE dptrain_serve_requests_total counter\n";
    for (const auto& [code, n] : counters.by_status)
        out += strfmt("dptrain_serve_requests_total{code=\"%d\"} %ld\n", code, n);
    metric("dptrain_serve_prompt_tokens_total", "counter", "Prompt tokens of the requests accepted.",
           (double)s.prompt_tokens);
    metric("dptrain_serve_generated_tokens_total", "counter", "Tokens generated.", (double)s.generated_tokens);
    metric("dptrain_serve_generated_tokens_per_second", "gauge",
           "Tokens generated per second over the last 10 s (rate() of the _total counter over any window).",
           s.tokens_per_second);
    metric("dptrain_serve_queue_depth", "gauge", "Requests waiting for a slot.", (double)s.queued);
    metric("dptrain_serve_active_sequences", "gauge", "Requests being decoded.", (double)s.active);
    metric("dptrain_serve_cancelled_total", "counter", "Requests whose client went away before the end.",
           (double)s.cancelled);
    metric("dptrain_serve_decode_steps_total", "counter", "Model calls of the decoding loop.", (double)s.steps);
    metric("dptrain_serve_decode_rows_total", "counter",
           "Positions those calls computed (rows / steps is the mean batch).", (double)s.rows);
    metric("dptrain_serve_model_step", "gauge", "Training step of the model being served.", (double)s.model_step);
    metric("dptrain_serve_model_swaps_total", "counter", "Newer checkpoints swapped in.", (double)s.swaps);
    metric("dptrain_serve_compute_threads", "gauge", "Compute threads of the decoding thread (--threads).",
           (double)s.threads);
    metric("dptrain_serve_checkpoints_skipped_total", "counter",
           "Newer checkpoints that failed verification or did not match, and were not served.",
           (double)counters.checkpoints_skipped);
    latency.write(out, "dptrain_serve_request_duration_seconds",
                  "Time from a completion request's submission (its body read and checked) to its last token.");
    first_token.write(out, "dptrain_serve_time_to_first_token_seconds",
                      "Time from a completion request's submission (its body read and checked) to its first token.");
    return out;
}

} // namespace dptrain
