// StepClock: the watchdog's phase, the trace's events and the phase times from one mark.
// Not for: printing them (reporter.cpp).
#include "dptrain/train/step_clock.h"

#include "dptrain/core/clock.h"

namespace dptrain {

static_assert((int)Phase::optimizer - (int)Phase::data + 1 == kStepPhases, "step phases and Phase disagree");

void StepClock::mark(Phase p, long step, bool restart) {
    if (restart) watchdog_.begin(step, p);
    else watchdog_.phase(p);
    const double t = now_seconds();
    if (part_ >= 0) times_.add(part_, t - part_t0_);
    if (in_ != Phase::setup) times_.add_checkpoint(in_ == Phase::checkpoint_wait, t - part_t0_);
    if (p == Phase::checkpoint) times_.count_checkpoint();
    const int i = (int)p - (int)Phase::data;
    part_ = i >= 0 && i < kStepPhases ? i : -1;
    in_ = p == Phase::checkpoint || p == Phase::checkpoint_wait ? p : Phase::setup;
    part_t0_ = t;
    if (p == Phase::done) tracer_.close();
    else tracer_.mark(phase_name(p), step);
}

double StepClock::end_step() {
    const double t = now_seconds();
    if (part_ >= 0) times_.add(part_, t - part_t0_);
    part_ = -1;
    times_.end_step();
    tracer_.close();  // ends the last phase here, not after a step line's collectives
    return t;
}

} // namespace dptrain
