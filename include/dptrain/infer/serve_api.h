// The OpenAI-style completions API's bodies, checks and /metrics text. No sockets (serve.cpp), so
// every rule is tested directly.
#pragma once

#include "dptrain/infer/api_fields.h"
#include "dptrain/infer/completions.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace dptrain {

// A completions request: a choice per prompt (an array of prompts gives several).
struct CompletionRequest {
    std::vector<std::shared_ptr<Completion>> choices;
    bool stream = false;
};
constexpr int kMaxPrompts = 64;  // a request's

// Throws ApiError. Choice i's seed is the request's (or default_seed) + i.
CompletionRequest parse_completion_request(const std::string& body, const CompletionEngine& engine,
                                           const ApiLimits& limits, uint64_t default_seed);

std::string error_body(int status, const std::string& message, const std::string& param);

// chunk: one piece of a stream; finish reason and usage only in the last.
std::string completion_body(const std::string& id, long created, const std::string& model, const Completion& c,
                            const std::string& text, bool chunk, bool last);
// A whole answer of every choice (texts[i]: choice i's generated text), with the prompt's text
// where echo asks for it and OpenAI's legacy logprobs object (tokens, token_logprobs,
// top_logprobs, text_offset) where logprobs does.
std::string completions_body(const std::string& id, long created, const std::string& model,
                             const std::vector<std::shared_ptr<Completion>>& choices,
                             const std::vector<std::string>& texts, const Tokenizer& tok);

std::string models_body(const std::string& model, long created, long step);

// Prometheus; thread-safe.
class Histogram {
  public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double v);
    void write(std::string& out, const std::string& name, const std::string& help) const;

  private:
    std::vector<double> bounds_;
    std::vector<long> counts_;  // not cumulative; the last is +Inf
    double sum_ = 0;
    long count_ = 0;
    mutable std::mutex mu_;
};

struct ServeCounters {
    std::mutex mu;
    std::map<int, long> by_status;  // completion requests
    long checkpoints_skipped = 0;
};

// Prometheus text format 0.0.4.
std::string metrics_text(const EngineStats& s, ServeCounters& counters, const Histogram& latency,
                         const Histogram& first_token);

} // namespace dptrain
