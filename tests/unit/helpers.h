// Shared helpers of the unit tests: temporary directories and small shard sets.
#pragma once

#include "dptrain/model/gpt.h"
#include "dptrain/data/h5.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace testing {

// n normal draws times scale, from a counter-based stream of `seed`.
std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f);

// B random windows of T + 1 tokens below V, packed (stride T + 1) in `tokens`, which the batch
// points into.
dptrain::ModelBatch random_windows(std::vector<int>& tokens, int B, int T, int V, uint64_t seed);

// Elements of `grad` (every stride-th) that disagree with central finite differences of `loss`
// in x: |analytic - numeric| > 2e-3 + 2e-2 |numeric|, step h. Prints the first few.
int check_grad(std::vector<float>& x, const std::vector<float>& grad, const std::function<double()>& loss, float h,
               size_t stride = 1);

// Two language models (GPTs, Llamas) of one layout, T positions and V tokens, that compute
// differently (precision, attention), from the same parameters on one random batch of B windows: their first losses differ yet agree within
// first_tol (relative); each gradient tensor's cosine similarity with a's exceeds min_cosine; over
// 50 AdamW steps each the losses agree within curve_tol and both fall below 0.7 of the first.
void check_models_agree(dptrain::Model& a, dptrain::Model& b, int T, int V, int B, uint64_t seed, double first_tol,
                        double min_cosine, double curve_tol);
inline void check_gpts_agree(dptrain::Gpt& a, dptrain::Gpt& b, int B, uint64_t seed, double first_tol,
                             double min_cosine, double curve_tol) {
    check_models_agree(a, b, a.config().block_size, a.config().vocab_size, B, seed, first_tol, min_cosine, curve_tol);
}

// Whole-window logits of tokens[0..n) (n <= T) by m's forward, a row per position.
std::vector<float> window_logits(dptrain::LanguageModel& m, const float* params, const std::vector<int>& tokens);
// Largest |a[i] - b[i]| over n values.
double max_abs_diff(const float* a, const float* b, size_t n);

// A fresh empty directory under /tmp.
std::string temp_dir(const std::string& tag);

// Writes DIR/SPLIT-i-of-S.h5 shards of the given sizes; features of global row r are
// (r, r + 0.5, ...) and labels r % classes, so reads can be checked by value.
void write_shards(const std::string& dir, const std::string& split, const std::vector<long>& rows, int dim,
                  int classes);

} // namespace testing
