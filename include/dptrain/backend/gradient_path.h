// The gradients' way from backward to the updated parameters, one interface for wherever they
// live: the host path (GradSync's buckets over the AllreduceEngine, then the Optimizer on the host
// parameters; host_gradients.cpp) and the device path (the model's GPU buffers, NCCL buckets
// started during backward, the update kernels; backend/cuda). The step loop calls, in order:
//   begin_step -> [poison] -> backward(grads(), ..., hook()) -> backward_done -> reduce -> norm
//   -> update (or nothing, for a skipped step)
// With the optimizer state sharded (--shard-optimizer, host path), reduce() leaves each rank the
// sums of its shard alone, norm() adds the shards' squares, and update() steps the shard and
// all-gathers the parameters.
// and download_state before a checkpoint, upload_state once the starting point is known.
// Not for: deciding when to step or skip (the loop does, from norm() and the agreed StepControl).
#pragma once

#include "dptrain/model/model.h"

#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

class Optimizer;
class Tracer;

// What every rank must decide alike about a step, agreed at no extra collective: packed into
// floats that reduce() sums over the ranks with the gradients (the host path sends them in the
// first bucket), each flag read back as "on any rank".
struct StepControl {
    bool stop = false;       // asked to stop (a signal)
    bool nonfinite = false;  // the loss was not finite
    bool preempted = false;  // the stop was a launcher's preemption notice (SIGUSR1)
    bool left_out = false;   // this step's forward or backward was left out for a stop: no rank applies it
};
constexpr size_t kControlFloats = 4;
// A non-finite loss is carried as NaN, which any sum keeps; the others as counts above 0.
inline void pack(const StepControl& c, float* f) {
    f[0] = c.stop ? 1.0f : 0.0f;
    f[1] = c.nonfinite ? NAN : 0.0f;
    f[2] = c.preempted ? 1.0f : 0.0f;
    f[3] = c.left_out ? 1.0f : 0.0f;
}
inline StepControl unpack(const float* summed) {
    return StepControl{summed[0] > 0.0f, !std::isfinite(summed[1]), summed[2] > 0.0f, summed[3] > 0.0f};
}

class GradientPath {
  public:
    virtual ~GradientPath() = default;

    // The host buffer backward adds gradients into (a resident GPU model does not touch it).
    virtual float* grads() = 0;
    // This rank's control, summed with the gradients by reduce(): set after begin_step() and
    // whenever it changes before backward (whose first bucket carries it).
    void set_control(const StepControl& mine) { pack(mine, control_floats()); }
    // After reduce(): what the ranks decided together.
    StepControl agreed_control() { return unpack(control_floats()); }
    // A new step (1-based, for the trace): the host path zeroes its gradients; nothing may be in
    // flight.
    virtual void begin_step(long step) = 0;
    // --inject-fault nan, called before backward: this rank's gradient 0 becomes NaN before the
    // sum (on the host at once, before backward's buckets can leave; on the device after backward
    // has written it, with no bucket started during that backward).
    virtual void poison() = 0;
    // Who hears of finished gradients during backward; null: nobody (everything goes in reduce()).
    virtual GradHook* hook() = 0;
    // Backward has been called: waits for the work it queued (a GPU's), so that the phases time
    // what they name.
    virtual void backward_done() = 0;
    // Sums the gradients and the control floats over the ranks; returns the seconds this call
    // waited (the communication backward did not hide).
    virtual double reduce() = 0;
    // sqrt(sum of squared summed gradients).
    virtual double norm() = 0;
    // Clips to the path's max norm (when exceeded) and takes optimizer step t (1-based) at lr.
    // Returns the seconds it waited on other ranks (a sharded state's all-gather of the
    // parameters; 0 where every rank updates all of them).
    virtual double update(double norm, double lr, long t) = 0;
    // Seconds inside all-reduce calls since the last take (hidden and exposed).
    virtual double take_comm_seconds() = 0;
    // The host parameters and optimizer state (what checkpoints hold) to where the step runs, and
    // back; the host path's state is the host's, so both do nothing there.
    virtual void upload_state() = 0;
    virtual void download_state() = 0;

    // Where parameters, gradients and optimizer state live: "GPU" or "host".
    virtual const char* where() const = 0;
    // The banner's "gradients: ..." line, and notes on how the options were taken.
    virtual std::string describe() const = 0;
    virtual std::vector<std::string> notes() const = 0;
    // Each bucket's all-reduce on the trace's communication track (the host path records them),
    // and how many such events a step adds.
    virtual void set_tracer(Tracer* t) = 0;
    virtual size_t traced_per_step() const = 0;
    // Host memory copied to or from a GPU every step (page-locked by Device::pin).
    virtual std::vector<std::pair<void*, size_t>> host_buffers() = 0;

  protected:
    // The kControlFloats floats reduce() sums with the gradients.
    virtual float* control_floats() = 0;
};

} // namespace dptrain
