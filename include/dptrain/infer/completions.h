// The completion engine behind `dptrain serve`: continuous batching on one decoding thread that
// no reader, slow or gone, can block; a newer model swaps in once the old one's sequences finish.
// Not for: HTTP, JSON or option parsing (serve.cpp).
#pragma once

#include "dptrain/infer/inference.h"
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

// A request and the channel its text comes back through.
struct Completion {
    std::vector<int> prompt;  // ids, 1 to block_size of them
    int max_tokens = 16;      // 0: the prompt scored only (with echo)
    // logprobs >= 0: each generated token's TokenLogprob with that many alternatives; with echo,
    // the prompt's tokens' too (the first has none). Written by the engine before done.
    int logprobs = -1;
    bool echo = false;
    std::vector<TokenLogprob> prompt_logprobs, token_logprobs;
    double temperature = 1.0, top_p = 1.0;
    int top_k = 0;
    uint64_t seed = 0;
    std::vector<std::string> stop;  // the text ends before the first (not included)

    // Answered, under mu.
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::string> pieces;  // not yet taken by the reader
    bool done = false;
    std::string finish_reason;       // "length" | "stop"
    int completion_tokens = 0;
    long model_step = 0;             // one model writes every token of an answer
    double queued_at = 0, started_at = 0, first_token_at = 0, finished_at = 0;  // now_seconds()
    std::atomic<bool> cancelled{false};  // set by the reader, read by the engine without mu

    // false once done and every piece is taken.
    bool next(std::string* text);
    enum class Got { text, done, nothing_yet };
    Got next_for(std::string* text, double seconds);
};

// Events a second over the last kWindow whole seconds, so that a reader's value does not depend
// on when others scrape (a since-last-scrape rate did). Not thread-safe: the engine's lock guards it.
class RecentRate {
  public:
    static constexpr int kWindow = 10;
    explicit RecentRate(double start) : start_((long)start) {}
    void add(double now, long n);
    double per_second(double now) const;

  private:
    long start_;
    long count_[kWindow + 1] = {};    // a ring, a bin a second
    long second_[kWindow + 1] = {};   // each bin's second
};

// For /metrics: a copy taken under the engine's lock.
struct EngineStats {
    long queued = 0, active = 0;
    long requests = 0, prompt_tokens = 0, generated_tokens = 0, cancelled = 0;
    double tokens_per_second = 0;  // over RecentRate::kWindow
    long steps = 0, rows = 0;  // model calls and the rows they computed
    long model_step = 0, swaps = 0;
    std::string model_path;
    bool draining = false;
    int threads = 0;  // the decoding thread's, once it runs
};

class CompletionEngine {
  public:
    // slots: --max-batch; queue: --max-queue; decoder null: the CPU; threads 0: the defaults.
    CompletionEngine(InferenceModel model, int slots, int queue, std::unique_ptr<Decoder> decoder = nullptr,
                     int threads = 0);
    ~CompletionEngine();  // finishes what is queued and running, then stops
    CompletionEngine(const CompletionEngine&) = delete;
    CompletionEngine& operator=(const CompletionEngine&) = delete;

    enum class Submitted { ok, queue_full, draining };
    Submitted submit(const std::shared_ptr<Completion>& c);
    // New requests wait until the old model's sequences finish, so each answer has one model.
    // Same tokenizer and config (the caller checks).
    void offer_model(InferenceModel model);
    // Refuses new requests; returns once every queued and running one has finished.
    void drain();
    // The same within `seconds`; then every request still queued or running ends where it is,
    // finish_reason "abort" (a stream gets its final event). False when it had to.
    bool drain(double seconds);
    EngineStats stats() const;
    // Fixed for the engine's life.
    const GptConfig& config() const { return cfg_; }
    const Tokenizer& tokenizer() const { return *tok_; }

  private:
    struct Running;
    void run();
    void admit_locked();
    void swap(std::unique_lock<std::mutex>& lk);  // releases lk while installing
    bool gather_rows(const std::vector<Running*>& batch);
    void step(const std::vector<Running*>& batch);
    void score(Running& r, const float* logits, int from, int n);
    void emit(Running& r, int token, const float* logits);
    void finish_unscored(Running& r);
    void abort_locked();
    int free_slots_locked() const;
    void drop_cancelled_locked();

    const GptConfig cfg_;
    const TokenizerPtr tok_;
    std::vector<float> params_;  // the decoding thread's; replaced by swap only
    std::unique_ptr<Decoder> decoder_;
    const int slots_, queue_cap_, threads_;
    std::vector<std::unique_ptr<Running>> running_;  // one per slot (null: free)
    std::deque<std::shared_ptr<Completion>> queue_;
    std::unique_ptr<InferenceModel> offered_;
    bool draining_ = false, stop_ = false, abort_ = false;
    EngineStats stats_;
    RecentRate generated_rate_{now_seconds()};
    mutable std::mutex mu_;
    std::condition_variable cv_, idle_cv_;
    // A step's rows, reused; out_first_/out_n_: each stepped sequence's logits rows.
    std::vector<int> rows_tok_, rows_slot_, rows_pos_, out_rows_, out_first_, out_n_, from_;
    std::vector<float> logits_;
    std::vector<TokenDraw> draws_;  // an out row's rule and draw (kNoDraw: scored only)
    std::vector<int> ids_;          // an out row's token picked by the decoder
    std::vector<Running*> stepped_;
    size_t first_slot_ = 0;  // the batch's rotation, a step more each step
    std::thread thread_;
};

} // namespace dptrain
