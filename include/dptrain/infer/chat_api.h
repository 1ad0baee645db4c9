// OpenAI's chat completions API over the completion engine: messages made into one prompt by a
// chat template, answers as chat.completion bodies and chunks. Not for: sockets (serve.cpp) or
// the fields both APIs share (api_fields.h).
#pragma once

#include "dptrain/infer/serve_api.h"

#include <string>
#include <utility>
#include <vector>

namespace dptrain {

// Each message through its role's format ("{content}" replaced by its text), then the generation
// prefix; the stop strings end the assistant's turn (beside a request's own). The default is a
// plain transcript for models trained without a template of their own (docs/SERVING.md).
struct ChatTemplate {
    std::string system = "{content}\n\n", user = "User: {content}\n", assistant = "Assistant: {content}\n",
                generation = "Assistant:";
    std::vector<std::string> stop = {"\nUser:"};

    // A JSON object with any of those five keys (stop: an array of strings); what it leaves out
    // keeps the default. Throws UserError naming the file and the key.
    static ChatTemplate read(const std::string& path);
    // The template a model's directory holds (chat_template.json in the run directory, or beside
    // the checkpoints), "" when none: what a model trained with a template of its own carries.
    static std::string beside(const std::string& checkpoint);
    // messages: (role, text); role is system (or developer), user or assistant.
    std::string render(const std::vector<std::pair<std::string, std::string>>& messages) const;
};

// Throws ApiError. One choice.
CompletionRequest parse_chat_request(const std::string& body, const CompletionEngine& engine, const ApiLimits& limits,
                                     const ChatTemplate& tmpl, uint64_t default_seed);

std::string chat_body(const std::string& id, long created, const std::string& model, const Completion& c,
                      const std::string& text);
// A streamed chunk: the first names the role, the last has the finish reason and the usage.
std::string chat_chunk(const std::string& id, long created, const std::string& model, const Completion& c,
                       const std::string& piece, bool first, bool last);

} // namespace dptrain
