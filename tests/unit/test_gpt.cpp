// GPT ops and the whole GPT model against central finite differences (tolerance as in
// test_ops.cpp: |analytic - numeric| <= 2e-3 + 2e-2 |numeric|, h = 1e-2 for ops, 1e-3 model).
#include "helpers.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/config/options.h"
#include "dptrain/core/bf16.h"
#include "dptrain/core/error.h"
#include "dptrain/model/gpt.h"
#include "dptrain/model/optim.h"
#include "dptrain/core/rng.h"

#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
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

TEST_CASE("round_tf32 keeps 10 mantissa bits, to nearest even", "[ops][bf16]") {
    const float e = std::ldexp(1.0f, -11);  // half a TF32 unit at 1
    std::vector<float> x = {1.0f,      1.0f + e,  1.0f + 3 * e, 1.0f + e + std::ldexp(1.0f, -20), -(1.0f + 3 * e),
                            1.0f + 2 * e, 0.0f,   -0.0f,       INFINITY,                          NAN};
    std::vector<float> r = randn(4099, 8);
    x.insert(x.end(), r.begin(), r.end());
    std::vector<float> y(x.size());
    cpu::round_tf32(y.data(), x.data(), (long)x.size());
    CHECK(y[0] == 1.0f);
    CHECK(y[1] == 1.0f);                 // a tie, to the even neighbour below
    CHECK(y[2] == 1.0f + 4 * e);         // a tie, to the even neighbour above
    CHECK(y[3] == 1.0f + 2 * e);         // past the tie: up
    CHECK(y[4] == -(1.0f + 4 * e));
    CHECK(y[5] == 1.0f + 2 * e);         // already a TF32 value
    CHECK((y[6] == 0.0f && !std::signbit(y[6]) && y[7] == 0.0f && std::signbit(y[7])));
    CHECK(y[8] == INFINITY);
    CHECK(std::isnan(y[9]));
    // Past TF32's largest value: infinity; a subnormal carries into the bits above.
    auto bits = [](uint32_t u) {
        float f;
        std::memcpy(&f, &u, sizeof f);
        return f;
    };
    float big[3] = {FLT_MAX, bits(0x7F7FEFFFu), bits(0x00001000u)}, got[3];
    cpu::round_tf32(got, big, 3);
    CHECK(got[0] == INFINITY);
    CHECK(got[1] == bits(0x7F7FE000u));
    CHECK(got[2] == 0.0f);  // a tie at the smallest unit: to the even neighbour, zero
    int bad = 0;
    for (size_t i = 10; i < x.size(); ++i) {
        uint32_t u = 0;
        std::memcpy(&u, &y[i], sizeof u);
        bad += (u & 0x1fffu) != 0 || std::fabs(y[i] - x[i]) > std::ldexp(std::fabs(x[i]), -11);
    }
    CHECK(bad == 0);
}

// Causal attention computed in double from its definition, with every product's operands rounded
// to TF32 when tf32 (what attention_*(..., tf32 = true) must do, on tensor cores on a GPU). The
// second product of each pass takes the op's own softmax output (att forward, dpre backward), so
// a rounding that lands on the other side of a TF32 tie from float noise cannot fail the check.
static void check_attention_definition(bool tf32) {
    INFO((tf32 ? "tf32" : "fp32"));
    const int B = 2, T = 9, C = 16, NH = 2, hs = C / NH, C3 = 3 * C;
    auto inp = randn((size_t)B * T * C3, 21), dout = randn((size_t)B * T * C, 22);
    std::vector<float> out((size_t)B * T * C), att((size_t)B * NH * T * T), datt(att.size()), dinp(inp.size());
    cpu::attention_forward(out.data(), att.data(), inp.data(), B, T, C, NH, tf32);
    cpu::attention_backward(dinp.data(), datt.data(), dout.data(), inp.data(), att.data(), B, T, C, NH, tf32);
    auto rd = [&](float v) {
        if (!tf32) return (double)v;
        float r = 0;
        cpu::round_tf32(&r, &v, 1);
        return (double)r;
    };
    const double scale = 1.0 / std::sqrt((double)hs);
    auto close = [](double got, double want) { return std::fabs(got - want) <= 1e-5 * (1 + std::fabs(want)); };
    long bad = 0;
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            auto q = [&](int t, int i) { return inp[((size_t)b * T + t) * C3 + h * hs + i]; };
            auto k = [&](int t, int i) { return inp[((size_t)b * T + t) * C3 + C + h * hs + i]; };
            auto v = [&](int t, int i) { return inp[((size_t)b * T + t) * C3 + 2 * C + h * hs + i]; };
            auto d = [&](int t, int i) { return dout[((size_t)b * T + t) * C + h * hs + i]; };
            const float* a = att.data() + ((size_t)b * NH + h) * T * T;
            const float* dp = datt.data() + ((size_t)b * NH + h) * T * T;
            for (int t = 0; t < T; ++t) {
                std::vector<double> sc(t + 1), dat(t + 1);
                double mx = -1e300, sum = 0, dot = 0;
                for (int t2 = 0; t2 <= t; ++t2) {
                    double s2 = 0;
                    for (int i = 0; i < hs; ++i) s2 += rd(q(t, i)) * rd(k(t2, i));
                    sc[t2] = s2 * scale;
                    mx = std::max(mx, sc[t2]);
                }
                for (int t2 = 0; t2 <= t; ++t2) sum += std::exp(sc[t2] - mx);
                for (int t2 = 0; t2 < T; ++t2) bad += !close(a[t * T + t2], t2 <= t ? std::exp(sc[t2] - mx) / sum : 0.0);
                for (int i = 0; i < hs; ++i) {
                    double o = 0;
                    for (int t2 = 0; t2 <= t; ++t2) o += rd(a[t * T + t2]) * rd(v(t2, i));
                    bad += !close(out[((size_t)b * T + t) * C + h * hs + i], o);
                }
                // Backward: datt = dout V^T, then the softmax's backward from the op's att.
                for (int t2 = 0; t2 <= t; ++t2) {
                    dat[t2] = 0;
                    for (int i = 0; i < hs; ++i) dat[t2] += rd(d(t, i)) * rd(v(t2, i));
                    dot += a[t * T + t2] * dat[t2];
                }
                for (int t2 = 0; t2 < T; ++t2)
                    bad += !close(dp[t * T + t2], t2 <= t ? a[t * T + t2] * (dat[t2] - dot) * scale : 0.0);
            }
            for (int t = 0; t < T; ++t)
                for (int i = 0; i < hs; ++i) {
                    double dq = 0, dk = 0, dv = 0;
                    for (int t2 = 0; t2 < T; ++t2) {
                        dq += rd(dp[t * T + t2]) * rd(k(t2, i));  // dQ = dpre K
                        dk += rd(dp[t2 * T + t]) * rd(q(t2, i));  // dK = dpre^T Q
                        dv += rd(a[t2 * T + t]) * rd(d(t2, i));   // dV = att^T dout
                    }
                    const size_t row = ((size_t)b * T + t) * C3 + h * hs + i;
                    bad += !close(dinp[row], dq) + !close(dinp[row + C], dk) + !close(dinp[row + 2 * C], dv);
                }
        }
    CHECK(bad == 0);
    if (tf32) {  // and the rounding happened: the fp32 op gives other numbers
        std::vector<float> out32(out.size()), att32(att.size());
        cpu::attention_forward(out32.data(), att32.data(), inp.data(), B, T, C, NH, false);
        CHECK(out32 != out);
    }
}

TEST_CASE("attention matches its definition in fp32 and with TF32 products", "[ops][gpt][bf16]") {
    check_attention_definition(false);
    check_attention_definition(true);
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

TEST_CASE("round_bf16 gives the bits of to_bf16, in place too", "[ops][bf16]") {
    const float inf = INFINITY;
    // Ties to even (1 + 2^-8 down to 1, 1 + 3 * 2^-8 up to 1 + 2^-6), subnormals, overflow, NaN.
    std::vector<float> x = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, 1e-40f, 3.4e38f, inf, -inf, NAN, 0.1f};
    std::vector<float> r = randn(10007, 5);
    x.insert(x.end(), r.begin(), r.end());
    std::vector<float> y(x.size());
    cpu::round_bf16(y.data(), x.data(), (long)x.size());
    CHECK(y[3] == 1.0f);
    CHECK(y[4] == 1.015625f);
    CHECK(y[7] == inf);
    CHECK(std::isnan(y[9]));
    int bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        float want = bf16_to_float(float_to_bf16(x[i]));
        bad += !(std::isnan(want) ? std::isnan(y[i]) : y[i] == want);
    }
    CHECK(bad == 0);
    std::vector<float> z = x;
    cpu::round_bf16(z.data(), z.data(), (long)z.size());
    for (size_t i = 0; i < x.size(); ++i)
        if (!std::isnan(y[i])) CHECK(z[i] == y[i]);
}

TEST_CASE("--precision bf16: a matmul sees rounded weights and inputs, with fp32 bias and sums", "[model][bf16]") {
    // A linear classifier has one matmul: its bf16 loss is exactly the fp32 loss of rounded
    // inputs and rounded weights (the bias not rounded).
    const int B = 9, in = 13, classes = 5;
    Mlp m16(in, {}, classes, Activation::relu, B), m32(in, {}, classes, Activation::relu, B);
    m16.set_precision(Precision::bf16);
    std::vector<float> p(m16.num_params());
    m16.init(p.data(), 3);
    const ParamView& bias = m16.layout().find("fc0.bias");
    Rng r(6);
    for (size_t i = 0; i < bias.size; ++i) p[bias.offset + i] = 0.1f * r.normal();
    std::vector<float> x = randn((size_t)B * in, 7);
    std::vector<int> y(B);
    for (int b = 0; b < B; ++b) y[b] = b % classes;
    std::vector<float> p_r = p, x_r = x;
    const ParamView& w = m16.layout().find("fc0.weight");
    cpu::round_bf16(p_r.data() + w.offset, p.data() + w.offset, (long)w.size);
    cpu::round_bf16(x_r.data(), x.data(), (long)x.size());
    CHECK(p_r != p);  // the rounding changes something, so the equality below says what was rounded
    double l16 = m16.forward(p.data(), x.data(), y.data(), B, nullptr);
    CHECK(l16 == m32.forward(p_r.data(), x_r.data(), y.data(), B, nullptr));
    CHECK(l16 != m32.forward(p.data(), x.data(), y.data(), B, nullptr));
    // Back to fp32: the same as a model that never used bf16, bit for bit.
    m16.set_precision(Precision::fp32);
    CHECK(m16.forward(p.data(), x.data(), y.data(), B, nullptr) == m32.forward(p.data(), x.data(), y.data(), B, nullptr));
    CHECK_THROWS_WITH(parse_precision("fp16"), Catch::Contains("--precision 'fp16' is unknown; use fp32 or bf16"));
}

// A small GPT for the bf16 model tests.
static GptConfig bf16_test_config() {
    GptConfig cfg;
    cfg.vocab_size = 31;
    cfg.block_size = 16;
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 32;
    return cfg;
}

// Values of x[0 .. count) that are not bf16 values.
static size_t unrounded(const float* x, size_t count) {
    size_t k = 0;
    for (size_t i = 0; i < count; ++i) k += bf16_to_float(float_to_bf16(x[i])) != x[i];
    return k;
}

TEST_CASE("--precision bf16: the GPT keeps its fc output, logits and flash attention's output rounded; fp32 does not",
          "[model][gpt][bf16]") {
    // Flash attention's backward takes its output as bf16 (FlashAttention-2's delta from the bf16
    // output), so bf16 keeps that output rounded, as stored in bf16; matmul attention's output stays
    // fp32 (its backward does not read it; the projection rounds a copy).
    for (bool flash : {false, true}) {
        INFO((flash ? "flash attention" : "matmul attention"));
        GptConfig cfg = bf16_test_config();
        cfg.flash_attention = flash;
        const int B = 3, T = cfg.block_size;
        Gpt m(cfg, B);
        std::vector<float> p(m.num_params());
        m.init(p.data(), 5);
        std::vector<int> tokens;
        const ModelBatch in = testing::random_windows(tokens, B, T, cfg.vocab_size, 6);
        const size_t n = (size_t)B * T * cfg.n_embd, n_logits = (size_t)B * T * cfg.vocab_size;
        for (Precision prec : {Precision::fp32, Precision::bf16}) {
            INFO((prec == Precision::bf16 ? "bf16" : "fp32"));
            const bool bf = prec == Precision::bf16;
            m.set_precision(prec);
            m.forward(p.data(), in, nullptr);
            for (int l = 0; l < cfg.n_layer; ++l) {
                INFO("layer " << l);
                if (bf) CHECK(unrounded(m.fc_output(l), 4 * n) == 0);
                else CHECK(unrounded(m.fc_output(l), 4 * n) > 2 * n);  // fp32 sums are almost never bf16 values
                if (bf && flash) CHECK(unrounded(m.attention_output(l), n) == 0);
                else CHECK(unrounded(m.attention_output(l), n) > n / 2);
            }
            if (bf) CHECK(unrounded(m.logits(), n_logits) == 0);
            else CHECK(unrounded(m.logits(), n_logits) > n_logits / 2);
        }
        // A switch between a forward and its backward: the backward refuses until the next forward.
        std::vector<float> g(m.num_params(), 0.0f);
        m.set_precision(Precision::fp32);
        CHECK_THROWS_AS(m.backward(g.data(), p.data(), in, 1.0f, nullptr), std::logic_error);
        m.forward(p.data(), in, nullptr);
        CHECK_NOTHROW(m.backward(g.data(), p.data(), in, 1.0f, nullptr));
    }
}
TEST_CASE("--precision bf16: GPT gradients and a 50-step loss curve stay close to fp32", "[model][gpt][bf16]") {
    const GptConfig cfg = bf16_test_config();
    const int B = 4;
    Gpt a(cfg, B), b(cfg, B);
    b.set_precision(Precision::bf16);
    // The rounding costs under 1% of the first loss; per tensor, the gradient's cosine similarity
    // with fp32's is above 0.99 (operands rounded by up to 2^-9 each; measured 0.99998 or more);
    // the 50-step curves stay within 5% (measured: 1.6% apart at most, at step 25; 220 -> 27.49 in
    // fp32 and 27.39 in bf16 at step 49, where bf16 also keeps the fc output and the logits rounded,
    // takes GELU of the unrounded fc output, and hands each LayerNorm backward its dout rounded).
    testing::check_gpts_agree(a, b, B, 11, 1e-2, 0.99, 5e-2);
}

TEST_CASE("--recompute: gradients bit-identical to keeping every activation, in less memory", "[gpt]") {
    struct Case {
        const char* what;
        Precision precision;
        bool flash;
    };
    for (const Case& c : {Case{"fp32", Precision::fp32, false}, Case{"bf16", Precision::bf16, false},
                          Case{"bf16 flash", Precision::bf16, true}}) {
        GptConfig cfg;
        cfg.vocab_size = 19;
        cfg.block_size = 16;
        cfg.n_layer = 3;
        cfg.n_head = 2;
        cfg.n_embd = 32;  // head size 16: flash attention's smallest
        cfg.flash_attention = c.flash;
        const int B = 3;
        Gpt base(cfg, B);
        base.set_precision(c.precision);
        std::vector<float> p(base.num_params());
        base.init(p.data(), 3);
        auto noise = randn(p.size(), 4, 0.05f);
        for (size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
        std::vector<int> tokens;
        const ModelBatch in = testing::random_windows(tokens, B, cfg.block_size, cfg.vocab_size, 8);
        std::vector<float> g0(p.size(), 0.0f);
        const double loss0 = base.forward(p.data(), in, nullptr);
        base.backward(g0.data(), p.data(), in, 0.01f, nullptr);
        CHECK(base.activation_bytes() == Gpt::activation_bytes(cfg, B));
        size_t previous = base.activation_bytes();
        for (Recompute r : {Recompute::attention, Recompute::block}) {
            INFO(c.what << (r == Recompute::block ? ", block" : ", attention"));
            GptConfig rc = cfg;
            rc.recompute = r;
            Gpt g(rc, B);
            g.set_precision(c.precision);
            std::vector<float> g1(p.size(), 0.0f);
            const double loss1 = g.forward(p.data(), in, nullptr);
            g.backward(g1.data(), p.data(), in, 0.01f, nullptr);
            CHECK(loss1 == loss0);
            CHECK(std::memcmp(g1.data(), g0.data(), g0.size() * sizeof(float)) == 0);
            // Memory: the formula is what the model allocates, and each mode keeps less.
            CHECK(g.activation_bytes() == Gpt::activation_bytes(rc, B));
            CHECK(g.activation_bytes() < previous);
            previous = g.activation_bytes();
        }
    }
}
