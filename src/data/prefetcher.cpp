// Prefetcher: reader k reads (micro-)batches k, k+K, ... into the ring; next() hands them out in
// order. Not for: which samples (sampler.cpp).
#include "dptrain/data/prefetcher.h"

#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

namespace dptrain {

Prefetcher::Prefetcher(std::vector<Dataset*> readers, Sampler& sampler, int rank, int world, int max_rows, int depth,
                       long first_step, long end_step, long fail_step, bool in_caller, long slow_from, int accum)
    : readers_(std::move(readers)), sampler_(sampler), rank_(rank), world_(world), accum_(accum),
      first_(first_step * accum), end_(end_step * accum),
      fail_step_(fail_step), slow_from_(slow_from), slots_((size_t)std::max<long>(depth, (long)readers_.size())), idx_(readers_.size()),
      ready_(slots_.size(), -1), wake_at_(std::numeric_limits<long>::max()), in_caller_(in_caller) {
    for (Batch& b : slots_) {
        b.x.resize((size_t)max_rows * readers_[0]->floats_per_sample());
        b.y.resize((size_t)max_rows * readers_[0]->ints_per_sample());
    }
    for (auto& v : idx_) v.resize(max_rows);
    if (!in_caller_)
        for (int k = 0; k < (int)readers_.size(); ++k) threads_.emplace_back(&Prefetcher::run, this, k);
}

Prefetcher::~Prefetcher() {
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

void Prefetcher::read_batch(Dataset& data, long k, std::vector<long>& idx) {
    const long step = (first_ + k) / accum_;
    const int micro = (int)((first_ + k) % accum_);
    Batch& b = slots_[k % (long)slots_.size()];
    b.step = step;
    b.micro = micro;
    b.global_n = sampler_.global_count(step);
    b.n = sampler_.slice(step, micro * world_ + rank_, world_ * accum_, idx.data());
    if (step == fail_step_ && micro == 0)
        throw UserError(strfmt("%s: read failed: injected I/O error (--inject-fault) for step %ld",
                               data.shard_path(0).c_str(), step + 1));
    data.read(idx.data(), b.n, sampler_.epoch_of(step), b.x.data(), b.y.data());
    if (slow_from_ >= 0 && step >= slow_from_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void Prefetcher::run(int reader) {
    const long depth = (long)slots_.size(), K = (long)readers_.size();
    const long refill = std::min<long>(accum_, depth);  // slots free before a full ring is refilled
    for (long k = reader; first_ + k < end_; k += K) {
        {
            // Slot k % depth is free once batch k - depth has been consumed. When it is not, wait
            // for `refill` slots (batch k - depth + refill consumed), telling release() when to wake.
            std::unique_lock<std::mutex> g(mu_);
            if (k - consumed_ >= depth) {
                const long target = k - depth + refill;
                while (!stop_ && consumed_ < target) {
                    wake_at_ = std::min(wake_at_, target);
                    cv_.wait(g);
                }
            }
            if (stop_ || (error_ && error_at_ < k)) return;
        }
        try {
            read_batch(*readers_[reader], k, idx_[reader]);
        } catch (...) {
            std::lock_guard<std::mutex> g(mu_);
            if (!error_ || k < error_at_) {
                error_ = std::current_exception();
                error_at_ = k;
            }
            cv_.notify_all();
            return;
        }
        {
            std::lock_guard<std::mutex> g(mu_);
            ready_[k % depth] = k;
        }
        cv_.notify_all();
    }
}

const Batch& Prefetcher::next() {
    auto t0 = std::chrono::steady_clock::now();
    const size_t slot = (size_t)(consumed_ % (long)slots_.size());
    if (in_caller_) {
        read_batch(*readers_[0], consumed_, idx_[0]);
        wait_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return slots_[slot];
    }
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return ready_[slot] == consumed_ || (error_ && error_at_ <= consumed_); });
    if (ready_[slot] != consumed_) std::rethrow_exception(error_);
    wait_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return slots_[slot];
}

std::vector<std::pair<void*, size_t>> Prefetcher::buffers() {
    std::vector<std::pair<void*, size_t>> out;
    for (Batch& b : slots_) {
        out.emplace_back(b.x.data(), b.x.size() * sizeof(float));
        out.emplace_back(b.y.data(), b.y.size() * sizeof(int));
    }
    return out;
}

const Batch* Prefetcher::peek() {
    std::lock_guard<std::mutex> g(mu_);
    const long k = consumed_ + 1;
    if (in_caller_ || first_ + k >= end_) return nullptr;
    const size_t slot = (size_t)(k % (long)slots_.size());
    return ready_[slot] == k ? &slots_[slot] : nullptr;
}

void Prefetcher::release() {
    {
        std::lock_guard<std::mutex> g(mu_);
        if (++consumed_ < wake_at_) return;
        wake_at_ = std::numeric_limits<long>::max();  // the woken readers register again if still short
    }
    cv_.notify_all();
}

double Prefetcher::take_wait_seconds() {
    std::lock_guard<std::mutex> g(mu_);
    double w = wait_;
    wait_ = 0.0;
    return w;
}

} // namespace dptrain
