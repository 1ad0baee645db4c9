// Evaluation on the validation split: mean loss and accuracy per loss term (a sample, or a token of
// a window) over the first --eval-max validation samples (all: 0), split evenly over the ranks and
// summed. Buffers are allocated once. Not for: when to evaluate (the step loop).
#pragma once

#include "dptrain/comm/communicator.h"
#include "dptrain/io/metrics.h"
#include "dptrain/model/model.h"
#include "dptrain/train/task.h"

#include <optional>
#include <vector>

namespace dptrain {

class Evaluator {
  public:
    Evaluator(const Task& task, Model& model, MpiCommunicator& world, long eval_max);
    // Collective over the world: the model at `params` on the validation samples. Empty when a
    // stop signal reached a rank meanwhile (the ranks agree before each batch: a stop waits for one
    // batch, not a whole evaluation, and the checkpoint comes within the launcher's grace); the
    // signal is then stop_signal() on every rank.
    std::optional<EvalStats> run(long step, const float* params);
    int stop_signal() const { return stop_signal_; }

  private:
    const Task& task_;
    Model& model_;
    MpiCommunicator& world_;
    long eval_max_;
    int stop_signal_ = 0;
    bool warned_ = false;  // a non-finite validation input named once
    void warn_nonfinite(int n);
    std::vector<long> idx_;
    std::vector<float> x_;
    std::vector<int> y_;
};

} // namespace dptrain
