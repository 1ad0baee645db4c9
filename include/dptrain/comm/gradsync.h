// Gradient averaging in --bucket-mb buckets, in the order backward finishes them (last layer
// first), each all-reduced on a communication thread while backward computes the layers below.
// Not for: the algorithm of one all-reduce (allreduce.h).
#pragma once

#include "dptrain/comm/allreduce.h"
#include "dptrain/comm/buckets.h"
#include "dptrain/core/flat.h"
#include "dptrain/core/trace.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace dptrain {

class GradSync : public GradHook {
  public:
    // overlap false: finish() reduces every bucket on the calling thread. `control` floats after
    // the gradients ride the first bucket: per-step flags (stop, non-finite) at no extra message.
    GradSync(AllreduceEngine& engine, const ParamLayout& layout, double bucket_mb, DType wire, bool overlap,
             size_t control = 0);
    ~GradSync() override;

    float* grads() const { return engine_.buffer(); }
    // Write after begin_step(), which zeroes them.
    float* control() const { return engine_.buffer() + total_ - control_; }
    bool overlapped() const { return overlap_; }
    size_t num_buckets() const { return buckets_.size(); }
    // Zeroes the gradients; only after finish(). step: for the trace.
    void begin_step(long step = 0);
    void set_tracer(Tracer* t) { tracer_ = t; }
    // GradHook: [offset, end) is final; launches the buckets it completes.
    void grads_ready_from(size_t offset) override;
    // Returns the seconds it waited: the exposed communication.
    double finish();
    // Inside all-reduce calls, hidden and exposed.
    double take_comm_seconds();

    const std::vector<Bucket>& buckets() const { return buckets_; }

  private:
    static constexpr int kSpinYields = 2000;  // polls of finish() before it sleeps
    void worker();
    void reduce(const Bucket& b);

    AllreduceEngine& engine_;
    DType wire_;
    bool overlap_;
    size_t total_;  // gradients + control floats
    size_t control_;
    std::vector<Bucket> buckets_;  // in launch order: highest offsets first
    size_t launched_ = 0;
    size_t done_ = 0;
    double comm_seconds_ = 0;
    Tracer* tracer_ = nullptr;
    long step_ = 0;
    bool stop_ = false;
    std::mutex mu_;
    std::condition_variable cv_;
    std::thread thread_;
};

} // namespace dptrain
