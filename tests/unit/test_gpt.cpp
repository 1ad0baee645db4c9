// GPT ops and the whole GPT model against central finite differences (tolerance as in
// test_ops.cpp: |analytic - numeric| <= 2e-3 + 2e-2 |numeric|, h = 1e-2 for ops, 1e-3 model).
#include "helpers.h"

#include "dptrain/backend.h"
#include "dptrain/gpt.h"
#include "dptrain/rng.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

using namespace dptrain;
using testing::check_grad;
using testing::randn;

static double dot(const float* a, const std::vector<float>& w) {
    double s = 0;
    for (size_t i = 0; i < w.size(); ++i) s += (double)a[i] * w[i];
    return s;
}

TEST_CASE("layernorm_backward matches finite differences", "[ops][gpt]") {
    const long N = 4;
    const int C = 7;
    auto x = randn(N * C, 1), w = randn(C, 2), b = randn(C, 3), dout = randn(N * C, 4);
    std::vector<float> out(N * C), mean(N), rstd(N);
    auto loss = [&] {
        cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
        return dot(out.data(), dout);
    };
    loss();
    std::vector<float> dx(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(),
                            N, C);
    CHECK(check_grad(x, dx, loss, 1e-2f) == 0);
    CHECK(check_grad(w, dw, loss, 1e-2f) == 0);
    CHECK(check_grad(b, db, loss, 1e-2f) == 0);
    // Normalized rows: mean 0, variance 1 before the affine part.
    std::vector<float> ones(C, 1.0f), zeros(C, 0.0f);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), ones.data(), zeros.data(), N, C);
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += out[c];
    for (int c = 0; c < C; ++c) v += (out[c] - m / C) * (out[c] - m / C);
    CHECK(std::fabs(m / C) < 1e-5);
    CHECK(v / C == Approx(1.0).epsilon(1e-3));
}

TEST_CASE("attention: causal, and backward matches finite differences", "[ops][gpt]") {
    const int B = 2, T = 5, C = 8, NH = 2;
    auto inp = randn((size_t)B * T * 3 * C, 5), dout = randn((size_t)B * T * C, 6);
    std::vector<float> out((size_t)B * T * C), att((size_t)B * NH * T * T), datt(att.size());
    auto loss = [&] {
        cpu::attention_forward(out.data(), att.data(), inp.data(), B, T, C, NH);
        return dot(out.data(), dout);
    };
    loss();
    // Causality: the output at t = 0 is exactly the value of t = 0.
    for (int h = 0; h < NH; ++h)
        for (int i = 0; i < C / NH; ++i) CHECK(out[h * (C / NH) + i] == inp[2 * C + h * (C / NH) + i]);
    std::vector<float> dinp(inp.size());
    cpu::attention_backward(dinp.data(), datt.data(), dout.data(), inp.data(), att.data(), B, T, C, NH);
    CHECK(check_grad(inp, dinp, loss, 1e-2f) == 0);
}

TEST_CASE("encoder and residual backward match finite differences", "[ops][gpt]") {
    const int B = 2, T = 3, C = 4, V = 5;
    std::vector<int> tok = {1, 4, 1, 0, 2, 1};  // token 1 repeats: its gradient must add up
    auto wte = randn(V * C, 7), wpe = randn(T * C, 8), dout = randn(B * T * C, 9);
    std::vector<float> out(B * T * C);
    auto loss = [&] {
        cpu::encoder_forward(out.data(), tok.data(), T, wte.data(), wpe.data(), B, T, C);
        return dot(out.data(), dout);
    };
    std::vector<float> dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
    cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), T, B, T, C);
    CHECK(check_grad(wte, dwte, loss, 1e-2f) == 0);
    CHECK(check_grad(wpe, dwpe, loss, 1e-2f) == 0);
    auto a = randn(12, 10), b2 = randn(12, 11), d = randn(12, 12);
    std::vector<float> r(12), da(12, 0.0f), db(12, 0.0f);
    cpu::residual_forward(r.data(), a.data(), b2.data(), 12);
    CHECK(r[3] == a[3] + b2[3]);
    cpu::residual_backward(da.data(), db.data(), d.data(), 12);
    CHECK(da == d);
    CHECK(db == d);
}

TEST_CASE("GPT backward matches finite differences of the mean loss", "[model][gpt]") {
    GptConfig cfg;
    cfg.vocab_size = 7;
    cfg.block_size = 4;
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 8;
    const int B = 2, stride = cfg.block_size + 1;
    Gpt m(cfg, B);
    std::vector<float> params(m.num_params()), grads(m.num_params(), 0.0f);
    m.init(params.data(), 3);
    // Larger weights than GPT-2's 0.02, so every path carries a gradient well above the FD noise.
    Rng r(4);
    for (auto& p : params) p += 0.3f * r.normal();
    std::vector<int> tokens = {1, 3, 5, 2, 6, 0, 0, 4, 4, 2};
    ModelBatch in;
    in.B = B;
    in.tokens = tokens.data();
    in.stride = stride;
    const double terms = B * cfg.block_size;
    auto loss = [&] { return m.forward(params.data(), in, nullptr) / terms; };
    loss();
    m.backward(grads.data(), params.data(), in, (float)(1.0 / terms), nullptr);
    CHECK(check_grad(params, grads, loss, 1e-3f) == 0);
}

TEST_CASE("GPT layout, init and hooks", "[model][gpt]") {
    GptConfig cfg;
    cfg.vocab_size = 10;
    cfg.block_size = 6;
    cfg.n_layer = 3;
    cfg.n_head = 2;
    cfg.n_embd = 4;
    Gpt m(cfg, 2);
    const int C = 4, V = 10, T = 6, L = 3;
    CHECK(m.num_params() == (size_t)(V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C));
    CHECK(m.layout().find("h2.mlp.proj.weight").shape == std::vector<int>{C, 4 * C});
    std::vector<float> p(m.num_params());
    m.init(p.data(), 1);
    const ParamView& w = m.layout().find("h0.attn.proj.weight");
    double ss = 0;
    for (size_t i = 0; i < w.size; ++i) ss += p[w.offset + i] * p[w.offset + i];
    CHECK(std::sqrt(ss / w.size) < 0.02);  // scaled by 1 / sqrt(2 L)
    CHECK(p[m.layout().find("h1.ln2.weight").offset] == 1.0f);
    CHECK(p[m.layout().find("h1.ln2.bias").offset] == 0.0f);

    struct Recorder : GradHook {
        std::vector<size_t> offsets;
        void grads_ready_from(size_t o) override { offsets.push_back(o); }
    } rec;
    std::vector<int> tok(2 * (T + 1), 3);
    ModelBatch in;
    in.B = 2;
    in.tokens = tok.data();
    in.stride = T + 1;
    std::vector<float> g(m.num_params(), 0.0f);
    m.forward(p.data(), in, nullptr);
    m.backward(g.data(), p.data(), in, 0.1f, &rec);
    REQUIRE(rec.offsets.size() == (size_t)L + 2);
    for (size_t i = 1; i < rec.offsets.size(); ++i) CHECK(rec.offsets[i] < rec.offsets[i - 1]);  // last layer first
    CHECK(rec.offsets.back() == 0);
}
