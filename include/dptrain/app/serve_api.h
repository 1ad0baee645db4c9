// The OpenAI-style completions API as dptrain serve speaks it: a request body checked field by
// field into a Completion, the response and stream-chunk bodies, the error body, and the
// Prometheus text of /metrics. No sockets here (serve.cpp has the server), so every rule is
// tested directly.
#pragma once

#include "dptrain/app/completions.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace dptrain {

// A request the API refuses: the HTTP status, the field at fault ("" for the body as a whole)
// and what is wrong with it.
struct ApiError {
    int status = 400;
    std::string param, message;
};

struct ApiLimits {
    int max_tokens = 512;  // the largest max_tokens a request may ask for
    std::string model;     // the served model's name; a request may name it or no model
};

// The body of POST /v1/completions into a Completion (prompt tokenized and checked against the
// vocabulary and the block size), *stream set from "stream". Throws ApiError.
std::shared_ptr<Completion> parse_completion_request(const std::string& body, const CompletionEngine& engine,
                                                     const ApiLimits& limits, bool* stream, uint64_t default_seed);

// {"error": {"message", "type", "param", "code"}} for a status.
std::string error_body(int status, const std::string& message, const std::string& param);

// The "text_completion" object: a whole answer, or with `chunk` one piece of a stream (finish
// reason null until the last; usage only in the last).
std::string completion_body(const std::string& id, long created, const std::string& model, const Completion& c,
                            const std::string& text, bool chunk, bool last);

// GET /v1/models.
std::string models_body(const std::string& model, long created, long step);

// A Prometheus histogram (cumulative buckets, sum, count), thread-safe.
class Histogram {
  public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double v);
    void write(std::string& out, const std::string& name, const std::string& help) const;

  private:
    std::vector<double> bounds_;
    std::vector<long> counts_;  // per bucket, not cumulative; the last is +Inf
    double sum_ = 0;
    long count_ = 0;
    mutable std::mutex mu_;
};

// What the HTTP side counts beside the engine's stats.
struct ServeCounters {
    std::mutex mu;
    std::map<int, long> by_status;  // completion requests by HTTP status
    long checkpoints_skipped = 0;
};

// The /metrics page (Prometheus text format 0.0.4).
std::string metrics_text(const EngineStats& s, ServeCounters& counters, const Histogram& latency,
                         const Histogram& first_token);

} // namespace dptrain
