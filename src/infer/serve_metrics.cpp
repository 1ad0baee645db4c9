// /metrics: the histograms and the Prometheus text (serve_api.h).
#include "dptrain/infer/serve_api.h"

#include "dptrain/core/error.h"

namespace dptrain {

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
