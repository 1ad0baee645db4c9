// Evaluator: forward passes of Task::eval_rows samples, the sums added over the ranks.
// Not for: when to evaluate (the loop).
#include "dptrain/train/evaluator.h"

#include "dptrain/io/reliability.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dptrain {

Evaluator::Evaluator(const Task& task, Model& model, MpiCommunicator& world, long eval_max, bool on_train)
    : task_(task), model_(model), world_(world), eval_max_(eval_max), split_(on_train ? task.train() : task.val()) {
    const int rows = task.eval_rows();
    idx_.resize(rows);
    x_.resize((size_t)rows * split_.floats_per_sample());
    y_.resize((size_t)rows * split_.ints_per_sample());
}

// A non-finite validation input would only move the loss, unseen (a NaN through a ReLU is 0):
// said once, naming the row.
void Evaluator::warn_nonfinite(int n) {
    const int F = split_.floats_per_sample();
    for (long i = 0; F > 0 && i < (long)n * F; ++i)
        if (!std::isfinite(x_[(size_t)i])) {
            std::fprintf(stderr,
                         "dptrain: warning: validation %s, feature %ld = %g: the evaluation counts it as the model "
                         "computes it (`dptrain-data verify DIR` checks every value) (rank %d)\n",
                         split_.where(idx_[(size_t)(i / F)]).c_str(), i % F, (double)x_[(size_t)i], world_.rank());
            warned_ = true;
            return;
        }
}

void Evaluator::set_task(std::vector<ChoiceItem> items, std::unique_ptr<ChoiceScorer> scorer) {
    items_ = std::move(items);
    scorer_ = std::move(scorer);
}

std::optional<EvalStats> Evaluator::run(long step, const float* params) {
    Dataset& val = split_;
    const long N = eval_max_ > 0 ? std::min(eval_max_, val.num_samples()) : val.num_samples();
    const int rank = world_.rank(), W = world_.size(), rows = (int)idx_.size();
    const long lo = N * rank / W, hi = N * (rank + 1) / W;
    // Every rank runs the largest share's batch count (its extra ones empty): the stop check before
    // each is a collective.
    const long batches = ((N + W - 1) / W + rows - 1) / rows;
    double sums[4] = {0, 0, 0, 0};  // loss, correct, samples, bytes of text predicted
    for (long b = 0; b < batches; ++b) {
        int sig = preemption_signal();
        world_.allreduce(&sig, 1, ReduceOp::max);
        if (sig != 0) {
            stop_signal_ = sig;
            return std::nullopt;
        }
        const long s = lo + b * rows;
        if (s >= hi) continue;
        const int n = (int)std::min<long>(rows, hi - s);
        for (int i = 0; i < n; ++i) idx_[i] = s + i;
        val.read(idx_.data(), n, 0, x_.data(), y_.data());
        if (!warned_) warn_nonfinite(n);
        long correct = 0;
        sums[0] += model_.forward(params, task_.batch(x_.data(), y_.data(), n), &correct);
        sums[1] += correct;
        sums[2] += n;
        sums[3] += task_.target_bytes(y_.data(), n);
    }
    world_.allreduce_sum(sums, 4);
    const double terms = std::max(1.0, sums[2] * model_.terms_per_sample());
    EvalStats e;
    e.step = step;
    e.samples = (long)sums[2];
    e.loss = sums[0] / terms;
    e.accuracy = sums[1] / terms;
    if (sums[3] > 0) e.bits_per_byte = sums[0] / (sums[3] * std::log(2.0));
    if (scorer_) {
        if ((stop_signal_ = scorer_->score(items_, params, world_, &scores_)) != 0) return std::nullopt;
        e.acc = scores_.acc, e.acc_norm = scores_.acc_norm, e.acc_tokens = scores_.acc_tokens;
        e.task_items = (long)items_.size();
    }
    return e;
}

} // namespace dptrain
