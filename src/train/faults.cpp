// The fault hook's actions (train/faults.h).
#include "dptrain/train/faults.h"

#include <chrono>
#include <csignal>
#include <thread>

namespace dptrain {

void StepFaults::at(FaultPoint where, long step, int micro, int micros) {
    using K = Fault::Kind;
    const bool first = micro == 0, last = micro == micros - 1;
    switch (where) {
    case FaultPoint::step_start:
        if (plan_.has(rank_, step, K::kill)) raise(SIGKILL);
        if (plan_.has(rank_, step, K::hang)) {
            clock_.mark(Phase::forward, step);
            for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
        }
        break;
    case FaultPoint::forward_done:
        if (plan_.slow(rank_, step)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (first && plan_.has(rank_, step, K::term_in_forward)) raise(SIGTERM);
        break;
    case FaultPoint::backward_start:
        if (first && plan_.has(rank_, step, K::nan)) grads_.poison();
        break;
    case FaultPoint::backward_done:
        if (last && plan_.has(rank_, step, K::term_in_backward)) raise(SIGTERM);
        break;
    case FaultPoint::checkpoint_start:
        if (rank_ == 0 && plan_.slow(0, step, K::slow_checkpoint)) std::this_thread::sleep_for(std::chrono::seconds(3));
        break;
    }
}

} // namespace dptrain
