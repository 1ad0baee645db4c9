// Whether a Decoder gives a sequence's rows the same logits batched as alone: one check for the
// CPU's GptDecoder (tests/unit/test_decode.cpp) and the GPU's CudaGptDecoder (tests/cuda/test_cuda_decode.cpp).
// Not for: how close the logits are to the whole-window forward's (those tests' own).
#pragma once

#include "dptrain/model/decoder.h"

#include <cstring>
#include <vector>

namespace decode_batching {

// How many of a sequence's rows get other logits batched than alone, on a decoder of vocabulary
// V and block T whose parameters are set (reserved here: 8 slots). Alone: a prompt of `prompt`
// tokens in slot 0, then one token a call; every row's logits kept. Batched: the same sequence in
// slot 3, its prompt in one call between prompts of `fellow` tokens in slots 1 and 5 (whose last
// logits are checked against each alone too), then each of its tokens with 0 to 6 rows of other
// slots around it (before and after it), only its row's logits asked for.
inline long rows_batched_differently(dptrain::Decoder& d, int V, int T, int prompt, int fellow) {
    d.reserve(8, prompt + 2 * fellow);
    std::vector<int> seq(T);
    for (int t = 0; t < T; ++t) seq[t] = (t * 7 + 2) % V;
    std::vector<float> alone((size_t)T * V), one((size_t)3 * V);
    std::vector<int> pos(T);
    for (int t = 0; t < T; ++t) pos[t] = t;
    const std::vector<int> zeros(T, 0);
    d.decode(seq.data(), zeros.data(), pos.data(), prompt, alone.data());
    for (int t = prompt; t < T; ++t) d.decode(&seq[t], zeros.data(), &pos[t], 1, alone.data() + (size_t)t * V);
    int next[8] = {0};
    std::vector<int> tok, slot, ps;
    auto add = [&](int s, int token) { tok.push_back(token), slot.push_back(s), ps.push_back(next[s]++); };
    for (int t = 0; t < fellow; ++t) add(1, (t * 5 + 1) % V);
    for (int t = 0; t < prompt; ++t) add(3, seq[t]);
    for (int t = 0; t < fellow; ++t) add(5, (t * 3 + 4) % V);
    const int last_rows[3] = {fellow - 1, fellow + prompt - 1, 2 * fellow + prompt - 1};
    d.decode(tok.data(), slot.data(), ps.data(), (int)tok.size(), one.data(), last_rows, 3);
    long differ = std::memcmp(&one[V], &alone[(size_t)(prompt - 1) * V], V * sizeof(float)) != 0;
    // The fellow prompts' last logits too, each against that prompt alone (in slot 0, done with).
    for (int f = 0; f < 2; ++f) {
        std::vector<float> last(V);
        const int first = f == 0 ? 0 : fellow + prompt, end = fellow - 1;
        d.decode(&tok[first], zeros.data(), pos.data(), fellow, last.data(), &end, 1);
        differ += std::memcmp(&one[(size_t)2 * f * V], last.data(), V * sizeof(float)) != 0;
    }
    for (int t = prompt; t < T; ++t) {
        tok.clear(), slot.clear(), ps.clear();
        const int others = t % 7, before = others / 2;
        int row = -1;
        for (int k = 0, s = 0; k <= others; ++k) {
            if (k == before) {
                row = (int)tok.size();
                add(3, seq[t]);
                continue;
            }
            s = s == 2 ? 4 : s + 1;  // slots 1, 2, 4, 5, 6, 7: not 3
            add(s, (t * 3 + s) % V);
        }
        d.decode(tok.data(), slot.data(), ps.data(), (int)tok.size(), one.data(), &row, 1);
        differ += std::memcmp(one.data(), &alone[(size_t)t * V], V * sizeof(float)) != 0;
    }
    return differ;
}

} // namespace decode_batching
