// The checks of parsed options (option_checks.cpp).
#pragma once

#include "dptrain/config/options.h"

namespace dptrain {

// Throws UserError naming the first option whose value is out of range or conflicts with another;
// fills in what the values imply (hidden_sizes, resume_mode, the checkpoint and metrics paths).
void validate_options(Options& o);

} // namespace dptrain
