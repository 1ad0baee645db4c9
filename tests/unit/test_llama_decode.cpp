// LlamaDecoder against Llama::forward: the key/value cache (of the key/value heads only) gives the
// whole window's logits position by position, for a prompt at once or a token a call; a row's bits
// are the same alone or batched; greedy decoding picks the tokens of recomputing the window.
// Tolerance 2e-5 absolute, as test_decode.cpp's: the same operations on differently shaped products.
#include "../decode_batching.h"
#include "helpers.h"

#include "dptrain/model/decoder.h"
#include "dptrain/model/llama.h"
#include "dptrain/model/llama_decoder.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

using namespace dptrain;
using testing::randn;

namespace {

GptConfig llama_config(int V, int T) {
    GptConfig c;
    c.arch = DecoderArch::llama;
    c.vocab_size = V;
    c.block_size = T;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.n_embd = 32;
    c.ffn_hidden = 40;
    c.tie_embeddings = false;
    c.rope_theta = 500;  // positions a window apart turn visibly
    return c;
}

std::vector<float> params_of(const Llama& m, uint64_t seed) {
    std::vector<float> p(m.num_params());
    m.init(p.data(), seed);
    auto noise = randn(p.size(), seed + 1, 0.2f);
    for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
    return p;
}

} // namespace

TEST_CASE("LlamaDecoder: the key/value cache gives the whole window's logits, position by position", "[llama]") {
    const int V = 23, T = kDecodePromptRows + 8;
    Llama m(llama_config(V, T), 1);
    const auto p = params_of(m, 5);
    std::vector<int> tokens(T);
    for (int t = 0; t < T; ++t) tokens[t] = (t * 7 + 3) % V;
    const auto want = testing::window_logits(m, p.data(), tokens);
    LlamaDecoder d(m.config());
    d.reserve(2, T);
    d.set_params(p.data());
    // The cache holds the 2 key/value heads, not the 4 query heads: (L, slots, T, KV * hs), k and v.
    CHECK(d.cache_bytes() == 2 * 2 * 2 * (size_t)T * 2 * 8 * sizeof(float));
    std::vector<float> got((size_t)T * V);
    std::vector<int> slot(T, 0), pos(T);
    std::iota(pos.begin(), pos.end(), 0);
    SECTION("the whole prompt in one call") {
        d.decode(tokens.data(), slot.data(), pos.data(), T, got.data());
        CHECK(testing::max_abs_diff(got.data(), want.data(), got.size()) < 2e-5);
        const int rows[2] = {T - 1, 3};
        std::vector<float> two(2 * (size_t)V);
        d.decode(tokens.data(), slot.data(), pos.data(), T, two.data(), rows, 2);
        CHECK(testing::max_abs_diff(two.data(), want.data() + (size_t)(T - 1) * V, V) < 2e-5);
        CHECK(testing::max_abs_diff(two.data() + V, want.data() + 3 * (size_t)V, V) < 2e-5);
    }
    SECTION("a prompt of 5, then one token a call, beside another sequence") {
        std::vector<int> other(T);
        for (int t = 0; t < T; ++t) other[t] = (t * 5 + 1) % V;
        const auto want2 = testing::window_logits(m, p.data(), other);
        std::vector<float> got2((size_t)T * V);
        d.decode(tokens.data(), slot.data(), pos.data(), 5, got.data());
        for (int t = 5; t < T; ++t) {
            const int tok[2] = {tokens[t], other[t - 5]}, sl[2] = {0, 1}, ps[2] = {t, t - 5};
            float row[2 * 23];
            d.decode(tok, sl, ps, 2, row);
            std::copy(row, row + V, got.begin() + (size_t)t * V);
            std::copy(row + V, row + 2 * V, got2.begin() + (size_t)(t - 5) * V);
        }
        CHECK(testing::max_abs_diff(got.data(), want.data(), got.size()) < 2e-5);
        CHECK(testing::max_abs_diff(got2.data(), want2.data(), (size_t)(T - 5) * V) < 2e-5);
    }
}

TEST_CASE("LlamaDecoder: greedy decoding picks exactly the tokens of recomputing the window", "[llama]") {
    const int V = 29, T = 24;
    Llama m(llama_config(V, T), 1);
    const auto p = params_of(m, 9);
    const auto d = make_cpu_decoder(m.config());
    d->reserve(1, T);
    d->set_params(p.data());
    std::vector<float> logits((size_t)T * V);
    std::vector<int> slot(T, 0), pos(T);
    std::iota(pos.begin(), pos.end(), 0);
    for (int prompt_len : {1, 3, 10}) {
        std::vector<int> prompt(prompt_len);
        for (int i = 0; i < prompt_len; ++i) prompt[i] = (i * 11 + prompt_len) % V;
        std::vector<int> a = prompt;
        while ((int)a.size() < T) {
            auto z = testing::window_logits(m, p.data(), a);
            const float* last = z.data() + (a.size() - 1) * V;
            a.push_back((int)(std::max_element(last, last + V) - last));
        }
        std::vector<int> b = prompt;
        d->decode(b.data(), slot.data(), pos.data(), prompt_len, logits.data());
        const float* z = logits.data() + (size_t)(prompt_len - 1) * V;
        while ((int)b.size() < T) {
            b.push_back((int)(std::max_element(z, z + V) - z));
            if ((int)b.size() == T) break;
            const int at = (int)b.size() - 1;
            d->decode(&b[at], &slot[0], &pos[at], 1, logits.data());
            z = logits.data();
        }
        INFO("prompt of " << prompt_len);
        CHECK(a == b);
        CHECK(std::set<int>(a.begin() + prompt_len, a.end()).size() >= 2);
    }
}

TEST_CASE("LlamaDecoder: a row's logits are the same bits alone or among other sequences' rows", "[llama]") {
    for (const auto& [prompt, fellow] : {std::pair{3, 2}, std::pair{kDecodePromptRows + 5, kDecodePromptRows},
                                         std::pair{kDecodePromptRows, 3}}) {
        INFO("prompt " << prompt << " beside " << fellow);
        const int T = prompt + 8;
        GptConfig c = llama_config(31, T);
        c.n_embd = 36;  // head size 9 is odd: rotary pairs need an even one
        c.n_head = 2;
        c.n_kv_head = 1;
        const auto p = params_of(Llama(c, 1), 13);
        for (Precision w : {Precision::fp32, Precision::bf16}) {
            const auto d = make_cpu_decoder(c, w);
            d->set_params(p.data());
            CHECK(decode_batching::rows_batched_differently(*d, c.vocab_size, T, prompt, fellow) == 0);
        }
    }
}
