// The completion engine (completions.h). One decoding thread owns the model; HTTP threads only
// queue requests and read answers. Each step:
//   1. locked: drop cancelled sequences; with no sequence running, swap in an offered model;
//      admit queued requests to free slots (none while a model is offered)
//   2. unlocked: one decode call, each sequence's uncached positions as rows, its last row's logits
//   3. each sequence picks its token and hands the reader's text to its Completion
//   4. locked: finished sequences free their slots
#include "dptrain/infer/completions.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dptrain {

namespace {

// A byte-level tokenizer may give half a character, which must not reach the JSON writer alone.
size_t complete_utf8(const std::string& s, size_t from, size_t upto) {
    size_t start = upto;
    for (int back = 0; back < 4 && start > from; ++back) {
        const unsigned char b = (unsigned char)s[start - 1];
        --start;
        if ((b & 0xC0) != 0x80) {  // a lead byte
            const size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
            return start + len <= upto ? upto : start;
        }
    }
    return upto;
}

// Prompt rows scored a step: their logits come back whole, so a long prompt goes in pieces.
constexpr int kScoreRows = 64;

// An out row scored only: no token drawn (core/token_draw.h).
constexpr TokenDraw kNoDraw{0, 0, -1.0, 1.0, 0.0};

} // namespace

bool Completion::next(std::string* text) {
    Got got;
    while ((got = next_for(text, 3600)) == Got::nothing_yet) {
    }
    return got == Got::text;
}

Completion::Got Completion::next_for(std::string* text, double seconds) {
    std::unique_lock<std::mutex> lk(mu);
    if (!cv.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return !pieces.empty() || done; }))
        return Got::nothing_yet;
    if (pieces.empty()) return Got::done;
    *text = std::move(pieces.front());
    pieces.pop_front();
    return Got::text;
}

struct CompletionEngine::Running {
    std::shared_ptr<Completion> c;
    int slot = 0;
    std::vector<int> context;  // at most T tokens
    int cached = 0;            // positions of context in the slot's cache
    TokenPicker picker;
    std::string text;
    size_t sent = 0;    // bytes handed to the reader
    size_t longest_stop = 0;
    int generated = 0;
    bool finished = false;
    long model_step = 0;
    bool scored = false;  // the prompt's logprobs, where asked for, are all taken

    // Echo with logprobs: the prompt's rows are scored in pieces before the first token.
    bool scoring() const { return !scored && c->echo && c->logprobs >= 0; }

    Running(std::shared_ptr<Completion> c_, int slot_, int V)
        : c(std::move(c_)), slot(slot_), context(c->prompt), picker(V, c->temperature, c->top_k, c->top_p, c->seed) {
        for (const std::string& s : c->stop) longest_stop = std::max(longest_stop, s.size());
    }
};

CompletionEngine::CompletionEngine(InferenceModel model, int slots, int queue, std::unique_ptr<Decoder> decoder,
                                   int threads)
    : cfg_(model.cfg), tok_(model.tok), params_(std::move(model.params)),
      decoder_(decoder ? std::move(decoder) : make_cpu_decoder(model.cfg)), slots_(slots), queue_cap_(queue),
      threads_(threads), running_(slots) {
    const int T = cfg_.block_size;
    // A whole prompt and a row for each other sequence fit in one call, and so do the logits of
    // a scored piece of a prompt and a row for each other sequence.
    decoder_->reserve(slots, T + slots);
    decoder_->set_params(params_.data());
    logits_.resize((size_t)(slots + kScoreRows) * cfg_.vocab_size);
    draws_.reserve(slots + kScoreRows);
    ids_.resize(slots + kScoreRows);
    stats_.model_step = model.step;
    stats_.model_path = model.path;
    thread_ = std::thread([this] { run(); });
}

CompletionEngine::~CompletionEngine() {
    drain();
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

int CompletionEngine::free_slots_locked() const {
    return (int)std::count(running_.begin(), running_.end(), nullptr);
}

void CompletionEngine::drop_cancelled_locked() {
    const auto gone = [](const std::shared_ptr<Completion>& c) { return c->cancelled.load(); };
    const auto from = std::remove_if(queue_.begin(), queue_.end(), gone);
    stats_.cancelled += (long)(queue_.end() - from);
    queue_.erase(from, queue_.end());
}

CompletionEngine::Submitted CompletionEngine::submit(const std::shared_ptr<Completion>& c) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (draining_) return Submitted::draining;
        drop_cancelled_locked();  // so a client that left holds no place
        if ((long)queue_.size() >= (long)queue_cap_ + free_slots_locked()) return Submitted::queue_full;
        c->queued_at = now_seconds();
        queue_.push_back(c);
        ++stats_.requests;
        stats_.prompt_tokens += (long)c->prompt.size();
    }
    cv_.notify_all();
    return Submitted::ok;
}

void CompletionEngine::offer_model(InferenceModel model) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        offered_ = std::make_unique<InferenceModel>(std::move(model));
    }
    cv_.notify_all();
}

void CompletionEngine::drain() {
    std::unique_lock<std::mutex> lk(mu_);
    draining_ = true;
    stats_.draining = true;
    idle_cv_.wait(lk, [&] { return queue_.empty() && free_slots_locked() == slots_; });
}

bool CompletionEngine::drain(double seconds) {
    std::unique_lock<std::mutex> lk(mu_);
    draining_ = true;
    stats_.draining = true;
    const auto idle = [&] { return queue_.empty() && free_slots_locked() == slots_; };
    if (idle_cv_.wait_for(lk, std::chrono::duration<double>(seconds), idle)) return true;
    abort_ = true;
    cv_.notify_all();
    idle_cv_.wait(lk, idle);
    return false;
}

// Under mu_, on the decoding thread: every request ends as it stands.
void CompletionEngine::abort_locked() {
    const auto end = [&](Completion& c, int generated) {
        std::lock_guard<std::mutex> ck(c.mu);
        c.done = true;
        c.finish_reason = "abort";
        c.completion_tokens = generated;
        c.finished_at = now_seconds();
        c.cv.notify_all();
    };
    for (auto& r : running_)
        if (r) {
            end(*r->c, r->generated);
            r.reset();
        }
    for (auto& c : queue_) end(*c, 0);
    queue_.clear();
    abort_ = false;
}

void RecentRate::add(double now, long n) {
    const long sec = (long)now, i = sec % (kWindow + 1);
    if (second_[i] != sec) second_[i] = sec, count_[i] = 0;
    count_[i] += n;
}

double RecentRate::per_second(double now) const {
    const long sec = (long)now, seconds = std::min<long>(kWindow, sec - start_);
    if (seconds <= 0) return 0;
    long sum = 0;
    for (long s = sec - seconds; s < sec; ++s)  // whole seconds only: the current one is not over
        if (second_[s % (kWindow + 1)] == s) sum += count_[s % (kWindow + 1)];
    return (double)sum / (double)seconds;
}

EngineStats CompletionEngine::stats() const {
    std::lock_guard<std::mutex> lk(mu_);
    EngineStats s = stats_;
    s.tokens_per_second = generated_rate_.per_second(now_seconds());
    s.queued = (long)std::count_if(queue_.begin(), queue_.end(),
                                   [](const std::shared_ptr<Completion>& c) { return !c->cancelled; });
    s.active = slots_ - free_slots_locked();
    return s;
}

// Every slot free. Installed unlocked, as a GPU copy takes long: safe since only this thread
// admits and decodes. Why: docs/NOTES.md, "Note [model swap]".
void CompletionEngine::swap(std::unique_lock<std::mutex>& lk) {
    std::unique_ptr<InferenceModel> next = std::move(offered_);
    lk.unlock();
    params_ = std::move(next->params);
    decoder_->set_params(params_.data());
    std::fprintf(stderr, "serve: now serving step %ld (%s)\n", next->step, next->path.c_str());
    lk.lock();
    stats_.model_step = next->step;
    stats_.model_path = next->path;
    ++stats_.swaps;
}

void CompletionEngine::admit_locked() {
    if (offered_) return;  // new requests start on the new model
    for (int s = 0; s < slots_ && !queue_.empty(); ++s) {
        if (running_[s]) continue;
        std::shared_ptr<Completion> c = std::move(queue_.front());
        queue_.pop_front();
        if (c->cancelled) {
            ++stats_.cancelled;
            continue;
        }
        {
            std::lock_guard<std::mutex> ck(c->mu);
            c->started_at = now_seconds();
            c->model_step = stats_.model_step;
        }
        running_[s] = std::make_unique<Running>(std::move(c), s, drawable_ids(cfg_, *tok_));
        running_[s]->model_step = stats_.model_step;
    }
}

void CompletionEngine::run() {
    // OpenMP's (and so OpenBLAS's) thread count is per thread: set where the decoding runs.
    if (threads_ > 0) cpu::set_threads(threads_);
    {
        std::lock_guard<std::mutex> lk(mu_);
        stats_.threads = cpu::get_threads();
    }
    std::vector<Running*> batch;
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(mu_);
            for (auto& r : running_)
                if (r && (r->finished || r->c->cancelled)) {
                    if (!r->finished) {
                        ++stats_.cancelled;
                        std::lock_guard<std::mutex> ck(r->c->mu);
                        r->c->done = true;
                        r->c->cv.notify_all();
                    }
                    r.reset();
                }
            const bool idle = free_slots_locked() == slots_;
            if (idle && queue_.empty()) idle_cv_.notify_all();
            cv_.wait(lk, [&] {
                const bool none = free_slots_locked() == slots_;
                return stop_ || abort_ || !none || (offered_ && none) || (!queue_.empty() && !offered_);
            });
            if (abort_) abort_locked();
            if (offered_ && free_slots_locked() == slots_) swap(lk);
            admit_locked();
            batch.clear();
            for (auto& r : running_)
                if (r) batch.push_back(r.get());
            if (batch.empty()) {
                if (stop_ && queue_.empty()) return;
                continue;
            }
            // Each step starts at another slot: when the rows or logits fit only some sequences
            // (prompts, scored pieces), none waits behind a slot that keeps refilling.
            std::rotate(batch.begin(), batch.begin() + (long)(first_slot_++ % batch.size()), batch.end());
        }
        step(batch);
    }
}

// The step's rows (each stepped sequence's uncached positions, as many as fit) and out rows with
// their draws; true where some row's logits must come back (a scored prompt, or logprobs asked).
bool CompletionEngine::gather_rows(const std::vector<Running*>& batch) {
    const int budget = cfg_.block_size + slots_, out_budget = slots_ + kScoreRows;
    rows_tok_.clear();
    rows_slot_.clear();
    rows_pos_.clear();
    out_rows_.clear();
    out_first_.clear();
    out_n_.clear();
    from_.clear();
    stepped_.clear();
    draws_.clear();
    bool wants_logits = false;
    for (Running* r : batch) {
        if (r->c->max_tokens == 0 && !r->scoring()) {  // echo alone: nothing to compute
            finish_unscored(*r);
            continue;
        }
        const bool scoring = r->scoring();
        const int from = r->cached;
        const int to = scoring ? std::min((int)r->context.size(), from + kScoreRows) : (int)r->context.size();
        const int outs = scoring ? to - from : 1;
        // The reserved rows hold one whole prompt (and the logits one scored piece): the rest wait a step.
        if (!stepped_.empty() &&
            ((int)rows_tok_.size() + to - from > budget || (int)out_rows_.size() + outs > out_budget))
            continue;
        out_first_.push_back((int)out_rows_.size());
        out_n_.push_back(outs);
        from_.push_back(from);
        // A token follows once the whole prompt is cached, unless only the prompt was asked for.
        const bool picks = to == (int)r->context.size() && r->c->max_tokens != 0;
        wants_logits |= scoring || (picks && r->c->logprobs >= 0);
        for (int i = from; i < to; ++i) {
            rows_tok_.push_back(r->context[i]);
            rows_slot_.push_back(r->slot);
            rows_pos_.push_back(i);
            if (!scoring && i != to - 1) continue;
            out_rows_.push_back((int)rows_tok_.size() - 1);
            draws_.push_back(picks && i == to - 1 ? r->picker.next_draw() : kNoDraw);
        }
        r->cached = to;
        stepped_.push_back(r);
    }
    return wants_logits;
}

void CompletionEngine::step(const std::vector<Running*>& batch) {
    const int V = cfg_.vocab_size;
    const bool wants_logits = gather_rows(batch);
    if (stepped_.empty()) return;
    decoder_->decode_pick(rows_tok_.data(), rows_slot_.data(), rows_pos_.data(), (int)rows_tok_.size(),
                          out_rows_.data(), (int)out_rows_.size(), draws_.data(), ids_.data(),
                          wants_logits ? logits_.data() : nullptr);
    long picked = 0;
    for (size_t k = 0; k < stepped_.size(); ++k) {
        Running& r = *stepped_[k];
        const float* rows = logits_.data() + (size_t)out_first_[k] * V;
        if (r.scoring()) score(r, rows, from_[k], out_n_[k]);
        if (r.cached < (int)r.context.size() || r.finished) continue;  // more of the prompt first, or scored only
        picked += 1;
    }
    {
        // Before the readers hear of the tokens, so counts never lag what a client saw.
        std::lock_guard<std::mutex> lk(mu_);
        ++stats_.steps;
        stats_.rows += (long)rows_tok_.size();
        stats_.generated_tokens += picked;
        generated_rate_.add(now_seconds(), picked);
    }
    for (size_t k = 0; k < stepped_.size(); ++k) {
        Running& r = *stepped_[k];
        if (r.cached < (int)r.context.size() || r.finished) continue;
        const int at = out_first_[k] + out_n_[k] - 1;
        emit(r, ids_[at], wants_logits ? logits_.data() + (size_t)at * V : nullptr);
    }
}

// Rows [from, from + n) of the prompt: row p's logits give the log-probability of token p + 1.
// The last piece's last row is the first token's: kept for emit, or the end where max_tokens is 0.
void CompletionEngine::score(Running& r, const float* logits, int from, int n) {
    const int V = cfg_.vocab_size, P = (int)r.c->prompt.size(), drawable = drawable_ids(cfg_, *tok_);
    std::vector<TokenLogprob>& out = r.c->prompt_logprobs;  // the reader looks only once done
    for (int i = 0; i < n && from + i + 1 < P; ++i)
        out.push_back(token_logprob(logits + (size_t)i * V, V, drawable, r.c->prompt[from + i + 1], r.c->logprobs));
    if (from + n < P) return;
    r.scored = true;
    if (r.c->max_tokens == 0) finish_unscored(r);
}

// max_tokens 0: the answer is the prompt (and its logprobs), nothing generated.
void CompletionEngine::finish_unscored(Running& r) {
    r.finished = true;
    std::lock_guard<std::mutex> lk(r.c->mu);
    r.c->done = true;
    r.c->finish_reason = "length";
    r.c->completion_tokens = 0;
    r.c->first_token_at = r.c->finished_at = now_seconds();
    r.c->model_step = r.model_step;
    r.c->cv.notify_all();
}

void CompletionEngine::emit(Running& r, int token, const float* logits) {
    const int T = cfg_.block_size;
    if (r.c->logprobs >= 0)
        r.c->token_logprobs.push_back(
            token_logprob(logits, cfg_.vocab_size, drawable_ids(cfg_, *tok_), token, r.c->logprobs));
    // <|endoftext|> ends the answer without its text, finish "stop", as OpenAI and vLLM do.
    const bool ended = token == tok_->end_of_text();
    ++r.generated;
    r.context.push_back(token);
    if (!ended) r.text += tok_->decode({token});
    size_t end = r.text.size(), cut = std::string::npos;
    const size_t from = r.sent > r.longest_stop ? r.sent - r.longest_stop : 0;
    for (const std::string& s : r.c->stop) cut = std::min(cut, r.text.find(s, from));
    const char* finish = nullptr;
    if (cut != std::string::npos) {
        end = cut;
        finish = "stop";
    } else if (ended) {
        finish = "stop";
    } else if (r.generated >= r.c->max_tokens) {
        finish = "length";
    }
    size_t upto = end;
    if (!finish) {
        // Hold back what may start a stop string, and half a character.
        const size_t hold = r.longest_stop > 0 ? r.longest_stop - 1 : 0;
        upto = end - std::min(hold, end - r.sent);
        upto = std::max(r.sent, complete_utf8(r.text, r.sent, upto));
    }
    std::string piece = r.text.substr(r.sent, upto - r.sent);
    r.sent = upto;
    // A full window keeps its newest half, recomputed from position 0, as generate does.
    if (!finish && (int)r.context.size() > T) {
        const int keep = std::max(1, T / 2);
        r.context.erase(r.context.begin(), r.context.end() - keep);
        r.cached = 0;
    }
    std::lock_guard<std::mutex> lk(r.c->mu);
    if (r.generated == 1) r.c->first_token_at = now_seconds();
    if (!piece.empty()) r.c->pieces.push_back(std::move(piece));
    if (finish) {
        r.finished = true;
        r.c->done = true;
        r.c->finish_reason = finish;
        r.c->completion_tokens = r.generated;
        r.c->finished_at = now_seconds();
        r.c->model_step = r.model_step;
    }
    r.c->cv.notify_all();
}

} // namespace dptrain
