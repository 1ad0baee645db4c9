// Evaluation: mean loss and accuracy per loss term over the first --eval-max validation samples
// (0: all), split over the ranks and summed; with --eval-task, the accuracies on its items too.
// Not for: when to evaluate (the step loop).
#pragma once

#include "dptrain/comm/communicator.h"
#include "dptrain/io/metrics.h"
#include "dptrain/model/model.h"
#include "dptrain/train/choice_task.h"
#include "dptrain/train/task.h"

#include <optional>
#include <vector>

namespace dptrain {

class Evaluator {
  public:
    // on_train: the training split instead of the validation one (dptrain eval --split train).
    Evaluator(const Task& task, Model& model, MpiCommunicator& world, long eval_max, bool on_train = false);
    // Collective. Empty when a stop reached any rank: the ranks agree before each batch, so a stop
    // waits one batch, not a whole evaluation; stop_signal() then holds it on every rank.
    // params: on the host, current (GradientPath::download_params first where they live on a GPU).
    std::optional<EvalStats> run(long step, const float* params);
    int stop_signal() const { return stop_signal_; }
    // --eval-task: scored at every run from now on.
    void set_task(std::vector<ChoiceItem> items, std::unique_ptr<ChoiceScorer> scorer);
    bool has_task() const { return scorer_ != nullptr; }

  private:
    const Task& task_;
    Model& model_;
    MpiCommunicator& world_;
    long eval_max_;
    Dataset& split_;
    int stop_signal_ = 0;
    bool warned_ = false;  // a non-finite validation input named once
    void warn_nonfinite(int n);
    std::vector<long> idx_;
    std::vector<float> x_;
    std::vector<int> y_;
    std::vector<ChoiceItem> items_;
    std::unique_ptr<ChoiceScorer> scorer_;
    ChoiceScores scores_;
};

} // namespace dptrain
