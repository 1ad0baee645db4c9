// The step's clock: one phase mark (data, forward, backward, allreduce, optimizer, eval,
// checkpoint) drives the watchdog that names a stuck rank, the Chrome trace, and the per-phase
// times of the step breakdown. Not for: what is printed from those times (reporter.h).
#pragma once

#include "dptrain/io/metrics.h"
#include "dptrain/io/reliability.h"
#include "dptrain/core/trace.h"

namespace dptrain {

class StepClock {
  public:
    // Starts the watchdog (timeout_s 0: none).
    explicit StepClock(double timeout_s) : watchdog_(timeout_s) {}
    // Enters phase p of `step` (1-based). restart: a new step, or a long phase with a clock of its
    // own (evaluation, checkpoint): the watchdog's timeout starts over.
    void mark(Phase p, long step, bool restart = false);
    // Closes the step's last timed phase and commits the step's times; returns the time.
    double end_step();
    // Ends the step in progress without counting it (a stop left it out).
    void drop_step() {
        part_ = -1;
        times_.drop_step();
    }

    PhaseTimes& times() { return times_; }
    Tracer& tracer() { return tracer_; }
    Watchdog& watchdog() { return watchdog_; }

  private:
    Watchdog watchdog_;
    Tracer tracer_;
    PhaseTimes times_;
    int part_ = -1;  // the timed part of the step in progress (index from Phase::data), -1: none
    Phase in_ = Phase::setup;  // checkpoint or checkpoint_wait while in one, else setup
    double part_t0_ = 0;
};

} // namespace dptrain
