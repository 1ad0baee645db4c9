// The step loop: batch -> forward -> backward (buckets start as layers finish) -> all-reduce ->
// norm -> update or skip -> step line, evaluation, checkpoint -> stop at the end, on a signal or a
// non-finite step. Every decision after the all-reduce uses values every rank holds alike (summed
// gradients and control floats), so ranks stay in step without another collective.
// Not for: setting anything up (trainer.cpp makes the parts; a test may make its own).
#pragma once

#include "dptrain/backend/device.h"
#include "dptrain/backend/gradient_path.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/comm/topology.h"
#include "dptrain/config/options.h"
#include "dptrain/io/reliability.h"
#include "dptrain/model/model.h"
#include "dptrain/model/op_times.h"
#include "dptrain/model/optim.h"
#include "dptrain/train/checkpoints.h"
#include "dptrain/train/evaluator.h"
#include "dptrain/train/faults.h"
#include "dptrain/train/reporter.h"
#include "dptrain/train/step_clock.h"
#include "dptrain/train/task.h"
#include "dptrain/data/prefetcher.h"

#include <vector>

namespace dptrain {

// What the loop works with; every part outlives the loop.
struct LoopParts {
    const Options& o;
    const Topology& topo;
    MpiCommunicator& world;
    Task& task;
    Model& model;
    std::vector<float>& params;  // the host parameters (what checkpoints hold)
    Optimizer& opt;
    GradientPath& grads;
    Sampler& sampler;
    const LrSchedule& sched;
    const Device& device;
    const FaultPlan& faults;
    StepClock& clock;
    Reporter& report;
    Evaluator& eval;
    Checkpoints& ckpt;
    double peak_gflops = 0;  // summed over the ranks; 0: unknown
    size_t planned_bytes = 0;  // 0: none
    // A GPU step: the plan's GPU and host parts, and the GPU memory in use before the model.
    size_t planned_gpu_bytes = 0;
    size_t planned_host_bytes = 0;
    size_t gpu_used_at_start = 0;
};

class StepLoop {
  public:
    explicit StepLoop(const LoopParts& parts)
        : p_(parts), faults_(parts.faults, parts.topo.rank, parts.grads, parts.clock) {}
    // Collective: trains steps start_step + 1 up to --steps (or --stop-after). Returns kExitOk,
    // kExitPreempted (stopped with a checkpoint) or kExitNonfinite.
    int run(long start_step);

  private:
    // The same on every rank but `loss`.
    struct Step {
        StepControl agreed;  // decided by the ranks together
        bool finite = true;  // the update was applied
        double loss = 0;     // this rank's share of the step's mean loss
        int global_n = 0;
        std::string bad_input;  // where a non-finite input is, if any
    };
    struct Compute {
        StepControl mine;
        double loss_sum = 0;
        int global_n = 0;
        const Batch* last = nullptr;  // the last micro-batch read
        std::string found;            // the first non-finite input of the earlier micro-batches
    };
    // Since the last step line.
    struct Interval {
        double t0 = 0, loss = 0, exposed = 0, other = 0;
        long first = 0, steps = 0, samples = 0;
    };

    void prepare(long start, long end);
    int train(Prefetcher& pf, long start, long end);
    Step step(Prefetcher& pf, long step);
    Compute compute(Prefetcher& pf, long done, bool profiled);
    bool note_stop(StepControl& mine);
    void apply();
    int left_out(long s, long start, bool preempted);
    void account(Prefetcher& pf, const Step& st, long done, long start, long end);
    bool evaluate(long done, bool* usr1);
    void promote(long done);
    void withdraw_oldest();
    void step_line(Prefetcher& pf, double t_end, long done, long start, long end);
    double trace_origin();
    void checkpoint(long done, bool final_one);
    std::string find_nonfinite(const Batch& b);
    std::string first_nonfinite(const std::string& mine);
    int finish(int code, long start, long done, long end);
    RunSummary summarize(int code, long start, long done, long end);

    const LoopParts p_;
    StepFaults faults_;
    Interval iv_;
    double t_run_ = 0, last_norm_ = 0, last_lr_ = 0, final_loss_ = 0;
    long skipped_ = 0;
    long updates_ = 0;  // bias correction counts updates, not steps
    bool evaluated_ = false;
    bool preempted_ = false;  // SIGUSR1 rather than SIGTERM
    bool stop_budget_said_ = false;
    std::string promote_reason_;  // --promote-if held at this step's evaluation: why
    long last_saved_ = -1;  // newest checkpoint's step in --checkpoint-dir (ours or resumed from)
    EvalStats last_eval_;
    OpTimes op_times_;
};

} // namespace dptrain
