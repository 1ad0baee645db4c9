// Multiple-choice items (HellaSwag's released form or {context, choices, answer}) scored by a
// language model's log-likelihood of each ending, as lm-evaluation-harness scores them: the items
// spread over the ranks, the scores summed, three accuracies. Used by `dptrain eval --task` and by
// training's evaluations with --eval-task. Not for: the loss over token shards (evaluator.h).
#pragma once

#include "dptrain/comm/communicator.h"
#include "dptrain/data/tokenizer.h"
#include "dptrain/model/decoder.h"
#include "dptrain/model/gpt.h"

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace dptrain {

struct ChoiceItem {
    std::string context;
    std::vector<std::string> endings;  // as scored: HellaSwag's with their leading space
    int label = 0;
};

// Every non-blank line of `path`; throws UserError naming "OPTION PATH:LINE" and what is wrong.
std::vector<ChoiceItem> read_choice_items(const std::string& path, const std::string& option);

struct ChoiceScores {
    std::vector<size_t> at;               // item i's first ending's index in ll and tokens
    std::vector<double> ll, tokens;       // per ending: log-likelihood and token count
    std::vector<std::array<int, 3>> pred;  // per item: the ending chosen by acc, acc_norm, acc_tokens
    // acc: the largest log-likelihood; acc_norm: per character (lm-evaluation-harness);
    // acc_tokens: per token (llm.c's HellaSwag).
    double acc = 0, acc_norm = 0, acc_tokens = 0;
};

// Scores items with a decoder of its own (a key/value cache of one block).
class ChoiceScorer {
  public:
    ChoiceScorer(const GptConfig& cfg, TokenizerPtr tok, std::unique_ptr<Decoder> dec);
    // Throws UserError naming "OPTION PATH, item N" for an item the model cannot score.
    void check(const std::vector<ChoiceItem>& items, const std::string& where) const;
    // Collective: rank r scores items r, r + W, ...; each score summed from one rank and zeros, so
    // every rank gets the same bits on any number of ranks. The ranks agree on a stop signal before
    // each round of W items: 0 when none came, else the signal (and `out` is left incomplete).
    int score(const std::vector<ChoiceItem>& items, const float* params, MpiCommunicator& world, ChoiceScores* out);
    // "the CPU" or "GPU 0".
    std::string where() const { return dec_->where(); }

  private:
    std::pair<double, int> loglikelihood(const std::string& context, const std::string& ending);
    GptConfig cfg_;
    TokenizerPtr tok_;
    std::unique_ptr<Decoder> dec_;
    std::vector<float> logits_;
};

} // namespace dptrain
