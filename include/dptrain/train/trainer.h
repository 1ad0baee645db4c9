// The trainer: the set-up phases every rank runs in one order (trainer.cpp lists them), then the
// step loop (loop.h). Not for: the parts it assembles (task, checkpoints, reporter, step clock,
// evaluator: a header each in this folder).
#pragma once

#include "dptrain/comm/topology.h"
#include "dptrain/config/options.h"

namespace dptrain {

// Collective over topo.world. Returns the exit code: 0 done, 2 set-up user error (printed once),
// 4 non-finite with --on-nonfinite stop, 75 signalled (checkpoint written). Later errors: fatal().
int run_training(const Options& opts, const Topology& topo);

} // namespace dptrain
