// The chat completions API (chat_api.h).
#include "dptrain/infer/chat_api.h"

#include "dptrain/core/error.h"
#include "dptrain/io/promotion.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace dptrain {

namespace {

using api::refuse;

// What dptrain computes, refuses with a reason (logprobs, tools, a response format other than
// text) or takes and ignores by design (user, stream_options), and its own top_k.
const std::vector<const char*> kChatFields = {
    "model",     "messages",          "max_tokens",        "max_completion_tokens", "temperature", "top_p",
    "top_k",     "n",                 "stream",            "stream_options",        "stop",        "presence_penalty",
    "frequency_penalty", "logit_bias", "user",             "seed",                  "logprobs",    "top_logprobs",
    "response_format",   "tools",     "tool_choice",       "parallel_tool_calls",   "functions",   "function_call"};

// A message's content: a string, or text parts ({"type": "text", "text": ...}) joined.
std::string content_text(const Json& m) {
    auto c = m.find("content");
    if (c == m.end() || c->is_null()) refuse("messages", "each message needs its content (a string)");
    if (c->is_string()) return c->get<std::string>();
    std::string text;
    if (c->is_array())
        for (const Json& part : *c) {
            auto type = part.is_object() ? part.find("type") : part.end();
            if (type == part.end() || *type != "text" || !part.contains("text") || !part["text"].is_string())
                refuse("messages", "a message's content parts must be text ({\"type\": \"text\", \"text\": ...})");
            text += part["text"].get<std::string>();
        }
    else
        refuse("messages", "a message's content must be a string or an array of text parts");
    return text;
}

std::vector<std::pair<std::string, std::string>> messages(const Json& j) {
    auto it = j.find("messages");
    if (it == j.end() || !it->is_array() || it->empty())
        refuse("messages", "messages is required: an array of {\"role\", \"content\"} objects");
    std::vector<std::pair<std::string, std::string>> out;
    for (const Json& m : *it) {
        auto role = m.is_object() ? m.find("role") : m.end();
        if (role == m.end() || !role->is_string())
            refuse("messages", "each message must be an object with a role and content");
        const std::string r = role->get<std::string>();
        if (r != "system" && r != "developer" && r != "user" && r != "assistant")
            refuse("messages", strfmt("role \"%.32s\" is not supported: system, developer, user or assistant",
                                      r.c_str()));
        out.emplace_back(r == "developer" ? "system" : r, content_text(m));
    }
    return out;
}

// Chat's own fields that dptrain does not compute: refused, not ignored.
void chat_unsupported(const Json& j) {
    const auto set = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
    if (set("logprobs") && j["logprobs"] != false)
        refuse("logprobs", "logprobs are not supported by the chat API here; /v1/completions gives them");
    if (set("top_logprobs")) refuse("top_logprobs", "top_logprobs is not supported by the chat API here");
    // No tools offered, or told not to call one: nothing to refuse.
    for (const char* k : {"tools", "functions"})
        if (set(k) && !(j[k].is_array() && j[k].empty())) refuse(k, strfmt("%s: tool calls are not supported", k));
    for (const char* k : {"tool_choice", "function_call"})
        if (set(k) && j[k] != "none" && j[k] != "auto")
            refuse(k, strfmt("%s: only \"none\" or \"auto\" (tool calls are not supported)", k));
    if (set("response_format") && !(j["response_format"].is_object() && j["response_format"].value("type", "") == "text"))
        refuse("response_format", "response_format must be {\"type\": \"text\"}");
}

std::string replace_content(const std::string& format, const std::string& text) {
    std::string out;
    size_t at = 0;
    for (size_t k; (k = format.find("{content}", at)) != std::string::npos; at = k + 9) out += format.substr(at, k - at) + text;
    return out + format.substr(at);
}

Json envelope(const std::string& id, long created, const std::string& model, const Completion& c, const char* object) {
    Json j = Json::object();
    j["id"] = id;
    j["object"] = object;
    j["created"] = created;
    j["model"] = model;
    j["system_fingerprint"] = strfmt("dptrain-step-%ld", c.model_step);
    j["model_step"] = c.model_step;
    return j;
}

Json usage(const Completion& c) {
    const long p = (long)c.prompt.size(), n = c.completion_tokens;
    return {{"prompt_tokens", p}, {"completion_tokens", n}, {"total_tokens", p + n}};
}

} // namespace

ChatTemplate ChatTemplate::read(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw UserError(strfmt("--chat-template %s: cannot read it", path.c_str()));
    std::stringstream text;
    text << in.rdbuf();
    Json j;
    try {
        j = parse_json(text.str());
    } catch (const std::exception& e) {
        throw UserError(strfmt("--chat-template %s: %s", path.c_str(), e.what()));
    }
    if (!j.is_object()) throw UserError(strfmt("--chat-template %s: not a JSON object", path.c_str()));
    ChatTemplate t;
    for (const auto& item : j.items()) {
        const std::string& k = item.key();
        std::string* field = k == "system" ? &t.system : k == "user" ? &t.user : k == "assistant" ? &t.assistant
                             : k == "generation" ? &t.generation : nullptr;
        if (field && item.value().is_string()) {
            *field = item.value().get<std::string>();
        } else if (k == "stop" && item.value().is_array() &&
                   std::all_of(item.value().begin(), item.value().end(), [](const Json& s) { return s.is_string(); })) {
            t.stop = item.value().get<std::vector<std::string>>();
        } else {
            throw UserError(strfmt("--chat-template %s: \"%.40s\" must be one of system, user, assistant, generation "
                                   "(strings with {content}) or stop (an array of strings)",
                                   path.c_str(), k.c_str()));
        }
    }
    return t;
}

std::string ChatTemplate::beside(const std::string& checkpoint) {
    const std::string dir = checkpoint_dir_of(checkpoint);
    for (const std::string& d : {checkpoint, dir, dir.substr(0, dir.rfind('/'))}) {
        const std::string path = d + "/chat_template.json";
        if (std::ifstream(path)) return path;
    }
    return "";
}

std::string ChatTemplate::render(const std::vector<std::pair<std::string, std::string>>& msgs) const {
    std::string out;
    for (const auto& [role, text] : msgs)
        out += replace_content(role == "system" ? system : role == "user" ? user : assistant, text);
    return out + generation;
}

CompletionRequest parse_chat_request(const std::string& body, const CompletionEngine& engine, const ApiLimits& limits,
                                     const ChatTemplate& tmpl, uint64_t default_seed) {
    const Json j = api::request_object(body, limits);
    api::unknown_fields(j, kChatFields, "chat completions");
    auto c = std::make_shared<Completion>();
    const auto msgs = messages(j);
    CompletionRequest r;
    const bool newer = j.contains("max_completion_tokens") && !j["max_completion_tokens"].is_null();
    api::sampling_fields(j, *c, newer ? "max_completion_tokens" : "max_tokens", 1, limits, default_seed, &r.stream);
    chat_unsupported(j);
    try {
        c->prompt = engine.tokenizer().encode(tmpl.render(msgs));
    } catch (const UserError& e) {
        refuse("messages", std::string("messages with the chat template: ") + e.what() +
                               " (a template in the model's own characters: --chat-template)");
    }
    const int T = engine.config().block_size;
    if ((int)c->prompt.size() > T)
        refuse("messages", strfmt("the conversation has %zu tokens with its template; the model's context is %d tokens",
                                  c->prompt.size(), T));
    for (const std::string& s : tmpl.stop)
        if (std::find(c->stop.begin(), c->stop.end(), s) == c->stop.end()) c->stop.push_back(s);
    r.choices.push_back(std::move(c));
    return r;
}

std::string chat_body(const std::string& id, long created, const std::string& model, const Completion& c,
                      const std::string& text) {
    Json j = envelope(id, created, model, c, "chat.completion");
    Json choice = {{"index", 0}, {"message", {{"role", "assistant"}, {"content", text}}}, {"logprobs", nullptr},
                   {"finish_reason", c.finish_reason}};
    j["choices"] = Json::array({choice});
    j["usage"] = usage(c);
    return json_text(j);
}

std::string chat_chunk(const std::string& id, long created, const std::string& model, const Completion& c,
                       const std::string& piece, bool first, bool last) {
    Json j = envelope(id, created, model, c, "chat.completion.chunk");
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!piece.empty() || (first && !last)) delta["content"] = piece;
    Json choice = {{"index", 0}, {"delta", delta}, {"logprobs", nullptr},
                   {"finish_reason", last ? Json(c.finish_reason) : Json(nullptr)}};
    j["choices"] = Json::array({choice});
    if (last) j["usage"] = usage(c);
    return json_text(j);
}

} // namespace dptrain
