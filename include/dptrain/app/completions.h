// The completion engine behind `dptrain serve`: requests queue, a decoding thread runs them in
// batches (continuous batching: a request that arrives while others decode joins at the next
// step, one model call a step for every running sequence), and text flows back to each request's
// reader, who may be slow or gone, without ever blocking the decoding thread. A newer model is
// swapped in between steps once the sequences running on the old one have finished.
// Not for: HTTP, JSON or option parsing (serve.cpp).
#pragma once

#include "dptrain/app/inference.h"
#include "dptrain/core/clock.h"
#include "dptrain/model/decoder.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dptrain {

// One completion: what was asked, and the channel its text comes back through. The engine pushes
// text and, last, the finish reason; the reader pops (next) until done.
struct Completion {
    // Asked.
    std::vector<int> prompt;  // token ids, 1 to the block size
    int max_tokens = 16;
    double temperature = 1.0, top_p = 1.0;
    int top_k = 0;
    uint64_t seed = 0;
    std::vector<std::string> stop;  // the text ends before the first of these (not included)

    // Answered (under mu).
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::string> pieces;  // text not yet taken by the reader
    bool done = false;
    std::string finish_reason;       // "length" | "stop"
    int completion_tokens = 0;
    long model_step = 0;             // the step of the model that wrote every token of the answer
    double queued_at = 0, started_at = 0, first_token_at = 0, finished_at = 0;  // now_seconds()
    std::atomic<bool> cancelled{false};  // set by a reader that went away: the engine drops it

    // Reader: waits for text or the end; false once done and every piece is taken.
    bool next(std::string* text);
    // As next, waiting at most `seconds`.
    enum class Got { text, done, nothing_yet };
    Got next_for(std::string* text, double seconds);
};

// Events a second over the last kWindow whole seconds (fewer while the first are not over), from
// counts added as they happen. What one reader sees does not depend on when, or how often, others
// read (a rate since the previous scrape of /metrics did: two Prometheus servers each saw the
// tokens since the other's scrape). Not thread-safe: the engine's lock guards it.
class RecentRate {
  public:
    static constexpr int kWindow = 10;
    explicit RecentRate(double start) : start_((long)start) {}
    void add(double now, long n);
    double per_second(double now) const;

  private:
    long start_;                      // the whole second it started in
    long count_[kWindow + 1] = {};    // a bin a second, reused round
    long second_[kWindow + 1] = {};   // the whole second each bin counts
};

// Counters and gauges for /metrics (a copy, taken under the engine's lock).
struct EngineStats {
    long queued = 0, active = 0;
    long requests = 0, prompt_tokens = 0, generated_tokens = 0, cancelled = 0;
    double tokens_per_second = 0;  // generated over the last RecentRate::kWindow seconds
    long steps = 0, rows = 0;  // model calls and the rows (positions) they computed
    long model_step = 0, swaps = 0;
    std::string model_path;
    bool draining = false;
    int threads = 0;  // compute threads (OpenMP and OpenBLAS) of the decoding thread, once it runs
};

class CompletionEngine {
  public:
    // slots: sequences decoded together (--max-batch); queue: requests waiting beyond them
    // (--max-queue); decoder: where they are decoded (a CPU one when null), for model.cfg;
    // threads: the decoding thread's compute threads (--threads); 0 leaves its defaults.
    CompletionEngine(InferenceModel model, int slots, int queue, std::unique_ptr<Decoder> decoder = nullptr,
                     int threads = 0);
    ~CompletionEngine();  // finishes what is queued and running, then stops
    CompletionEngine(const CompletionEngine&) = delete;
    CompletionEngine& operator=(const CompletionEngine&) = delete;

    enum class Submitted { ok, queue_full, draining };
    Submitted submit(const std::shared_ptr<Completion>& c);
    // A newer model to serve: requests that start from now on wait until every sequence on the
    // old one has finished, then run on the new one. The tokenizer and configuration must be the
    // current ones' (the caller checks).
    void offer_model(InferenceModel model);
    // Stops taking requests (submit answers draining); returns once every queued and running one
    // has finished.
    void drain();
    EngineStats stats() const;
    // Fixed for the engine's life (a model offered later must have the same).
    const GptConfig& config() const { return cfg_; }
    const Tokenizer& tokenizer() const { return tok_; }

  private:
    struct Running;
    void run();
    void admit_locked();
    void swap(std::unique_lock<std::mutex>& lk);  // holding lk; releases it while installing
    void step(const std::vector<Running*>& batch);
    // Appends the token to r's answer and hands the reader the text it may have now.
    void emit(Running& r, int token);
    int free_slots_locked() const;
    void drop_cancelled_locked();  // queued requests whose reader left: out of the queue, counted

    const GptConfig cfg_;
    const Tokenizer tok_;
    std::vector<float> params_;  // the decoding thread's; replaced by swap only
    std::unique_ptr<Decoder> decoder_;  // decodes on params_ (given again by swap)
    const int slots_, queue_cap_, threads_;
    std::vector<std::unique_ptr<Running>> running_;  // one per slot (null: free)
    std::deque<std::shared_ptr<Completion>> queue_;
    std::unique_ptr<InferenceModel> offered_;
    bool draining_ = false, stop_ = false;
    EngineStats stats_;
    RecentRate generated_rate_{now_seconds()};
    mutable std::mutex mu_;
    std::condition_variable cv_, idle_cv_;
    // The step's rows, reused: tokens, slots, positions, which rows' logits, and those logits.
    std::vector<int> rows_tok_, rows_slot_, rows_pos_, out_rows_;
    std::vector<float> logits_;
    std::vector<Running*> stepped_;
    std::thread thread_;
};

} // namespace dptrain
