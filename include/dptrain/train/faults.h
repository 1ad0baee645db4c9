// --inject-fault's actions during training, for tests: one hook the loop calls at named points, so
// the loop reads as the algorithm and a run without faults does nothing. Not for: parsing the plan
// (io/reliability.h) or the readers' faults (the Prefetcher's).
#pragma once

#include "dptrain/backend/gradient_path.h"
#include "dptrain/io/reliability.h"
#include "dptrain/train/step_clock.h"

namespace dptrain {

enum class FaultPoint {
    step_start,        // kill (SIGKILL), hang (for ever, in the forward phase)
    forward_done,      // slow (20 ms a micro-batch); term-in-forward (SIGTERM, first micro-batch)
    backward_start,    // nan (this rank's gradient 0 poisoned, first micro-batch)
    backward_done,     // term-in-backward (SIGTERM, last micro-batch)
    checkpoint_start,  // slow-checkpoint (rank 0 takes 3 s longer)
};

class StepFaults {
  public:
    StepFaults(const FaultPlan& plan, int rank, GradientPath& grads, StepClock& clock)
        : plan_(plan), rank_(rank), grads_(grads), clock_(clock) {}
    // At `where` of step `step` (1-based), micro-batch `micro` of `micros`.
    void at(FaultPoint where, long step, int micro = 0, int micros = 1);
    // Whether rank 0 corrupts the checkpoint of `step` after writing it.
    bool corrupts_checkpoint(long step) const { return plan_.has(0, step, Fault::Kind::corrupt_checkpoint); }

  private:
    const FaultPlan& plan_;
    int rank_;
    GradientPath& grads_;
    StepClock& clock_;
};

} // namespace dptrain
