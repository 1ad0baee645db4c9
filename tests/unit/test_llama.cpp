// The Llama's ops (RMSNorm, rotary q/k with grouped k/v, SwiGLU) and the whole model against
// central finite differences (tolerance as test_gpt.cpp's), its layout, signature, memory formulas,
// --recompute and bf16. The golden comparison with PyTorch is tests/integration/golden_llama.sh.
#include "helpers.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/error.h"
#include "dptrain/core/rng.h"
#include "dptrain/model/gpt_buffers.h"
#include "dptrain/model/llama.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

using namespace dptrain;
using testing::check_grad;
using testing::randn;

static double dot(const float* a, const std::vector<float>& w) {
    double s = 0;
    for (size_t i = 0; i < w.size(); ++i) s += (double)a[i] * w[i];
    return s;
}

static GptConfig tiny_llama(int KV, bool tied) {
    GptConfig cfg;
    cfg.arch = DecoderArch::llama;
    cfg.vocab_size = 7;
    cfg.block_size = 4;
    cfg.n_layer = 2;
    cfg.n_head = 4;
    cfg.n_kv_head = KV;
    cfg.n_embd = 16;
    cfg.ffn_hidden = 12;
    cfg.tie_embeddings = tied;
    return cfg;
}

TEST_CASE("rmsnorm: rows of unit mean square, backward matches finite differences", "[ops][llama]") {
    const long N = 4;
    const int C = 7;
    auto x = randn(N * C, 1), w = randn(C, 2), dout = randn(N * C, 4);
    std::vector<float> out(N * C), rstd(N);
    auto loss = [&] {
        cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
        return dot(out.data(), dout);
    };
    loss();
    std::vector<float> dx(N * C, 0.0f), dw(C, 0.0f);
    cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    CHECK(check_grad(x, dx, loss, 1e-2f) == 0);
    CHECK(check_grad(w, dw, loss, 1e-2f) == 0);
    std::vector<float> ones(C, 1.0f);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), ones.data(), N, C, 0.0f);
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += out[c] * out[c];
    CHECK(ms / C == Approx(1.0).epsilon(1e-5));
    // The fused residual form: the same bits as the add, then the norm.
    auto a = randn(N * C, 5), b = randn(N * C, 6);
    std::vector<float> res(N * C), out2(N * C), rstd2(N), sum(N * C);
    cpu::residual_rmsnorm_forward(res.data(), out2.data(), rstd2.data(), a.data(), b.data(), w.data(), N, C, 1e-5f);
    cpu::residual_forward(sum.data(), a.data(), b.data(), N * C);
    cpu::rmsnorm_forward(out.data(), rstd.data(), sum.data(), w.data(), N, C, 1e-5f);
    CHECK(res == sum);
    CHECK(out2 == out);
}

TEST_CASE("rope_qkv: rotates q and k by position, repeats a group's k and v, backward matches finite differences",
          "[ops][llama]") {
    GptConfig cfg = tiny_llama(2, true);
    cfg.block_size = 5;
    const int B = 2, T = 5, NH = 4, KV = 2, hs = 4, C = NH * hs, W = (NH + 2 * KV) * hs;
    std::vector<float> cos((size_t)T * hs / 2), sin(cos.size());
    llama_rope_table(cfg, cos.data(), sin.data());
    CHECK(cos[0] == 1.0f);  // position 0: no rotation
    CHECK(sin[1] == 0.0f);
    CHECK(sin[3 * hs / 2 + 1] == Approx(std::sin(3.0 / 100.0)).epsilon(1e-6));  // theta^(-2/4) = 1/100
    auto inp = randn((size_t)B * T * W, 7), dout = randn((size_t)B * T * 3 * C, 8);
    std::vector<float> out((size_t)B * T * 3 * C);
    auto loss = [&] {
        cpu::rope_qkv_forward(out.data(), inp.data(), cos.data(), sin.data(), B, T, NH, KV, hs);
        return dot(out.data(), dout);
    };
    loss();
    // Row (b=1, t=0): q and k unrotated; query heads 2 and 3 read kv head 1; v copied.
    const float* o = out.data() + (size_t)T * 3 * C;
    const float* x = inp.data() + (size_t)T * W;
    CHECK(o[5] == x[5]);
    CHECK(o[C + 3 * hs + 1] == x[C + 1 * hs + 1]);
    CHECK(o[2 * C + 2 * hs + 2] == x[C + KV * hs + hs + 2]);
    // Row (b=0, t=2): each pair (i, i + hs/2) keeps its length.
    const float* o2 = out.data() + 2 * 3 * C;
    const float* x2 = inp.data() + 2 * W;
    CHECK(o2[0] * o2[0] + o2[2] * o2[2] == Approx(x2[0] * x2[0] + x2[2] * x2[2]).epsilon(1e-5));
    CHECK(o2[0] != x2[0]);
    std::vector<float> dinp(inp.size(), 7.0f);  // written, not added
    cpu::rope_qkv_backward(dinp.data(), dout.data(), cos.data(), sin.data(), B, T, NH, KV, hs);
    CHECK(check_grad(inp, dinp, loss, 1e-2f) == 0);
    // Decoding's in-place rotation agrees with training's for the q and k heads.
    std::vector<float> row(inp.begin() + 2 * W, inp.begin() + 3 * W);
    const int pos = 2;
    cpu::rope_decode(row.data(), &pos, cos.data(), sin.data(), 1, NH, KV, hs);
    for (int i = 0; i < C; ++i) CHECK(row[i] == o2[i]);
    for (int i = 0; i < hs; ++i) CHECK(row[C + hs + i] == o2[C + 2 * hs + i]);  // kv head 1 = query head 2's
}

TEST_CASE("llama_rope_table: Llama 3's scaling slows the long wavelengths only", "[ops][llama]") {
    GptConfig cfg = tiny_llama(2, true);
    cfg.n_embd = 128;
    cfg.n_head = 1;  // head size 128: 64 frequencies, from 1 down to theta^(-126/128)
    cfg.block_size = 2;
    cfg.rope_theta = 500000;
    std::vector<float> c0(128), s0(128), c1(128), s1(128);
    llama_rope_table(cfg, c0.data(), s0.data());
    cfg.rope_scaling = RopeScaling{8, 1, 4, 8192};
    llama_rope_table(cfg, c1.data(), s1.data());
    // Position 1's angle is the inverse frequency itself.
    CHECK(s1[64 + 0] == s0[64 + 0]);                                              // wavelength 2 pi: kept
    CHECK(std::asin(s1[64 + 63]) == Approx(std::asin(s0[64 + 63]) / 8).epsilon(1e-4));  // > 8192: / 8
    const float mid0 = std::asin(s0[64 + 32]), mid1 = std::asin(s1[64 + 32]);  // wavelength ~ 4.4k: blended
    CHECK(mid1 < mid0);
    CHECK(mid1 > mid0 / 8);
}

TEST_CASE("swiglu backward matches finite differences", "[ops][llama]") {
    const long N = 3;
    const int F = 5;
    auto inp = randn(N * 2 * F, 9), dout = randn(N * F, 10);
    std::vector<float> out(N * F);
    auto loss = [&] {
        cpu::swiglu_forward(out.data(), inp.data(), N, F);
        return dot(out.data(), dout);
    };
    loss();
    const float g = inp[2 * F + 1], u = inp[3 * F + 1];  // row 1, column 1
    CHECK(out[F + 1] == Approx(g / (1 + std::exp(-g)) * u).epsilon(1e-6));
    std::vector<float> dinp(inp.size(), 3.0f);
    cpu::swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
    CHECK(check_grad(inp, dinp, loss, 1e-2f) == 0);
}

TEST_CASE("Llama backward matches finite differences of the mean loss", "[model][llama]") {
    for (const auto& [KV, tied] : {std::pair{1, false}, std::pair{4, true}, std::pair{2, false}}) {
        INFO("n_kv_head " << KV << (tied ? ", tied" : ", untied"));
        const GptConfig cfg = tiny_llama(KV, tied);
        const int B = 2, stride = cfg.block_size + 1;
        Llama m(cfg, B);
        std::vector<float> params(m.num_params()), grads(m.num_params(), 0.0f);
        m.init(params.data(), 3);
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
}

TEST_CASE("Llama layout, signature, sizes and hooks", "[model][llama]") {
    GptConfig cfg = tiny_llama(2, false);
    cfg.ffn_hidden = 0;  // the default: 8 * 16 / 3 rounded up to 64
    Llama m(cfg, 2);
    const int V = 7, C = 16, L = 2, F = 64, QKV = (4 + 2 * 2) * 4;
    CHECK(m.config().ffn_hidden == F);
    CHECK(m.config().n_kv_head == 2);
    CHECK(m.num_params() == (size_t)(2 * V * C + L * (2 * C + QKV * C + C * C + 3 * F * C) + C));
    CHECK(m.num_params() == Llama::count_params(cfg));
    CHECK(m.layout().find("h1.attn.qkv.weight").shape == std::vector<int>{QKV, C});
    CHECK(m.layout().find("h0.mlp.gate_up.weight").shape == std::vector<int>{2 * F, C});
    CHECK(m.layout().views.back().name == "lm_head.weight");
    CHECK(m.activation_bytes() == Llama::activation_bytes(cfg, 2));
    CHECK(lm_activation_bytes(cfg, 2) == m.activation_bytes());
    // The signature names every shape-setting value, and reads back to the same model.
    cfg.rope_scaling = RopeScaling{8, 1, 4, 8192};
    cfg.rope_theta = 500000;
    cfg.norm_eps = 1e-6f;
    const Llama scaled(cfg, 0);
    GptConfig back;
    REQUIRE(parse_gpt_signature(scaled.signature(), &back));
    CHECK(back.arch == DecoderArch::llama);
    CHECK(Llama(back, 0).signature() == scaled.signature());
    CHECK(back.rope_scaling.factor == 8);
    CHECK(back.norm_eps == 1e-6f);
    CHECK_FALSE(parse_gpt_signature(scaled.signature() + " x", &back));
    CHECK_FALSE(parse_llama_signature("gpt V=65 T=64 L=4 H=4 C=128", &back));
    GptConfig bad = tiny_llama(3, true);  // 3 does not divide 4 heads
    CHECK_THROWS_AS(Llama(bad, 1), UserError);

    std::vector<float> p(m.num_params());
    m.init(p.data(), 1);
    CHECK(p[m.layout().find("h1.ln2.weight").offset] == 1.0f);
    struct Recorder : GradHook {
        std::vector<size_t> offsets;
        void grads_ready_from(size_t o) override { offsets.push_back(o); }
    } rec;
    std::vector<int> tok(2 * 5, 3);
    ModelBatch in;
    in.B = 2;
    in.tokens = tok.data();
    in.stride = 5;
    std::vector<float> g(m.num_params(), 0.0f);
    m.forward(p.data(), in, nullptr);
    m.backward(g.data(), p.data(), in, 0.1f, &rec);
    REQUIRE(rec.offsets.size() == (size_t)L + 2);
    CHECK(rec.offsets[0] == m.lnf());  // the head's gradient (after lnf) is ready first
    for (size_t i = 1; i < rec.offsets.size(); ++i) CHECK(rec.offsets[i] < rec.offsets[i - 1]);
    CHECK(rec.offsets.back() == 0);
}

TEST_CASE("Llama --recompute: gradients bit-identical to keeping every activation, in less memory", "[llama]") {
    for (const auto& [p, flash] : {std::pair{Precision::fp32, false}, std::pair{Precision::bf16, false},
                                   std::pair{Precision::bf16, true}}) {
        GptConfig cfg = tiny_llama(2, false);
        cfg.vocab_size = 19;
        cfg.block_size = 16;
        cfg.n_embd = 64;  // head size 16: flash attention's smallest
        cfg.flash_attention = flash;
        const int B = 3;
        Llama base(cfg, B);
        base.set_precision(p);
        std::vector<float> params(base.num_params());
        base.init(params.data(), 3);
        auto noise = randn(params.size(), 4, 0.05f);
        for (size_t i = 0; i < params.size(); ++i) params[i] += noise[i];
        std::vector<int> tokens;
        const ModelBatch in = testing::random_windows(tokens, B, cfg.block_size, cfg.vocab_size, 8);
        std::vector<float> g0(params.size(), 0.0f);
        const double loss0 = base.forward(params.data(), in, nullptr);
        base.backward(g0.data(), params.data(), in, 0.01f, nullptr);
        size_t previous = base.activation_bytes();
        for (Recompute r : {Recompute::attention, Recompute::block}) {
            INFO((p == Precision::bf16 ? "bf16" : "fp32") << (flash ? " flash" : "")
                                                          << (r == Recompute::block ? ", block" : ", attention"));
            GptConfig rc = cfg;
            rc.recompute = r;
            Llama m(rc, B);
            m.set_precision(p);
            std::vector<float> g1(params.size(), 0.0f);
            CHECK(m.forward(params.data(), in, nullptr) == loss0);
            m.backward(g1.data(), params.data(), in, 0.01f, nullptr);
            CHECK(std::memcmp(g1.data(), g0.data(), g0.size() * sizeof(float)) == 0);
            CHECK(m.activation_bytes() == Llama::activation_bytes(rc, B));
            CHECK(m.activation_bytes() < previous);
            previous = m.activation_bytes();
        }
    }
}

TEST_CASE("Llama --precision bf16 and --attention flash stay close to fp32 over a 50-step curve", "[model][llama][bf16]") {
    GptConfig cfg = tiny_llama(2, false);
    cfg.vocab_size = 23;
    cfg.block_size = 16;
    cfg.n_embd = 64;
    Llama a(cfg, 4), b(cfg, 4);
    b.set_precision(Precision::bf16);
    testing::check_models_agree(a, b, cfg.block_size, cfg.vocab_size, 4, 11, 2e-2, 0.99, 5e-2);
    GptConfig fc = cfg;
    fc.flash_attention = true;
    Llama c(cfg, 4), f(fc, 4);
    c.set_precision(Precision::bf16);
    f.set_precision(Precision::bf16);
    testing::check_models_agree(c, f, cfg.block_size, cfg.vocab_size, 4, 12, 2e-2, 0.99, 5e-2);
}
