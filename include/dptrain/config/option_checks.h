// The checks of parsed options (option_checks.cpp).
#pragma once

#include "dptrain/config/options.h"

namespace dptrain {

// Throws UserError naming the first bad option; fills in what the values imply.
void validate_options(Options& o);

// --promote-if's conditions, all of which an evaluation must meet.
struct PromoteCondition {
    std::string metric;  // val_loss | val_accuracy | val_bits_per_byte | acc | acc_norm | acc_tokens
    std::string op;      // <= < >= >
    double value = 0;
    std::string value_text;  // as given
    bool holds(double v) const;
};
// "val_loss<=1.5,val_accuracy>=0.4"; throws UserError naming the part that is not one.
std::vector<PromoteCondition> parse_promote_if(const std::string& text);

// --global-batch (into batch_size and grad_accum) or --global-batch-tokens (into grad_accum) for
// this many ranks; throws UserError naming the rank counts that can keep it.
void resolve_grad_accum(Options& o, int ranks);
// The rank counts up to `most` that can keep --global-batch N: its divisors.
std::vector<int> global_batch_rank_counts(long global_batch, int most);
// Those up to 4096, as messages list them: "1 2 4 5 8 10 20 40".
std::string global_batch_rank_counts_text(long global_batch);

} // namespace dptrain
