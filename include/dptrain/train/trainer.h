// The trainer: the set-up phases every rank runs in one order (trainer.cpp lists them), then the
// step loop (loop.h). The components it puts together have a header each in this folder: the
// task (what is trained on), checkpoints (resume and save), the reporter (what is printed and
// recorded), the step clock (phases, watchdog, trace), the evaluator and the loop.
#pragma once

#include "dptrain/comm/topology.h"
#include "dptrain/config/options.h"

namespace dptrain {

// Collective over topo.world. Returns the process exit code: 0 when training finished, 2 when
// set-up failed with a user error (printed once), 4 after a non-finite step with --on-nonfinite
// stop, 75 when a rank was signalled (stopped with a checkpoint). Errors after set-up end the job
// through fatal().
int run_training(const Options& opts, const Topology& topo);

} // namespace dptrain
