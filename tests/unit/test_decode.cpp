// Incremental decoding: attention_decode against attention_forward, and GptDecoder (key/value
// cache) against the whole-window forward: the same logits up to rounding, position by position,
// for a prompt at once or one token at a time, for sequences sharing a call; and greedy decoding
// that picks exactly the tokens of recomputing the window, for several prompts and lengths up to
// the block size. Tolerance 2e-5 absolute on logits of order 1: the two paths run the same
// operations on differently shaped products (sgemm rows 1..T against T), so only their rounding
// differs.
#include "../decode_batching.h"
#include "helpers.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/model/decoder.h"
#include "dptrain/model/gpt.h"
#include "dptrain/model/gpt_decoder.h"

#include <catch2/catch.hpp>

#include <stdexcept>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <vector>

using namespace dptrain;
using testing::randn;

namespace {

GptConfig config(int V, int T) {
    GptConfig c;
    c.vocab_size = V;
    c.block_size = T;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 32;
    return c;
}

// Parameters far from init's near-uniform logits, so that greedy choices have margins.
std::vector<float> params_of(const Gpt& g, uint64_t seed) {
    std::vector<float> p(g.num_params());
    g.init(p.data(), seed);
    auto noise = randn(p.size(), seed + 1, 0.2f);
    for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
    return p;
}

} // namespace

TEST_CASE("attention_decode: a prompt at once and one row at a time equal attention_forward", "[ops][gpt]") {
    const int T = 9, C = 16, NH = 4;
    auto qkv = randn((size_t)T * 3 * C, 21);
    std::vector<float> want((size_t)T * C), att((size_t)NH * T * T);
    cpu::attention_forward(want.data(), att.data(), qkv.data(), 1, T, C, NH);
    std::vector<float> k(2 * (size_t)T * C), v(2 * (size_t)T * C), got((size_t)T * C);
    std::vector<int> slot(T, 1), pos(T);
    std::iota(pos.begin(), pos.end(), 0);
    cpu::attention_decode(got.data(), k.data(), v.data(), qkv.data(), slot.data(), pos.data(), T, T, C, NH);
    CHECK(testing::max_abs_diff(got.data(), want.data(), got.size()) < 1e-5);
    // Row by row into slot 0: each sees the cache of the rows before it.
    for (int t = 0; t < T; ++t) {
        const int s = 0;
        cpu::attention_decode(got.data() + (size_t)t * C, k.data(), v.data(), qkv.data() + (size_t)t * 3 * C, &s,
                              &pos[t], 1, T, C, NH);
    }
    CHECK(testing::max_abs_diff(got.data(), want.data(), got.size()) < 1e-5);
}

TEST_CASE("GptDecoder: the key/value cache gives the whole window's logits, position by position", "[gpt]") {
    // A window long enough that the whole prompt is one product (kDecodePromptRows).
    const int V = 23, T = kDecodePromptRows + 8;
    Gpt g(config(V, T), 1);
    const auto p = params_of(g, 5);
    std::vector<int> tokens(T);
    for (int t = 0; t < T; ++t) tokens[t] = (t * 7 + 3) % V;
    const auto want = testing::window_logits(g, p.data(), tokens);
    GptDecoder d(g.config());
    d.reserve(2, T);
    d.set_params(p.data());
    std::vector<float> got((size_t)T * V);
    std::vector<int> slot(T, 0), pos(T);
    std::iota(pos.begin(), pos.end(), 0);
    SECTION("the whole prompt in one call") {
        d.decode(tokens.data(), slot.data(), pos.data(), T, got.data());
        CHECK(testing::max_abs_diff(got.data(), want.data(), got.size()) < 2e-5);
        // Only some rows' logits: the last and row 3, in that order.
        const int rows[2] = {T - 1, 3};
        std::vector<float> two(2 * (size_t)V);
        d.decode(tokens.data(), slot.data(), pos.data(), T, two.data(), rows, 2);
        CHECK(testing::max_abs_diff(two.data(), want.data() + (size_t)(T - 1) * V, V) < 2e-5);
        CHECK(testing::max_abs_diff(two.data() + V, want.data() + 3 * (size_t)V, V) < 2e-5);
        // More rows asked for than the call has, or a row outside it: refused.
        std::vector<int> many(T + 1, 0);
        std::vector<float> big((size_t)(T + 1) * V);
        CHECK_THROWS_AS(d.decode(tokens.data(), slot.data(), pos.data(), T, big.data(), many.data(), T + 1),
                        std::invalid_argument);
        const int outside = T;
        CHECK_THROWS_AS(d.decode(tokens.data(), slot.data(), pos.data(), T, two.data(), &outside, 1),
                        std::invalid_argument);
    }
    SECTION("a prompt of 5, then one token a call") {
        d.decode(tokens.data(), slot.data(), pos.data(), 5, got.data());
        for (int t = 5; t < T; ++t) d.decode(&tokens[t], &slot[t], &pos[t], 1, got.data() + (size_t)t * V);
        CHECK(testing::max_abs_diff(got.data(), want.data(), got.size()) < 2e-5);
    }
    SECTION("two sequences in one call, each at its own position") {
        std::vector<int> other(T);
        for (int t = 0; t < T; ++t) other[t] = (t * 5 + 1) % V;
        const auto want2 = testing::window_logits(g, p.data(), other);
        std::vector<float> got2((size_t)T * V);
        d.decode(tokens.data(), slot.data(), pos.data(), 3, got.data());  // slot 0: positions 0..2
        for (int t = 3; t < T; ++t) {
            // Row 0: slot 0 at position t; row 1: slot 1 at position t - 3.
            const int tok[2] = {tokens[t], other[t - 3]}, sl[2] = {0, 1}, ps[2] = {t, t - 3};
            float row[2 * 23];
            d.decode(tok, sl, ps, 2, row);
            std::copy(row, row + V, got.begin() + (size_t)t * V);
            std::copy(row + V, row + 2 * V, got2.begin() + (size_t)(t - 3) * V);
        }
        CHECK(testing::max_abs_diff(got.data(), want.data(), got.size()) < 2e-5);
        CHECK(testing::max_abs_diff(got2.data(), want2.data(), (size_t)(T - 3) * V) < 2e-5);
    }
    SECTION("position 0 starts a slot afresh") {
        d.decode(tokens.data(), slot.data(), pos.data(), T, got.data());
        std::vector<int> other(T, 2);
        d.decode(other.data(), slot.data(), pos.data(), 4, got.data());
        const auto want2 = testing::window_logits(g, p.data(), std::vector<int>(4, 2));
        CHECK(testing::max_abs_diff(got.data(), want2.data(), want2.size()) < 2e-5);
    }
}

TEST_CASE("GptDecoder: greedy decoding picks exactly the tokens of recomputing the window", "[gpt]") {
    const int V = 29, T = 24;
    Gpt g(config(V, T), 1);
    const auto p = params_of(g, 9);
    GptDecoder d(g.config());
    d.reserve(1, T);
    d.set_params(p.data());
    std::vector<float> logits((size_t)T * V);
    std::vector<int> slot(T, 0), pos(T);
    std::iota(pos.begin(), pos.end(), 0);
    for (int prompt_len : {1, 3, 10}) {
        std::vector<int> prompt(prompt_len);
        for (int i = 0; i < prompt_len; ++i) prompt[i] = (i * 11 + prompt_len) % V;
        // Full recompute, as generate did: the argmax of the last position's logits.
        std::vector<int> a = prompt;
        while ((int)a.size() < T) {
            auto z = testing::window_logits(g, p.data(), a);
            const float* last = z.data() + (a.size() - 1) * V;
            a.push_back((int)(std::max_element(last, last + V) - last));
        }
        // The cache: the prompt once, then one position per token.
        std::vector<int> b = prompt;
        d.decode(b.data(), slot.data(), pos.data(), prompt_len, logits.data());
        const float* z = logits.data() + (size_t)(prompt_len - 1) * V;
        while ((int)b.size() < T) {
            b.push_back((int)(std::max_element(z, z + V) - z));
            if ((int)b.size() == T) break;
            const int at = (int)b.size() - 1;
            d.decode(&b[at], &slot[0], &pos[at], 1, logits.data());
            z = logits.data();
        }
        INFO("prompt of " << prompt_len);
        CHECK(a == b);
        // Not a constant sequence: the test would pass on a model that always says the same.
        CHECK(std::set<int>(a.begin() + prompt_len, a.end()).size() >= 2);
    }
}

namespace {

// decode_batching's check on the CPU's decoder: V 31, 36 wide with 4 heads (widths that are not
// multiples of the products' 8 lanes), the parameters of params_of.
long rows_batched_differently(int prompt, int fellow, int T) {
    GptConfig c = config(31, T);
    c.n_embd = 36;
    const auto p = params_of(Gpt(c, 1), 13);
    const auto d = make_cpu_decoder(c);
    d->set_params(p.data());
    return decode_batching::rows_batched_differently(*d, c.vocab_size, T, prompt, fellow);
}

} // namespace

TEST_CASE("GptDecoder: a row's logits are the same bits alone or among other sequences' rows", "[gpt]") {
    SECTION("a prompt of 3, beside prompts of 2") { CHECK(rows_batched_differently(3, 2, 16) == 0); }
    // Prompts long enough for decode's one product a prompt (kDecodePromptRows).
    SECTION("a long prompt, beside long ones") {
        const int prompt = kDecodePromptRows + 5;
        CHECK(rows_batched_differently(prompt, kDecodePromptRows, prompt + 8) == 0);
    }
    SECTION("a long prompt, beside short ones") {
        const int prompt = kDecodePromptRows;
        CHECK(rows_batched_differently(prompt, 3, prompt + 8) == 0);
    }
}

// --precision bf16 on the CPU: the decoder's bf16 copy of the weights gives, call after call, the
// bits of the fp32 decoder on parameters whose matrices are rounded to bf16 (a prompt long enough
// for its sgemm, then a token a call, row by row); biases and LayerNorms stay fp32. The
// embeddings are made bf16-exact first, as decode reads them both ways (a token's row in fp32, wte
// as the logits' bf16 weight). Two parameter sets through one decoder: set_params rounds anew (a
// rollout). A decoder that read the fp32 matrices, rounded the biases or kept the first set's
// weights fails it.
TEST_CASE("GptDecoder with bf16 weights: the fp32 decode of the rounded matrices, batched as alone", "[gpt]") {
    const GptConfig c = config(31, kDecodePromptRows + 8);
    const int V = c.vocab_size, T = c.block_size;
    const Gpt g(c, 1);
    const auto d16 = make_cpu_decoder(c, Precision::bf16), ref = make_cpu_decoder(c), fp32 = make_cpu_decoder(c);
    for (auto* d : {d16.get(), ref.get(), fp32.get()}) d->reserve(1, T);
    for (uint64_t seed : {21, 22}) {
        auto p = params_of(g, seed);
        for (const char* e : {"wte", "wpe"}) {
            const ParamView& v = g.layout().find(e);
            cpu::round_bf16(p.data() + v.offset, p.data() + v.offset, (long)v.size);
        }
        auto rounded = p;
        for (const ParamView& v : g.layout().views)
            if (v.shape.size() == 2) cpu::round_bf16(rounded.data() + v.offset, rounded.data() + v.offset, (long)v.size);
        d16->set_params(p.data());
        ref->set_params(rounded.data());
        fp32->set_params(p.data());
        std::vector<int> tok(T), slot(T, 0), pos(T);
        for (int t = 0; t < T; ++t) tok[t] = (t * 5 + (int)seed) % V, pos[t] = t;
        long differ = 0, from_fp32 = 0;
        std::vector<float> a((size_t)T * V), b((size_t)T * V), z((size_t)T * V);
        for (int t = 0, n = kDecodePromptRows + 1; t < T; t += n, n = 1) {  // a prompt, then a token a call
            d16->decode(&tok[t], slot.data(), &pos[t], n, a.data());
            ref->decode(&tok[t], slot.data(), &pos[t], n, b.data());
            fp32->decode(&tok[t], slot.data(), &pos[t], n, z.data());
            differ += std::memcmp(a.data(), b.data(), (size_t)n * V * sizeof(float)) != 0;
            from_fp32 += std::memcmp(a.data(), z.data(), (size_t)n * V * sizeof(float)) != 0;
        }
        INFO("parameters " << seed);
        CHECK(differ == 0);
        CHECK(from_fp32 > 0);  // the rounding is there
    }
    // Batched as alone, a long prompt among short ones (rows by the bf16 kernel, the long prompt by
    // sgemm on the widened matrices).
    GptConfig wide = config(31, kDecodePromptRows + 8);
    wide.n_embd = 36;
    const auto p = params_of(Gpt(wide, 1), 13);
    const auto d = make_cpu_decoder(wide, Precision::bf16);
    d->set_params(p.data());
    CHECK(decode_batching::rows_batched_differently(*d, V, wide.block_size, kDecodePromptRows, 3) == 0);
}

// decode_pick, the one call generate and serve make: decode's logits (when asked for) and, for each
// out row, the token TokenPicker's rule takes from them at the draw's u; a scored row (temperature
// below 0) gets -1, and asking for the logits or not changes no id. GPT and Llama, one row of each
// of three slots a call, greedy, sampled, top-k and top-p rows.
TEST_CASE("Decoder::decode_pick: the ids of cpu::pick_token on decode's logits", "[gpt]") {
    for (DecoderArch arch : {DecoderArch::gpt2, DecoderArch::llama}) {
        INFO((arch == DecoderArch::llama ? "llama" : "gpt"));
        GptConfig c = config(41, 12);
        c.arch = arch;
        if (arch == DecoderArch::llama) c.n_kv_head = 2;
        const auto lm = make_cpu_lm(c, 0);
        std::vector<float> p(lm->num_params());
        lm->init(p.data(), 5);
        const auto noise = randn(p.size(), 6, 0.2f);
        for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
        auto a = make_cpu_decoder(c), b = make_cpu_decoder(c), e = make_cpu_decoder(c);
        for (Decoder* d : {a.get(), b.get(), e.get()}) {
            d->reserve(4, 12);
            d->set_params(p.data());
        }
        CHECK(a->vocab_size() == 41);
        const int V = c.vocab_size;
        std::vector<float> probs(V), logits((size_t)4 * V), want((size_t)4 * V);
        std::vector<int> order(V);
        int bad = 0, sampled_apart = 0;
        for (int t = 0; t < c.block_size; ++t) {
            const int tok[4] = {(t * 3) % V, (t * 5 + 1) % V, (t * 7 + 2) % V, (t * 11 + 3) % V};
            const int slot[4] = {0, 1, 2, 3}, pos[4] = {t, t, t, t};
            const double u = (t + 0.5) / c.block_size;
            TokenDraw d[4];
            for (int s = 0; s < 4; ++s) d[s].vocab = V - 2, d[s].temperature = 0.9, d[s].u = u;
            d[0].temperature = 0;
            d[2].top_k = 5;
            d[3].top_p = 0.7;
            if (t % 4 == 3) d[1].temperature = -1;  // scored only
            int ids[4] = {-9, -9, -9, -9}, ids2[4] = {-9, -9, -9, -9};
            a->decode_pick(tok, slot, pos, 4, nullptr, 0, d, ids, logits.data());
            b->decode(tok, slot, pos, 4, want.data());
            bad += std::memcmp(logits.data(), want.data(), want.size() * sizeof(float)) != 0;
            for (int s = 0; s < 4; ++s) bad += ids[s] != cpu::pick_token(&want[(size_t)s * V], d[s], probs.data(), order.data());
            bad += t % 4 == 3 && ids[1] != -1;
            sampled_apart += ids[1] != ids[0];
            e->decode_pick(tok, slot, pos, 4, nullptr, 0, d, ids2);  // no logits asked for
            for (int s = 0; s < 4; ++s) bad += ids2[s] != ids[s];
        }
        CHECK(bad == 0);
        CHECK(sampled_apart > 0);  // the draws are not all the greedy token
    }
}
