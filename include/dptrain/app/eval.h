// `dptrain eval`: a model (checkpoint, run directory or Hugging Face export) evaluated without
// training: its loss, perplexity and bits per byte over token shards, and its accuracy on
// multiple-choice items scored by log-likelihood, the work spread over the ranks.
// Not for: evaluation during training (train/evaluator.h) or serving (infer/).
#pragma once

#include "dptrain/comm/topology.h"

namespace dptrain {

// argv[0] is "eval". Collective over topo.world. Returns 0, 2 for a bad option or file, 75 when a
// stop signal cut it short.
int run_eval(int argc, char** argv, const Topology& topo);

} // namespace dptrain
