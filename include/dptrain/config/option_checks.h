// The checks of parsed options (option_checks.cpp).
#pragma once

#include "dptrain/config/options.h"

namespace dptrain {

// Throws UserError naming the first bad option; fills in what the values imply.
void validate_options(Options& o);

// --global-batch-tokens into grad_accum for this many ranks; throws UserError.
void resolve_grad_accum(Options& o, int ranks);

} // namespace dptrain
