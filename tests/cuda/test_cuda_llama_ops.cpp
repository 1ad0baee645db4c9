// The Llama's CUDA ops (rmsnorm.cu, rope.cu, SwiGLU in activation.cu) against their CPU twins on
// fresh random inputs, with each tolerance beside its check. Shapes include widths that are not
// multiples of 32, more rows than a block, grouped-query heads, and a second run's bits.
#include "helpers.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/cuda/ops.h"
#include "dptrain/model/llama.h"

#include <cmath>
#include <vector>

using namespace dptrain;
using namespace cudatest;

static void check_rmsnorm(long N, int C, uint64_t seed) {
    INFO("rmsnorm N=" << N << " C=" << C);
    auto inp = randn((size_t)N * C, seed, 1.5f, 0.5f), add = randn((size_t)N * C, seed + 1);
    auto w = randn(C, seed + 2), dout = randn((size_t)N * C, seed + 3);
    auto dinp0 = randn((size_t)N * C, seed + 4), dw0 = randn(C, seed + 5);
    std::vector<float> res((size_t)N * C), out((size_t)N * C), rstd(N), dinp = dinp0, dw = dw0;
    cpu::residual_rmsnorm_forward(res.data(), out.data(), rstd.data(), inp.data(), add.data(), w.data(), N, C, 1e-5f);
    cpu::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), res.data(), w.data(), rstd.data(), N, C);
    std::vector<float> s_dw(C, 0.0f);  // magnitudes behind the weight gradient's column sums
    for (int c = 0; c < C; ++c) s_dw[c] = std::fabs(dw0[c]);
    for (long i = 0; i < N; ++i)
        for (int c = 0; c < C; ++c) s_dw[c] += std::fabs(res[i * C + c] * rstd[i] * dout[i * C + c]);

    cuda::Context ctx(0);
    DeviceBuffer<float> d_inp(inp), d_add(add), d_w(w), d_dout(dout), d_dinp(dinp0), d_dw(dw0);
    DeviceBuffer<float> d_res((size_t)N * C), d_out((size_t)N * C), d_rstd(N);
    cuda::residual_rmsnorm_forward(d_res, d_out, d_rstd, d_inp, d_add, d_w, N, C, 1e-5f, ctx.stream());
    // The add is exact; the sum of squares in another order moves rstd by a few ulps (2e-5
    // relative) and the outputs by that times |x w| (1e-4 absolute).
    CHECK(bit_mismatches("res", d_res.get(), res) == 0);
    CHECK(mismatches("rstd", d_rstd.get(), rstd, 0.0, 2e-5) == 0);
    CHECK(mismatches("out", d_out.get(), out, 1e-4, 1e-5) == 0);
    {  // the plain form: the fused form's bits
        DeviceBuffer<float> d_out2((size_t)N * C), d_rstd2(N);
        cuda::rmsnorm_forward(d_out2, d_rstd2, d_res, d_w, N, C, 1e-5f, ctx.stream());
        CHECK(bit_mismatches("out (plain form)", d_out2.get(), d_out.get()) == 0);
    }
    // Backward from the CPU's rstd: dinp as out; dweight an N-row column sum, 1e-5 of its |terms|.
    d_rstd.set(rstd);
    cuda::rmsnorm_backward(d_dinp, d_dw, d_dout, d_res, d_w, d_rstd, N, C, ctx, ctx.stream());
    CHECK(mismatches("dinp", d_dinp.get(), dinp, 1e-4, 1e-5) == 0);
    const auto got_dw = d_dw.get();
    CHECK(mismatches("dweight", got_dw, dw, 1e-6, 1e-5, s_dw) == 0);
    d_dw.set(dw0);  // fixed summation order: the same bits again
    cuda::rmsnorm_backward(d_dinp, d_dw, d_dout, d_res, d_w, d_rstd, N, C, ctx, ctx.stream());
    CHECK(bit_mismatches("dweight (second run)", d_dw.get(), got_dw) == 0);
}

TEST_CASE("cuda rmsnorm and its fused residual form match the CPU", "[cuda][llama]") {
    REQUIRE_GPU_OR_SKIP();
    check_rmsnorm(5, 16, 100);
    check_rmsnorm(1031, 97, 110);    // 129 blocks of 8 rows, C not a multiple of 32
    check_rmsnorm(300, 768, 120);    // GPT-2 width
    check_rmsnorm(40000, 33, 130);   // more rows than 128 chunks of 256
}

static void check_rope(int B, int T, int NH, int KV, int hs, uint64_t seed) {
    INFO("rope B=" << B << " T=" << T << " NH=" << NH << " KV=" << KV << " hs=" << hs);
    GptConfig cfg;
    cfg.arch = DecoderArch::llama;
    cfg.block_size = T;
    cfg.n_head = NH;
    cfg.n_embd = NH * hs;
    cfg.rope_theta = 500;
    std::vector<float> cos((size_t)T * hs / 2), sin(cos.size());
    llama_rope_table(cfg, cos.data(), sin.data());
    const int C = NH * hs, W = (NH + 2 * KV) * hs;
    const long BT = (long)B * T;
    auto inp = randn((size_t)BT * W, seed), dout = randn((size_t)BT * 3 * C, seed + 1);
    std::vector<float> out((size_t)BT * 3 * C), dinp((size_t)BT * W);
    cpu::rope_qkv_forward(out.data(), inp.data(), cos.data(), sin.data(), B, T, NH, KV, hs);
    cpu::rope_qkv_backward(dinp.data(), dout.data(), cos.data(), sin.data(), B, T, NH, KV, hs);
    cuda::Context ctx(0);
    DeviceBuffer<float> d_inp(inp), d_dout(dout), d_cos(cos), d_sin(sin);
    DeviceBuffer<float> d_out(out.size()), d_dinp(dinp.size());
    cuda::rope_qkv_forward(d_out, d_inp, d_cos, d_sin, B, T, NH, KV, hs, ctx.stream());
    cuda::rope_qkv_backward(d_dinp, d_dout, d_cos, d_sin, B, T, NH, KV, hs, ctx.stream());
    // Two products and a sum a value (the GPU may fuse them into one FMA): 2e-6 absolute on values
    // of order 1.
    CHECK(mismatches("out", d_out.get(), out, 2e-6, 1e-6) == 0);
    // The group's sums in head order on both sides, then the rotation: 1e-5 on sums of NH/KV terms.
    CHECK(mismatches("dinp", d_dinp.get(), dinp, 1e-5, 1e-6) == 0);
    // Decoding's form: the rows' own positions (any order, repeats), q and k rotated in place, v
    // left as it was (bit for bit); the same products as above.
    const int n = B * 3;
    auto rows = randn((size_t)n * W, seed + 2);
    std::vector<int> pos = randint(n, seed + 3, T);
    std::vector<float> want = rows;
    cpu::rope_decode(want.data(), pos.data(), cos.data(), sin.data(), n, NH, KV, hs);
    DeviceBuffer<float> d_rows(rows);
    DeviceBuffer<int> d_pos(pos);
    cuda::rope_decode(d_rows, d_pos, d_cos, d_sin, n, NH, KV, hs, ctx.stream());
    const std::vector<float> got = d_rows.get();
    CHECK(mismatches("rope_decode", got, want, 2e-6, 1e-6) == 0);
    std::vector<float> got_v, want_v;
    for (int r = 0; r < n; ++r)
        for (int c = (NH + KV) * hs; c < W; ++c) {
            got_v.push_back(got[(size_t)r * W + c]);
            want_v.push_back(rows[(size_t)r * W + c]);
        }
    CHECK(bit_mismatches("rope_decode's v", got_v, want_v) == 0);
}

TEST_CASE("cuda rope_qkv forward and backward, and rope_decode, match the CPU, grouped-query heads included",
          "[cuda][llama]") {
    REQUIRE_GPU_OR_SKIP();
    check_rope(2, 5, 4, 2, 4, 200);
    check_rope(3, 64, 12, 4, 64, 210);   // Llama-like: 3 query heads a key/value head
    check_rope(1, 33, 8, 1, 16, 220);    // one key/value head for all
    check_rope(2, 17, 6, 6, 128, 230);   // as many key/value heads as query heads
}

static void check_swiglu(long N, int F, uint64_t seed) {
    INFO("swiglu N=" << N << " F=" << F);
    auto inp = randn((size_t)N * 2 * F, seed, 2.0f), dout = randn((size_t)N * F, seed + 1);
    std::vector<float> out((size_t)N * F), dinp((size_t)N * 2 * F);
    cpu::swiglu_forward(out.data(), inp.data(), N, F);
    cpu::swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
    cuda::Context ctx(0);
    DeviceBuffer<float> d_inp(inp), d_dout(dout), d_out(out.size()), d_dinp(dinp.size());
    cuda::swiglu_forward(d_out, d_inp, N, F, ctx.stream());
    cuda::swiglu_backward(d_dinp, d_inp, d_dout, N, F, ctx.stream());
    // expf against the CPU's exp_approx (relative error ~2e-7): a few ulps of values of order 1-10.
    CHECK(mismatches("out", d_out.get(), out, 1e-6, 2e-6) == 0);
    CHECK(mismatches("dinp", d_dinp.get(), dinp, 1e-6, 2e-6) == 0);
}

TEST_CASE("cuda swiglu forward and backward match the CPU", "[cuda][llama]") {
    REQUIRE_GPU_OR_SKIP();
    check_swiglu(3, 5, 300);
    check_swiglu(1000, 352, 310);
    check_swiglu(64, 2048, 320);
}

// The Llama's embedding: no position table (wpe null on both sides), so forward is wte's rows and
// backward adds into dwte alone; bit for bit, as the GPT's encoder.
TEST_CASE("cuda encoder without a position table matches the CPU bit for bit", "[cuda][llama]") {
    REQUIRE_GPU_OR_SKIP();
    const int B = 3, T = 50, C = 40, V = 11, stride = T + 1;
    auto tokens = randint((size_t)B * stride, 400, V);
    auto wte = randn((size_t)V * C, 401), dout = randn((size_t)B * T * C, 402), dwte0 = randn((size_t)V * C, 403);
    std::vector<float> out((size_t)B * T * C), dwte = dwte0;
    cpu::encoder_forward(out.data(), tokens.data(), stride, wte.data(), nullptr, B, T, C);
    cpu::encoder_backward(dwte.data(), nullptr, dout.data(), tokens.data(), stride, B, T, C);
    cuda::Context ctx(0);
    DeviceBuffer<int> d_tokens(tokens);
    DeviceBuffer<float> d_wte(wte), d_dout(dout), d_dwte(dwte0), d_out((size_t)B * T * C);
    cuda::encoder_forward(d_out, d_tokens, stride, d_wte, nullptr, B, T, C, ctx.stream());
    CHECK(bit_mismatches("out", d_out.get(), out) == 0);
    cuda::encoder_backward(d_dwte, nullptr, d_dout, d_tokens, stride, B, T, C, ctx, ctx.stream());
    CHECK(bit_mismatches("dwte", d_dwte.get(), dwte) == 0);
}

// round_bf16: cpu::round_bf16's bits, in place and not, over values that round both ways, ties,
// the largest finite values (which round to infinity), subnormals, infinities and NaN.
TEST_CASE("cuda round_bf16 matches the CPU bit for bit", "[cuda][llama]") {
    REQUIRE_GPU_OR_SKIP();
    std::vector<float> x = randn(10007, 410, 3.0f);
    const float specials[] = {0.0f, -0.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 3.3895314e38f, -3.4028235e38f,
                              1e-40f, -1e-42f, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); ++i) x[i * 7] = specials[i];
    std::vector<float> want(x.size());
    cpu::round_bf16(want.data(), x.data(), (long)x.size());
    cuda::Context ctx(0);
    DeviceBuffer<float> d_x(x), d_out(x.size());
    cuda::round_bf16(d_out, d_x, x.size(), ctx.stream());
    CHECK(bit_mismatches("out", d_out.get(), want) == 0);
    cuda::round_bf16(d_x, d_x, x.size(), ctx.stream());
    CHECK(bit_mismatches("in place", d_x.get(), want) == 0);
}
