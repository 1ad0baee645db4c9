// What every device's decoder shares: the prompt runs that keep a row's bits the same alone or
// batched, a row's log-probabilities, and the CPU's factory.
#include "dptrain/model/decoder.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/model/gpt_decoder.h"
#include "dptrain/model/llama_decoder.h"

#include <algorithm>
#include <cmath>

namespace dptrain {

void decode_prompt_runs(const int* slot, int n, std::vector<std::pair<int, int>>& runs) {
    runs.clear();
    for (int begin = 0, end; begin < n; begin = end) {
        for (end = begin + 1; end < n && slot[end] == slot[begin];) ++end;
        if (end - begin >= kDecodePromptRows) runs.emplace_back(begin, end);
    }
}

void Decoder::decode_pick(const int* tok, const int* slot, const int* pos, int n, const int* out_rows, int n_out,
                          const TokenDraw* draws, int* ids, float* logits) {
    const int V = vocab_size(), m = out_rows ? n_out : n;
    if (!logits) {
        if (pick_logits_.size() < (size_t)m * V) pick_logits_.resize((size_t)m * V);
        logits = pick_logits_.data();
    }
    decode(tok, slot, pos, n, logits, out_rows, n_out);
    if (pick_probs_.size() < (size_t)V) pick_probs_.resize(V), pick_order_.resize(V);
    for (int r = 0; r < m; ++r)
        ids[r] = cpu::pick_token(logits + (size_t)r * V, draws[r], pick_probs_.data(), pick_order_.data());
}

TokenLogprob token_logprob(const float* logits, int V, int drawable, int token, int top) {
    float most = logits[0];
    for (int i = 1; i < V; ++i) most = std::max(most, logits[i]);
    double sum = 0;
    for (int i = 0; i < V; ++i) sum += std::exp((double)(logits[i] - most));
    const float log_z = most + (float)std::log(sum);
    TokenLogprob t;
    t.token = token;
    t.logprob = logits[token] - log_z;
    top = std::min(top, drawable);
    for (int i = 0; i < drawable; ++i) {  // the few largest, by insertion: top is at most 5
        const float lp = logits[i] - log_z;
        if ((int)t.top.size() == top && (top == 0 || lp <= t.top.back().second)) continue;
        auto at = std::find_if(t.top.begin(), t.top.end(), [&](const auto& e) { return lp > e.second; });
        t.top.insert(at, {i, lp});
        if ((int)t.top.size() > top) t.top.pop_back();
    }
    return t;
}

std::unique_ptr<Decoder> make_cpu_decoder(const GptConfig& cfg, Precision weights) {
    if (cfg.arch == DecoderArch::llama) return std::make_unique<LlamaDecoder>(cfg, weights);
    return std::make_unique<GptDecoder>(cfg, weights);
}

} // namespace dptrain
