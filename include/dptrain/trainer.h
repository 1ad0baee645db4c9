// The training loop, and nothing else knows the loop: set-up (data, model, resume) agreed on by
// every rank, then steps of prefetch -> forward -> backward -> all-reduce -> clip -> optimizer,
// with step lines, evaluation and checkpoints at their intervals.
#pragma once

#include "dptrain/options.h"
#include "dptrain/topology.h"

namespace dptrain {

// Collective over topo.world. Returns the process exit code: 0 when training finished, 2 when
// set-up failed with a user error (printed once). Errors after set-up end the job through fatal().
int run_training(const Options& opts, const Topology& topo);

} // namespace dptrain
