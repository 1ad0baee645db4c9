// The checks of parsed options (option_checks.cpp).
#pragma once

#include "dptrain/config/options.h"

namespace dptrain {

// Throws UserError naming the first option whose value is out of range or conflicts with another;
// fills in what the values imply (hidden_sizes, resume_mode, the checkpoint and metrics paths).
void validate_options(Options& o);

// --global-batch-tokens: sets grad_accum to the micro-batches a step needs on this many ranks;
// throws UserError when it is given with --grad-accum, or does not divide into micro-batches.
void resolve_grad_accum(Options& o, int ranks);

} // namespace dptrain
