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

using api::refuse;

// The request fields of OpenAI's completions API that dptrain computes, or refuses with a reason
// (api::sampling_fields), or takes and ignores by design (user: an end user's id; stream_options:
// the last streamed chunk carries the usage already), and dptrain's top_k.
const std::vector<const char*> kRequestFields = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "n", "best_of", "stream", "stream_options",
    "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty", "logit_bias", "user", "suffix", "seed"};

// One prompt: a string or an array of token ids.
std::vector<int> prompt_ids(const Json& p, const CompletionEngine& engine) {
    const int V = engine.config().vocab_size, T = engine.config().block_size;
    std::vector<int> ids;
    if (p.is_string()) {
        const std::string& text = p.get_ref<const std::string&>();
        if (text.empty()) refuse("prompt", "prompt must not be empty");
        // No token spans 256 bytes, so a longer text is over the context however it splits:
        // refused before tokenizing it.
        if (text.size() > (size_t)T * 256)
            refuse("prompt", strfmt("prompt has %zu bytes, more than the model's context of %d tokens can hold",
                                    text.size(), T));
        try {
            ids = engine.tokenizer().encode_prompt(text);
        } catch (const UserError& e) {
            refuse("prompt", std::string("prompt: ") + e.what());
        }
    } else {
        for (const Json& t : p) {
            if (!t.is_number_integer() || t.get<long>() < 0 || t.get<long>() >= V)
                refuse("prompt", strfmt("prompt: a token id must be an integer in 0..%d (the vocabulary)", V - 1));
            ids.push_back(t.get<int>());
        }
    }
    if (ids.empty()) refuse("prompt", "prompt must not be empty");
    if ((int)ids.size() > T)
        refuse("prompt", strfmt("prompt has %zu tokens; the model's context is %d tokens", ids.size(), T));
    return ids;
}

// The API's four forms: a string, an array of token ids (one prompt), an array of strings or of
// id arrays (a prompt each, answered as as many choices).
std::vector<std::vector<int>> prompts(const Json& j, const CompletionEngine& engine) {
    auto it = j.find("prompt");
    if (it == j.end() || it->is_null())
        refuse("prompt", "prompt is required (a string, an array of token ids, or an array of either)");
    const Json& p = *it;
    const auto many = [](const Json& e) { return e.is_string() || e.is_array(); };
    std::vector<std::vector<int>> out;
    if (p.is_string() || (p.is_array() && !p.empty() && !many(p[0]))) {
        out.push_back(prompt_ids(p, engine));
    } else if (p.is_array() && !p.empty()) {
        if (p.size() > (size_t)kMaxPrompts)
            refuse("prompt", strfmt("prompt: %zu prompts; at most %d a request", p.size(), kMaxPrompts));
        for (const Json& e : p) {
            if (!many(e) || (e.is_array() && !e.empty() && many(e[0])))
                refuse("prompt", "prompt: an array of prompts holds strings or arrays of token ids");
            out.push_back(prompt_ids(e, engine));
        }
    } else {
        refuse("prompt", "prompt must be a string, an array of token ids, or an array of either (not empty)");
    }
    return out;
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

// echo, logprobs and max_tokens 0 (the prompt scored alone), as evaluation harnesses ask.
void scoring_fields(const Json& j, Completion& c, bool stream, size_t prompts) {
    auto e = j.find("echo");
    if (e != j.end() && !e->is_null() && !e->is_boolean()) refuse("echo", "echo must be true or false");
    c.echo = e != j.end() && e->is_boolean() && e->get<bool>();
    c.logprobs = (int)api::integer_field(j, "logprobs", -1, 0, 5, "in 0..5 (the most likely tokens listed at each place)");
    if (c.max_tokens == 0 && !c.echo) refuse("max_tokens", "max_tokens 0 needs echo: true (the prompt scored alone)");
    if (stream && (c.echo || c.logprobs >= 0 || prompts > 1))
        refuse("stream", "stream is not supported with echo, logprobs or several prompts: ask without stream");
}

} // namespace

CompletionRequest parse_completion_request(const std::string& body, const CompletionEngine& engine,
                                           const ApiLimits& limits, uint64_t default_seed) {
    const Json j = api::request_object(body, limits);
    api::unknown_fields(j, kRequestFields, "completions");
    const std::vector<std::vector<int>> ps = prompts(j, engine);
    if ((long)ps.size() > limits.capacity)
        refuse("prompt", strfmt("prompt: %zu prompts, more than this server holds at once (%d: --max-batch + "
                                "--max-queue); send them in smaller requests",
                                ps.size(), limits.capacity));
    Completion c;
    CompletionRequest r;
    api::sampling_fields(j, c, "max_tokens", 0, limits, default_seed, &r.stream);
    scoring_fields(j, c, r.stream, ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
        auto one = std::make_shared<Completion>();
        one->prompt = ps[i];
        one->max_tokens = c.max_tokens, one->temperature = c.temperature, one->top_p = c.top_p, one->top_k = c.top_k;
        one->seed = c.seed + i;
        one->stop = c.stop;
        one->echo = c.echo, one->logprobs = c.logprobs;
        r.choices.push_back(std::move(one));
    }
    return r;
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

namespace {

// OpenAI's legacy logprobs: each token's text, log-probability (null for the prompt's first) and
// alternatives (the token itself always among them), and where its text starts, in bytes from the
// prompt's start (echoed or not).
Json logprobs_json(const Completion& c, const Tokenizer& tok) {
    Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
    size_t at = c.echo ? 0 : tok.decode(c.prompt).size();
    const auto add = [&](int id, const TokenLogprob* lp) {
        const std::string text = tok.decode({id});
        tokens.push_back(text);
        offsets.push_back(at);
        at += text.size();
        lps.push_back(lp ? Json(lp->logprob) : Json(nullptr));
        Json top = Json::object();
        if (lp) {
            for (const auto& [t, v] : lp->top) top[tok.decode({t})] = v;
            top[text] = lp->logprob;
        }
        tops.push_back(lp ? top : Json(nullptr));
    };
    if (c.echo)
        for (size_t i = 0; i < c.prompt.size(); ++i)
            add(c.prompt[i], i == 0 || i > c.prompt_logprobs.size() ? nullptr : &c.prompt_logprobs[i - 1]);
    for (const TokenLogprob& lp : c.token_logprobs) add(lp.token, &lp);
    return Json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

} // namespace

std::string completions_body(const std::string& id, long created, const std::string& model,
                             const std::vector<std::shared_ptr<Completion>>& choices,
                             const std::vector<std::string>& texts, const Tokenizer& tok) {
    Json list = Json::array();
    long prompt = 0, generated = 0, step = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
        const Completion& c = *choices[i];
        Json choice = Json::object();
        choice["text"] = (c.echo ? tok.decode(c.prompt) : std::string()) + texts[i];
        choice["index"] = (long)i;
        choice["logprobs"] = c.logprobs >= 0 ? logprobs_json(c, tok) : Json(nullptr);
        choice["finish_reason"] = c.finish_reason;
        list.push_back(choice);
        prompt += (long)c.prompt.size(), generated += c.completion_tokens;
        step = std::max(step, c.model_step);
    }
    Json j = Json::object();
    j["id"] = id;
    j["object"] = "text_completion";
    j["created"] = created;
    j["model"] = model;
    j["system_fingerprint"] = strfmt("dptrain-step-%ld", step);
    j["model_step"] = step;
    j["choices"] = list;
    j["usage"] = {{"prompt_tokens", prompt}, {"completion_tokens", generated}, {"total_tokens", prompt + generated}};
    return json_text(j);
}

std::string models_body(const std::string& model, long created, long step) {
    Json m = {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "dptrain"}, {"model_step", step}};
    return json_text(Json{{"object", "list"}, {"data", Json::array({m})}});
}

} // namespace dptrain
