// The step's clock: one phase mark drives the watchdog, the Chrome trace and the step breakdown's
// times. Not for: what is printed from those times (reporter.h).
#pragma once

#include "dptrain/io/metrics.h"
#include "dptrain/io/reliability.h"
#include "dptrain/core/trace.h"

namespace dptrain {

class StepClock {
  public:
    // Starts the watchdog (timeout_s 0: none).
    explicit StepClock(double timeout_s) : watchdog_(timeout_s) {}
    // `step` is 1-based. restart: a new step, or a long phase (evaluation, checkpoint) whose
    // watchdog timeout starts over.
    void mark(Phase p, long step, bool restart = false);
    // Commits the step's times; returns the time.
    double end_step();
    // A stop left the step out.
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
    int part_ = -1;  // index from Phase::data; -1: none
    Phase in_ = Phase::setup;  // checkpoint or checkpoint_wait while in one, else setup
    double part_t0_ = 0;
};

} // namespace dptrain
