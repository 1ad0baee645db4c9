// The gradients' way from backward to the updated parameters, wherever they live: the host path
// (host_gradients.cpp) or the device path (backend/cuda/device_step.h).
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

// What every rank decides alike about a step: floats summed with the gradients, each flag read
// back as "on any rank".
struct StepControl {
    bool stop = false;       // asked to stop (a signal)
    bool nonfinite = false;  // the loss was not finite
    bool preempted = false;  // the stop was a preemption notice (SIGUSR1)
    bool left_out = false;   // a pass left out for a stop: no rank applies the step
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

// The step loop calls, in order:
//   begin_step -> [poison] -> backward(grads(), ..., hook()) -> backward_done -> reduce -> norm
//   -> update (nothing for a skipped step); upload_state at the start, download_state before a
// checkpoint. Sharded, reduce() leaves each rank its shard's sums and update() all-gathers.
class GradientPath {
  public:
    virtual ~GradientPath() = default;

    // The host buffer backward adds into (a resident GPU model does not touch it).
    virtual float* grads() = 0;
    // Set after begin_step() and before backward, whose first bucket carries it.
    void set_control(const StepControl& mine) { pack(mine, control_floats()); }
    StepControl agreed_control() { return unpack(control_floats()); }
    // A new step (1-based): the host path zeroes its gradients; nothing may be in flight.
    virtual void begin_step(long step) = 0;
    // --inject-fault nan, before backward: gradient 0 becomes NaN before the sum (the device path
    // writes it after backward, so no bucket may start during that backward).
    virtual void poison() = 0;
    // Who hears of finished gradients during backward; null: all wait for reduce().
    virtual GradHook* hook() = 0;
    // Waits for backward's queued work, so the phases time what they name.
    virtual void backward_done() = 0;
    // Sums gradients and control floats; returns the seconds waited (communication not hidden).
    virtual double reduce() = 0;
    // sqrt(sum of squared summed gradients).
    virtual double norm() = 0;
    // Clips (when exceeded) and takes step t (1-based); returns the seconds a sharded all-gather waited.
    virtual double update(double norm, double lr, long t) = 0;
    // Seconds in all-reduce calls since the last take, hidden or not.
    virtual double take_comm_seconds() = 0;
    // Checkpoints' host state to where the step runs and back (no-ops on the host path).
    virtual void upload_state() = 0;
    virtual void download_state() = 0;
    // The parameters alone back to the host (an evaluation that reads them there).
    virtual void download_params() = 0;

    // Where the state lives: "GPU" or "host".
    virtual const char* where() const = 0;
    // The banner's "gradients:" line, and notes on how the options were taken.
    virtual std::string describe() const = 0;
    virtual std::vector<std::string> notes() const = 0;
    // The trace's communication track (host path), and the events a step adds there.
    virtual void set_tracer(Tracer* t) = 0;
    virtual size_t traced_per_step() const = 0;
    // Host memory a GPU copies every step (for Device::pin).
    virtual std::vector<std::pair<void*, size_t>> host_buffers() = 0;

  protected:
    virtual float* control_floats() = 0;
};

} // namespace dptrain
