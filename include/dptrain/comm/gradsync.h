// Gradient averaging with buckets and overlap. The flat gradient buffer (owned by the
// AllreduceEngine) is cut into buckets of about --bucket-mb (cut_buckets), in the order backward
// finishes the parameters (last layer first). Backward reports progress through GradHook; each bucket whose
// gradients are all final is handed to a communication thread at once, so its all-reduce runs
// while backward computes the layers below. The optimizer waits (finish) only for what is still
// in flight; that wait is the exposed communication time.
// Not for: the algorithm of one all-reduce (allreduce.h).
#pragma once

#include "dptrain/comm/allreduce.h"
#include "dptrain/comm/buckets.h"
#include "dptrain/model/model.h"
#include "dptrain/core/trace.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace dptrain {

class GradSync : public GradHook {
  public:
    // overlap = false: every bucket is reduced by finish(), on the calling thread. `control`
    // extra floats after the gradients are summed with them (in the first bucket to go): the
    // trainer passes per-step flags there (a stop request, a non-finite loss) at no extra cost.
    GradSync(AllreduceEngine& engine, const ParamLayout& layout, double bucket_mb, DType wire, bool overlap,
             size_t control = 0);
    ~GradSync() override;

    float* grads() const { return engine_.buffer(); }
    // The control floats, right after the gradients; write them after begin_step().
    float* control() const { return engine_.buffer() + total_ - control_; }
    bool overlapped() const { return overlap_; }
    size_t num_buckets() const { return buckets_.size(); }
    // Zeroes the gradients for a new step (1-based number, for the trace). Nothing may be in
    // flight (finish() was called).
    void begin_step(long step = 0);
    // Records each bucket's all-reduce (bytes, algorithm) on the tracer's communication track.
    void set_tracer(Tracer* t) { tracer_ = t; }
    // GradHook: gradients [offset, end) are final; launches the buckets they complete.
    void grads_ready_from(size_t offset) override;
    // Launches what is left and waits for every bucket. Returns the seconds this call waited
    // (the exposed communication).
    double finish();
    // Seconds spent inside all-reduce calls since the last take (hidden + exposed).
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
    size_t launched_ = 0;          // buckets handed to the worker (or reduced, without overlap)
    size_t done_ = 0;              // buckets reduced
    double comm_seconds_ = 0;
    Tracer* tracer_ = nullptr;
    long step_ = 0;
    bool stop_ = false;
    std::mutex mu_;
    std::condition_variable cv_;
    std::thread thread_;
};

} // namespace dptrain
