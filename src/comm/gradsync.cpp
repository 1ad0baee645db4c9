// GradSync: buckets and the communication thread. Not for: one all-reduce's algorithm (allreduce.cpp).
#include "dptrain/comm/gradsync.h"

#include "dptrain/core/error.h"
#include "dptrain/core/clock.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

namespace dptrain {

GradSync::GradSync(AllreduceEngine& engine, const ParamLayout& layout, double bucket_mb, DType wire, bool overlap,
                   size_t control)
    : engine_(engine), wire_(wire), overlap_(overlap), total_(layout.total + control), control_(control) {
    if (total_ > engine.capacity()) fatal("GradSync: gradient buffer smaller than the model");
    buckets_ = cut_buckets(total_, bucket_mb);
    // One rank has nothing to exchange: no thread, no hand-offs.
    if (engine.world_size() == 1) overlap_ = false;
    if (overlap_) thread_ = std::thread(&GradSync::worker, this);
}

GradSync::~GradSync() {
    if (thread_.joinable()) {
        {
            std::lock_guard<std::mutex> g(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
}

void GradSync::begin_step(long step) {
    std::lock_guard<std::mutex> g(mu_);
    step_ = step;
    if (done_ != launched_) fatal("GradSync::begin_step with buckets in flight");
    launched_ = done_ = 0;
    std::memset(engine_.buffer(), 0, total_ * sizeof(float));
}

void GradSync::reduce(const Bucket& b) {
    double t0 = now_seconds();
    engine_.run(b.begin, b.end - b.begin, wire_);
    double t1 = now_seconds();
    if (tracer_) {
        size_t n = b.end - b.begin;
        tracer_->comm("allreduce", step_, t0, t1, n * dtype_size(wire_), engine_.path_for(n, wire_));
    }
    std::lock_guard<std::mutex> g(mu_);
    comm_seconds_ += t1 - t0;
}

void GradSync::grads_ready_from(size_t offset) {
    if (!overlap_) return;
    {
        std::lock_guard<std::mutex> g(mu_);
        size_t before = launched_;
        while (launched_ < buckets_.size() && buckets_[launched_].begin >= offset) ++launched_;
        if (launched_ == before) return;
    }
    cv_.notify_all();
}

void GradSync::worker() {
    // Buckets go in launch order on every rank, so the collectives of all ranks match up.
    // done_ is the cursor: begin_step() resets it only while nothing is in flight.
    for (;;) {
        size_t i;
        {
            std::unique_lock<std::mutex> g(mu_);
            cv_.wait(g, [&] { return stop_ || done_ < launched_; });
            if (stop_) return;
            i = done_;
        }
        reduce(buckets_[i]);
        {
            std::lock_guard<std::mutex> g(mu_);
            done_ = i + 1;
        }
        cv_.notify_all();
    }
}

double GradSync::finish() {
    double t0 = now_seconds();
    if (!overlap_) {
        for (const Bucket& b : buckets_) reduce(b);
        std::lock_guard<std::mutex> g(mu_);
        launched_ = done_ = buckets_.size();
        return now_seconds() - t0;
    }
    {
        std::lock_guard<std::mutex> g(mu_);
        launched_ = buckets_.size();
    }
    cv_.notify_all();
    // Poll before sleeping: a wake costs tens of microseconds on VMs, a small all-reduce's worth.
    // sched_yield hands the core over when the two threads share it.
    for (int i = 0; i < kSpinYields; ++i) {
        {
            std::lock_guard<std::mutex> g(mu_);
            if (done_ == buckets_.size()) return now_seconds() - t0;
        }
        sched_yield();
    }
    {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return done_ == buckets_.size(); });
    }
    return now_seconds() - t0;
}

double GradSync::take_comm_seconds() {
    std::lock_guard<std::mutex> g(mu_);
    double s = comm_seconds_;
    comm_seconds_ = 0;
    return s;
}

} // namespace dptrain
