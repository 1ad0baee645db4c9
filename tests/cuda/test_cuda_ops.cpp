// Every CUDA op against its CPU twin on fresh seeded random inputs (ggml test-backend-ops style):
// run both, copy back, compare with the tolerance written beside each check and the reason for it.
// Shapes include sizes that are not multiples of 32 and row counts larger than one thread block.
// Without a GPU each case prints SKIPPED (once) and passes; with one, every comparison can fail.
// Not for: the backward formulas themselves (tests/unit/test_ops.cpp checks the CPU twins against
// finite differences; here the CPU is the reference).
#include "helpers.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/bf16.h"
#include "dptrain/backend/cuda/ops.h"
#include "dptrain/model/optim.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace dptrain;
using cudatest::DeviceBuffer;
using cudatest::bf16_mismatches;
using cudatest::bit_mismatches;
using cudatest::mismatches;
using cudatest::randint;
using cudatest::randn;

static std::vector<float> absolute(std::vector<float> v) {
    for (auto& x : v) x = std::fabs(x);
    return v;
}

static std::vector<float> plus_abs(std::vector<float> a, const std::vector<float>& b) {
    for (size_t i = 0; i < a.size(); ++i) a[i] += std::fabs(b[i]);
    return a;
}

// The first `cols` values of each of `rows` rows `stride` apart, packed; *written counts the values
// past them that differ from `poison` (what an op that must not touch the padding left there).
static std::vector<bf16> packed_rows(const std::vector<bf16>& padded, int rows, int cols, int stride, bf16 poison,
                                     long* written) {
    std::vector<bf16> out((size_t)rows * cols);
    *written = 0;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < stride; ++c) {
            const bf16 x = padded[(size_t)r * stride + c];
            if (c < cols) out[(size_t)r * cols + c] = x;
            else *written += x != poison;
        }
    return out;
}

// fp32 GEMM tolerance: 1e-5 of the sum of |a||b| behind each element. Both sides round each
// partial sum to fp32 (error ~6e-8 of that sum per element in practice, ~K*6e-8 worst case for
// K = 768 would be 5e-5 but random signs keep it far below); a wrong layout or transpose is off
// by O(1) of it.
static constexpr double kGemmRel = 1e-5;

static void check_matmul(int B, int C, int OC, bool with_bias, uint64_t seed) {
    INFO("matmul B=" << B << " C=" << C << " OC=" << OC << (with_bias ? " with bias" : " no bias"));
    auto inp = randn((size_t)B * C, seed), w = randn((size_t)OC * C, seed + 1), bias = randn(OC, seed + 2);
    auto dout = randn((size_t)B * OC, seed + 3);
    auto dw0 = randn((size_t)OC * C, seed + 4), db0 = randn(OC, seed + 5);  // gradients accumulate onto these
    const float* bias_ptr = with_bias ? bias.data() : nullptr;

    // CPU reference, and the magnitudes behind each element (the same products on |values|).
    std::vector<float> out((size_t)B * OC), dinp((size_t)B * C), dw = dw0, db = db0;
    cpu::matmul_forward(out.data(), inp.data(), w.data(), bias_ptr, B, C, OC);
    cpu::matmul_backward(with_bias ? dinp.data() : nullptr, dw.data(), with_bias ? db.data() : nullptr, dout.data(),
                         inp.data(), w.data(), B, C, OC);
    auto ainp = absolute(inp), aw = absolute(w), adout = absolute(dout);
    std::vector<float> s_out((size_t)B * OC), s_dinp((size_t)B * C), s_dw((size_t)OC * C, 0.0f), s_db(OC, 0.0f);
    cpu::matmul_forward(s_out.data(), ainp.data(), aw.data(), with_bias ? absolute(bias).data() : nullptr, B, C, OC);
    cpu::matmul_backward(s_dinp.data(), s_dw.data(), s_db.data(), adout.data(), ainp.data(), aw.data(), B, C, OC);
    s_dw = plus_abs(s_dw, dw0);
    s_db = plus_abs(s_db, db0);

    cuda::Context ctx(0);
    DeviceBuffer<float> d_inp(inp), d_w(w), d_bias(bias), d_dout(dout), d_dw(dw0), d_db(db0);
    DeviceBuffer<float> d_out((size_t)B * OC), d_dinp((size_t)B * C);
    cuda::matmul_forward(d_out, d_inp, d_w, with_bias ? (float*)d_bias : nullptr, B, C, OC, ctx, ctx.stream());
    cuda::matmul_backward(with_bias ? (float*)d_dinp : nullptr, d_dw, with_bias ? (float*)d_db : nullptr, d_dout, d_inp,
                          d_w, B, C, OC, ctx, ctx.stream());
    CHECK(mismatches("out", d_out.get(), out, 0.0, kGemmRel, s_out) == 0);
    CHECK(mismatches("dweight", d_dw.get(), dw, 0.0, kGemmRel, s_dw) == 0);
    if (with_bias) {
        CHECK(mismatches("dinp", d_dinp.get(), dinp, 0.0, kGemmRel, s_dinp) == 0);
        CHECK(mismatches("dbias", d_db.get(), db, 0.0, kGemmRel, s_db) == 0);
        // The column sums run in a fixed order: a second pass adds exactly the same amount.
        auto db1 = d_db.get();
        d_db.set(db0);
        cuda::matmul_backward(nullptr, d_dw, d_db, d_dout, d_inp, d_w, B, C, OC, ctx, ctx.stream());
        CHECK(bit_mismatches("dbias (second run)", d_db.get(), db1) == 0);
    } else {
        CHECK(d_db.get() == db0);  // null dbias: left alone
    }
    // accumulate = false (a gradient's first writer): dweight and dbias written, what the CPU adds
    // onto zeros (NaNs first: a value not written shows); with no rows, zeros.
    {
        std::vector<float> dw_z((size_t)OC * C, 0.0f), db_z(OC, 0.0f), t_dw((size_t)OC * C, 0.0f), t_db(OC, 0.0f);
        cpu::matmul_backward(nullptr, dw_z.data(), db_z.data(), dout.data(), inp.data(), w.data(), B, C, OC);
        cpu::matmul_backward(nullptr, t_dw.data(), t_db.data(), adout.data(), ainp.data(), aw.data(), B, C, OC);
        const std::vector<float> nan_w((size_t)OC * C, NAN), nan_b(OC, NAN);
        DeviceBuffer<float> d_dw_w(nan_w), d_db_w(nan_b);
        cuda::matmul_backward(nullptr, d_dw_w, d_db_w, d_dout, d_inp, d_w, B, C, OC, ctx, ctx.stream(), false);
        CHECK(mismatches("dweight (written)", d_dw_w.get(), dw_z, 0.0, kGemmRel, t_dw) == 0);
        CHECK(mismatches("dbias (written)", d_db_w.get(), db_z, 0.0, kGemmRel, t_db) == 0);
        d_dw_w.set(nan_w);
        d_db_w.set(nan_b);
        cuda::matmul_backward(nullptr, d_dw_w, d_db_w, d_dout, d_inp, d_w, 0, C, OC, ctx, ctx.stream(), false);
        CHECK(d_dw_w.get() == std::vector<float>((size_t)OC * C, 0.0f));
        CHECK(d_db_w.get() == std::vector<float>(OC, 0.0f));
    }

    // Another stream than the context's: cuBLAS is rebound to it (and its default workspace).
    cudaStream_t other = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
    DeviceBuffer<float> d_out2((size_t)B * OC);
    cuda::matmul_forward(d_out2, d_inp, d_w, with_bias ? (float*)d_bias : nullptr, B, C, OC, ctx, other);
    CHECK(mismatches("out (other stream)", d_out2.get(), out, 0.0, kGemmRel, s_out) == 0);
    cuda::matmul_forward(d_out2, d_inp, d_w, with_bias ? (float*)d_bias : nullptr, B, C, OC, ctx, ctx.stream());
    CHECK(mismatches("out (back on the context's stream)", d_out2.get(), out, 0.0, kGemmRel, s_out) == 0);
    REQUIRE(cudaStreamDestroy(other) == cudaSuccess);
}

TEST_CASE("cuda matmul_forward/backward fp32 match the CPU", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    check_matmul(1037, 197, 131, true, 100);   // nothing a multiple of 32
    check_matmul(256, 768, 2304, true, 200);   // a GPT-2 qkv projection's shape
    check_matmul(333, 65, 7, false, 300);      // no bias, no dinp, tiny OC
}

// matmul_forward_rows: the CPU twin's result within the GEMM tolerance (the two sum in other
// orders), and every row's bits the same whether computed with all B rows, or in calls of 1, 3 or
// 9 rows (what decoding a request alone or batched relies on); its bf16-weight form.
static void check_matmul_rows(int B, int C, int OC, bool with_bias, uint64_t seed) {
    INFO("matmul_forward_rows B=" << B << " C=" << C << " OC=" << OC << (with_bias ? " with bias" : " no bias"));
    const auto inp = randn((size_t)B * C, seed), w = randn((size_t)OC * C, seed + 1), bias = randn(OC, seed + 2);
    std::vector<float> out((size_t)B * OC), s_out((size_t)B * OC);
    cpu::matmul_forward_rows(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, B, C, OC);
    cpu::matmul_forward(s_out.data(), absolute(inp).data(), absolute(w).data(),
                        with_bias ? absolute(bias).data() : nullptr, B, C, OC);
    DeviceBuffer<float> d_inp(inp), d_w(w), d_bias(bias), d_out((size_t)B * OC);
    float* d_b = with_bias ? (float*)d_bias : nullptr;
    cuda::matmul_forward_rows(d_out, d_inp, d_w, d_b, B, C, OC, nullptr);
    const auto all = d_out.get();
    CHECK(mismatches("out", all, out, 0.0, kGemmRel, s_out) == 0);
    for (int rows : {1, 3, 9}) {
        INFO("calls of " << rows << " rows");
        std::vector<float> apart((size_t)B * OC);
        DeviceBuffer<float> d_some((size_t)rows * OC);
        for (int r0 = 0; r0 < B; r0 += rows) {
            const int n = std::min(rows, B - r0);
            cuda::matmul_forward_rows(d_some, (float*)d_inp + (size_t)r0 * C, d_w, d_b, n, C, OC, nullptr);
            const auto some = d_some.get();
            std::copy(some.begin(), some.begin() + (size_t)n * OC, apart.begin() + (size_t)r0 * OC);
        }
        CHECK(bit_mismatches("out (rows apart)", apart, all) == 0);
    }
    // bf16 weights: the fp32 form's bits on the widened weights; from_bf16 widens as the CPU does.
    std::vector<bf16> w16(w.size());
    dptrain::to_bf16(w16.data(), w.data(), w.size());
    std::vector<float> widened(w.size());
    dptrain::from_bf16(widened.data(), w16.data(), w.size());
    DeviceBuffer<bf16> d_w16(w16);
    DeviceBuffer<float> d_wide((size_t)OC * C), d_out16((size_t)B * OC), d_outw((size_t)B * OC);
    cuda::from_bf16(d_wide, d_w16, w.size(), nullptr);
    CHECK(bit_mismatches("from_bf16", d_wide.get(), widened) == 0);
    cuda::matmul_forward_rows(d_out16, d_inp, d_w16, d_b, B, C, OC, nullptr);
    cuda::matmul_forward_rows(d_outw, d_inp, d_wide, d_b, B, C, OC, nullptr);
    CHECK(bit_mismatches("out (bf16 weights)", d_out16.get(), d_outw.get()) == 0);
}

TEST_CASE("cuda matmul_forward_rows matches the CPU, and a row's bits do not depend on the rows beside it", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    check_matmul_rows(13, 197, 131, true, 400);    // nothing a multiple of 32
    check_matmul_rows(17, 768, 2304, true, 500);   // a GPT-2 qkv projection's shape
    check_matmul_rows(3, 768, 50257, false, 600);  // GPT-2's logits: no bias, thousands of blocks
}

TEST_CASE("cuda to_bf16 rounds exactly as the CPU", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    // Ties to even (1 + 2^-8 down to 1, 1 + 3*2^-8 up), subnormals, overflow to inf, inf, NaN.
    std::vector<float> x = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, -1.00390625f, 1e-40f, -3e-39f,
                            3.4e38f, std::numeric_limits<float>::max(), inf, -inf, nan, -nan, 65504.0f, 0.1f};
    auto r = randn(100003, 7, 10.0f);
    x.insert(x.end(), r.begin(), r.end());
    uint32_t bits = 0x7FC12345u;  // a NaN with a payload
    float payload_nan;
    std::memcpy(&payload_nan, &bits, 4);
    x.push_back(payload_nan);

    std::vector<bf16> want(x.size());
    dptrain::to_bf16(want.data(), x.data(), x.size());
    DeviceBuffer<float> d_x(x);
    DeviceBuffer<bf16> d_y(x.size());
    cudaStream_t stream = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    cuda::to_bf16(d_y, d_x, x.size(), stream);
    auto got = d_y.get();
    int bad = 0;
    for (size_t i = 0; i < x.size(); ++i)  // exact: the same integer arithmetic on the bits
        if (got[i] != want[i] || got[i] != float_to_bf16(x[i]))
            if (++bad <= 5) WARN("to_bf16(" << x[i] << "): cuda " << got[i] << " cpu " << want[i]);
    CHECK(bad == 0);
    REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
}

// The bf16 widened back to float, and x's values rounded to bf16 (as a bf16 buffer holds them).
static std::vector<float> widened(const std::vector<bf16>& h) {
    std::vector<float> f(h.size());
    from_bf16(f.data(), h.data(), h.size());
    return f;
}
static std::vector<bf16> rounded(const std::vector<float>& x) {
    std::vector<bf16> h(x.size());
    dptrain::to_bf16(h.data(), x.data(), x.size());
    return h;
}

// must_fuse: the shape is one cuBLASLt has a bias-epilogue algorithm for on this GPU (GPT-2's,
// from Ampere on), so the fused path must have run; elsewhere a fallback only warns.
static void check_matmul_bf16(int B, int C, int OC, uint64_t seed, bool must_fuse = false) {
    INFO("matmul_bf16 B=" << B << " C=" << C << " OC=" << OC);
    auto inp = randn((size_t)B * C, seed), w = randn((size_t)OC * C, seed + 1), bias = randn(OC, seed + 2);
    std::vector<bf16> inp16(inp.size()), w16(w.size());
    dptrain::to_bf16(inp16.data(), inp.data(), inp.size());
    dptrain::to_bf16(w16.data(), w.data(), w.size());
    std::vector<float> inp_r(inp.size()), w_r(w.size());  // the inputs as the GPU sees them
    from_bf16(inp_r.data(), inp16.data(), inp16.size());
    from_bf16(w_r.data(), w16.data(), w16.size());

    std::vector<float> want_r((size_t)B * OC), want((size_t)B * OC), scale((size_t)B * OC);
    cpu::matmul_forward(want_r.data(), inp_r.data(), w_r.data(), bias.data(), B, C, OC);
    cpu::matmul_forward(want.data(), inp.data(), w.data(), bias.data(), B, C, OC);
    cpu::matmul_forward(scale.data(), absolute(inp).data(), absolute(w).data(), absolute(bias).data(), B, C, OC);

    cuda::Context ctx(0);
    // Converted on the device, as the trainer will.
    DeviceBuffer<float> d_inp(inp), d_w(w), d_bias(bias), d_out((size_t)B * OC);
    DeviceBuffer<bf16> d_inp16(inp.size()), d_w16(w.size());
    cuda::to_bf16(d_inp16, d_inp, inp.size(), ctx.stream());
    cuda::to_bf16(d_w16, d_w, w.size(), ctx.stream());
    // Both ways of adding the bias: in cuBLASLt's epilogue (where it has an algorithm: counted)
    // and as a fill before the GEMM; each writes every output (the buffer starts as garbage).
    for (bool epilogue : {true, false}) {
        INFO("bias epilogue " << (epilogue ? "on" : "off"));
        ctx.set_epilogues(epilogue);
        const long fused0 = ctx.fused_bias_gemms(), unfused0 = ctx.unfused_bias_gemms();
        REQUIRE(cudaMemsetAsync(d_out, 0xff, (size_t)B * OC * sizeof(float), ctx.stream()) == cudaSuccess);  // NaNs
        cuda::matmul_forward_bf16(d_out, d_inp16, d_w16, d_bias, B, C, OC, ctx, ctx.stream());
        auto got = d_out.get();
        CHECK(ctx.fused_bias_gemms() + ctx.unfused_bias_gemms() == fused0 + unfused0 + 1);
        if (!epilogue) CHECK(ctx.fused_bias_gemms() == fused0);
        if (epilogue && must_fuse) CHECK(ctx.fused_bias_gemms() == fused0 + 1);
        if (epilogue && ctx.fused_bias_gemms() == fused0)
            WARN("cuBLASLt offered no bias-epilogue algorithm for B=" << B << " C=" << C << " OC=" << OC
                                                                        << ": the separate bias pass ran");
        // Against the CPU on the same rounded inputs: bf16 x bf16 products are exact in fp32 and
        // the tensor cores sum in fp32 (with truncating alignment, a few ulps more than a CPU
        // sum), so 1e-4 of the |a||b| sum holds with margin while a layout error is off by O(1).
        CHECK(mismatches("out vs rounded inputs", got, want_r, 0.0, 1e-4, scale) == 0);
        // Against fp32 inputs: the cost of bf16 itself, each input rounded by up to 2^-9, so each
        // product is within ~4e-3 of |a||b|: 1e-2 of the sum.
        CHECK(mismatches("out vs fp32 inputs", got, want, 0.0, 1e-2, scale) == 0);
        // The bf16-output form. Without the epilogue it is this fp32 result (the same GEMM) rounded,
        // bit for bit; with it, cuBLASLt rounds its own fp32 sum, which may be another algorithm's:
        // the rounded-inputs bound plus a rounding to bf16 (up to 2^-8 of |out|: 40 |out| at 1e-4).
        DeviceBuffer<bf16> d_out16((size_t)B * OC);
        DeviceBuffer<float> d_staging((size_t)B * OC);
        REQUIRE(cudaMemsetAsync(d_out16, 0xff, (size_t)B * OC * sizeof(bf16), ctx.stream()) == cudaSuccess);  // NaNs
        const long fused16 = ctx.fused_bias_gemms(), direct16 = ctx.direct_out16_gemms();
        const long staged16 = ctx.staged_out16_gemms();
        cuda::matmul_forward_bf16_out(d_out16, d_inp16, d_w16, d_bias, B, C, OC, d_staging, ctx, ctx.stream());
        auto got16 = d_out16.get();
        CHECK(ctx.direct_out16_gemms() + ctx.staged_out16_gemms() == direct16 + staged16 + 1);
        if (!epilogue) CHECK(ctx.direct_out16_gemms() == direct16);
        if (epilogue && ctx.fused_bias_gemms() == fused16)
            WARN("cuBLASLt offered no bias epilogue for the bf16-output form at B=" << B << " C=" << C << " OC=" << OC);
        else if (epilogue && ctx.direct_out16_gemms() == direct16)
            WARN("cuBLASLt offered no bf16 output with the fp32 bias at B="
                 << B << " C=" << C << " OC=" << OC << ": fp32 staging and a rounding pass ran");
        if (!epilogue) {
            CHECK(bf16_mismatches("bf16 out (separate bias)", got16, got) == 0);
        } else {
            std::vector<float> got16f(got16.size()), scale16(scale.size());
            from_bf16(got16f.data(), got16.data(), got16.size());
            for (size_t i = 0; i < scale.size(); ++i) scale16[i] = scale[i] + 40.0f * std::fabs(want_r[i]);
            CHECK(mismatches("bf16 out vs rounded inputs", got16f, want_r, 0.0, 1e-4, scale16) == 0);
        }
    }
    ctx.set_epilogues(true);
    // Without a bias (the GPT's classifier) the bf16-output form is cuBLAS's own bf16 store, with no
    // staging and no other path (not counted), into rows ld values apart (the padding untouched):
    // the rounded-inputs bound plus a rounding.
    const int ld = (OC + 63) / 64 * 64 + 8;  // past OC, and not the next multiple of 64 only
    {
        std::vector<float> want_nb((size_t)B * OC), scale_nb((size_t)B * OC);
        cpu::matmul_forward(want_nb.data(), inp_r.data(), w_r.data(), nullptr, B, C, OC);
        cpu::matmul_forward(scale_nb.data(), absolute(inp_r).data(), absolute(w_r).data(), nullptr, B, C, OC);
        for (size_t i = 0; i < scale_nb.size(); ++i) scale_nb[i] += 40.0f * std::fabs(want_nb[i]);
        DeviceBuffer<bf16> d_nb((size_t)B * ld);
        REQUIRE(cudaMemsetAsync(d_nb, 0xff, (size_t)B * ld * sizeof(bf16), ctx.stream()) == cudaSuccess);  // NaNs
        const long counted = ctx.direct_out16_gemms() + ctx.staged_out16_gemms();
        const long bias_gemms = ctx.fused_bias_gemms() + ctx.unfused_bias_gemms();
        cuda::matmul_forward_bf16_out(d_nb, d_inp16, d_w16, nullptr, B, C, OC, nullptr, ctx, ctx.stream(), ld);
        long padding_written = 0;
        const auto got_nb16 = packed_rows(d_nb.get(), B, OC, ld, 0xFFFF, &padding_written);
        std::vector<float> got_nb(got_nb16.size());
        from_bf16(got_nb.data(), got_nb16.data(), got_nb16.size());
        CHECK(mismatches("bf16 out without a bias", got_nb, want_nb, 0.0, 1e-4, scale_nb) == 0);
        CHECK(padding_written == 0);
        CHECK(ctx.direct_out16_gemms() + ctx.staged_out16_gemms() == counted);
        CHECK(ctx.fused_bias_gemms() + ctx.unfused_bias_gemms() == bias_gemms);
    }
    // The same shape again with another bias: the plan found above is reused, and must take the
    // new bias pointer (the models' biases start at zero, so their tests would not see a stale one).
    {
        auto bias2 = randn(OC, seed + 6, 2.0f, 1.0f);
        std::vector<float> want2((size_t)B * OC), scale2((size_t)B * OC);
        cpu::matmul_forward(want2.data(), inp_r.data(), w_r.data(), bias2.data(), B, C, OC);
        cpu::matmul_forward(scale2.data(), absolute(inp_r).data(), absolute(w_r).data(), absolute(bias2).data(), B, C,
                            OC);
        DeviceBuffer<float> d_bias2(bias2);
        cuda::matmul_forward_bf16(d_out, d_inp16, d_w16, d_bias2, B, C, OC, ctx, ctx.stream());
        CHECK(mismatches("out with a second bias", d_out.get(), want2, 0.0, 1e-4, scale2) == 0);
    }

    // Backward on bf16 operands (dout, inp, weight rounded on the device), fp32 results: against
    // the CPU's fp32 backward of the same rounded values, gradients added onto non-zero ones.
    auto dout = randn((size_t)B * OC, seed + 3);
    std::vector<bf16> dout16(dout.size());
    dptrain::to_bf16(dout16.data(), dout.data(), dout.size());
    std::vector<float> dout_r(dout.size());
    from_bf16(dout_r.data(), dout16.data(), dout16.size());
    auto dw0 = randn((size_t)OC * C, seed + 4), db0 = randn(OC, seed + 5);
    std::vector<float> dinp((size_t)B * C), dw = dw0, db = db0;
    cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout_r.data(), inp_r.data(), w_r.data(), B, C, OC);
    auto ainp = absolute(inp_r), aw = absolute(w_r), adout = absolute(dout_r);
    std::vector<float> s_dinp((size_t)B * C), s_dw((size_t)OC * C, 0.0f), s_db(OC, 0.0f);
    cpu::matmul_backward(s_dinp.data(), s_dw.data(), s_db.data(), adout.data(), ainp.data(), aw.data(), B, C, OC);
    // Onto zeros, for accumulate = false (written, not added to), and the sums of |terms| there.
    std::vector<float> dw_z((size_t)OC * C, 0.0f), db_z(OC, 0.0f), t_dw = s_dw, t_db = s_db;
    cpu::matmul_backward(nullptr, dw_z.data(), db_z.data(), dout_r.data(), inp_r.data(), w_r.data(), B, C, OC);
    s_dw = plus_abs(s_dw, dw0);
    s_db = plus_abs(s_db, db0);
    DeviceBuffer<float> d_dout(dout), d_dinp((size_t)B * C), d_dw(dw0), d_db(db0);
    DeviceBuffer<bf16> d_dout16(dout.size());
    cuda::to_bf16(d_dout16, d_dout, dout.size(), ctx.stream());
    // Both ways of summing the bias gradient: in the weight-gradient GEMM's epilogue (where
    // cuBLASLt has an algorithm: counted) and as column sums; each from the same start.
    for (bool epilogue : {true, false}) {
        INFO("bias-gradient epilogue " << (epilogue ? "on" : "off"));
        ctx.set_epilogues(epilogue);
        d_dw.set(dw0);
        d_db.set(db0);
        REQUIRE(cudaMemsetAsync(d_dinp, 0xff, (size_t)B * C * sizeof(float), ctx.stream()) == cudaSuccess);  // NaNs
        const long fused0 = ctx.fused_bias_grads(), unfused0 = ctx.unfused_bias_grads();
        cuda::matmul_backward_bf16(d_dinp, d_dw, d_db, d_dout16, d_inp16, d_w16, B, C, OC, ctx, ctx.stream());
        CHECK(mismatches("dinp (bf16 operands)", d_dinp.get(), dinp, 0.0, 1e-4, s_dinp) == 0);
        const auto got_dw = d_dw.get(), got_db = d_db.get();
        CHECK(mismatches("dweight (bf16 operands)", got_dw, dw, 0.0, 1e-4, s_dw) == 0);
        CHECK(ctx.fused_bias_grads() + ctx.unfused_bias_grads() == fused0 + unfused0 + 1);
        const bool fused = ctx.fused_bias_grads() > fused0;
        if (!epilogue) CHECK_FALSE(fused);
        if (epilogue && !fused)
            WARN("cuBLASLt offered no bias-gradient epilogue at B=" << B << " C=" << C << " OC=" << OC);
        // The bias gradient sums the same bf16 values in fp32: the column sums in their fixed order
        // (within the fp32 GEMM bound), cuBLASLt in its own (within the bf16-operand GEMMs' 1e-4).
        CHECK(mismatches("dbias (bf16 operands)", got_db, db, 0.0, fused ? 1e-4 : kGemmRel, s_db) == 0);
        if (fused) {  // and the same bits when run again from the same start
            d_dw.set(dw0);
            d_db.set(db0);
            cuda::matmul_backward_bf16(d_dinp, d_dw, d_db, d_dout16, d_inp16, d_w16, B, C, OC, ctx, ctx.stream());
            CHECK(bit_mismatches("dweight (epilogue, second run)", d_dw.get(), got_dw) == 0);
            CHECK(bit_mismatches("dbias (epilogue, second run)", d_db.get(), got_db) == 0);
        }
        // accumulate = false: written (NaNs first), what the CPU adds onto zeros; beta 0 in either
        // GEMM, = in either bias-gradient pass.
        d_dw.set(std::vector<float>((size_t)OC * C, NAN));
        d_db.set(std::vector<float>(OC, NAN));
        cuda::matmul_backward_bf16(nullptr, d_dw, d_db, d_dout16, d_inp16, d_w16, B, C, OC, ctx, ctx.stream(), 0,
                                   false);
        CHECK(mismatches("dweight (bf16 operands, written)", d_dw.get(), dw_z, 0.0, 1e-4, t_dw) == 0);
        CHECK(mismatches("dbias (bf16 operands, written)", d_db.get(), db_z, 0.0, fused ? 1e-4 : kGemmRel, t_db) == 0);
        cuda::matmul_backward_bf16(nullptr, d_dw, d_db, d_dout16, d_inp16, d_w16, 0, C, OC, ctx, ctx.stream(), 0,
                                   false);  // no rows: zeros
        CHECK(d_dw.get() == std::vector<float>((size_t)OC * C, 0.0f));
        CHECK(d_db.get() == std::vector<float>(OC, 0.0f));
    }
    ctx.set_epilogues(true);
    // The bf16-output form (the GPT's input gradients that LayerNorm's and flash attention's
    // backward read as bf16): dinp as cuBLAS rounds its fp32 sums, so within the fp32 form's 1e-4
    // of the sum of |terms| s, plus half a bf16 step (up to 2^-8 of the value): 1e-4 of
    // s + 40 |dinp|, as the forward's bf16 output above; every value written (NaNs first); dweight
    // and dbias from the same code as above (the bias gradient in the epilogue where it ran).
    std::vector<float> s_dinp16 = s_dinp;
    for (size_t i = 0; i < s_dinp16.size(); ++i) s_dinp16[i] += 40.0f * std::fabs(dinp[i]);
    {
        DeviceBuffer<bf16> d_dinp16(std::vector<bf16>((size_t)B * C, 0x7FC0));
        d_dw.set(dw0);
        d_db.set(db0);
        const long fused0 = ctx.fused_bias_grads();
        cuda::matmul_backward_bf16_out(d_dinp16, d_dw, d_db, d_dout16, d_inp16, d_w16, B, C, OC, ctx, ctx.stream());
        const bool fused = ctx.fused_bias_grads() > fused0;
        CHECK(mismatches("dinp (bf16 output)", widened(d_dinp16.get()), dinp, 0.0, 1e-4, s_dinp16) == 0);
        CHECK(mismatches("dweight (with a bf16 dinp)", d_dw.get(), dw, 0.0, 1e-4, s_dw) == 0);
        CHECK(mismatches("dbias (with a bf16 dinp)", d_db.get(), db, 0.0, fused ? 1e-4 : kGemmRel, s_db) == 0);
    }
    // Without a bias gradient (the classifier's backward), dout in rows ld values apart with NaNs in
    // the padding, which must not be read: dinp and dweight as with packed rows.
    {
        std::vector<bf16> dout_pad((size_t)B * ld, 0x7FC0);
        for (int b = 0; b < B; ++b)
            for (int o = 0; o < OC; ++o) dout_pad[(size_t)b * ld + o] = dout16[(size_t)b * OC + o];
        std::vector<float> dinp_nb((size_t)B * C), dw_nb = dw0;
        cpu::matmul_backward(dinp_nb.data(), dw_nb.data(), nullptr, dout_r.data(), inp_r.data(), w_r.data(), B, C, OC);
        DeviceBuffer<bf16> d_dout_pad(dout_pad);
        d_dw.set(dw0);
        REQUIRE(cudaMemsetAsync(d_dinp, 0xff, (size_t)B * C * sizeof(float), ctx.stream()) == cudaSuccess);  // NaNs
        cuda::matmul_backward_bf16(d_dinp, d_dw, nullptr, d_dout_pad, d_inp16, d_w16, B, C, OC, ctx, ctx.stream(), ld);
        CHECK(mismatches("dinp (dout rows padded)", d_dinp.get(), dinp_nb, 0.0, 1e-4, s_dinp) == 0);
        CHECK(mismatches("dweight (dout rows padded)", d_dw.get(), dw_nb, 0.0, 1e-4, s_dw) == 0);
        DeviceBuffer<bf16> d_dinp16(std::vector<bf16>((size_t)B * C, 0x7FC0));
        d_dw.set(dw0);
        cuda::matmul_backward_bf16_out(d_dinp16, d_dw, nullptr, d_dout_pad, d_inp16, d_w16, B, C, OC, ctx,
                                       ctx.stream(), ld);
        CHECK(mismatches("dinp (bf16 output, dout rows padded)", widened(d_dinp16.get()), dinp_nb, 0.0, 1e-4,
                         s_dinp16) == 0);
        CHECK(mismatches("dweight (bf16 dinp, dout rows padded)", d_dw.get(), dw_nb, 0.0, 1e-4, s_dw) == 0);
    }
}

TEST_CASE("cuda matmul_forward_bf16 and matmul_backward_bf16 match the CPU on the rounded inputs", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    check_matmul_bf16(300, 200, 129, 400);
    cudaDeviceProp prop;
    REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
    check_matmul_bf16(128, 768, 3072, 500, prop.major >= 8);  // a GPT-2 MLP up-projection's shape
    check_matmul_bf16(64, 48, 144, 450);     // a small GPT's qkv (the integration tests' model)
}

// The fc matmul with GELU after it, and the backward of the matmul after GELU (the GPT's MLP in
// bf16), with cuBLASLt's GELU epilogues (where it has them: counted) and without, against the CPU
// composition on the same rounded operands: B rows, C -> OC (GELU's width) -> C.
static void check_matmul_gelu(int B, int C, int OC, uint64_t seed) {
    INFO("matmul + GELU, B=" << B << " C=" << C << " OC=" << OC);
    const auto inp16 = rounded(randn((size_t)B * C, seed)), w16 = rounded(randn((size_t)OC * C, seed + 1, 0.1f));
    const auto inp_r = widened(inp16), w_r = widened(w16);
    const auto bias = randn(OC, seed + 2, 0.5f);
    // GELU's input: the fp32 sum plus the bias, and the magnitudes behind it (the GEMM's bound).
    std::vector<float> pre((size_t)B * OC), s_pre((size_t)B * OC);
    cpu::matmul_forward(pre.data(), inp_r.data(), w_r.data(), bias.data(), B, C, OC);
    cpu::matmul_forward(s_pre.data(), absolute(inp_r).data(), absolute(w_r).data(), absolute(bias).data(), B, C, OC);

    cuda::Context ctx(0);
    cudaStream_t s = ctx.stream();
    DeviceBuffer<bf16> d_inp16(inp16), d_w16(w16), d_pre16((size_t)B * OC), d_out16((size_t)B * OC);
    DeviceBuffer<float> d_bias(bias), d_staging((size_t)B * OC);
    for (bool epilogue : {true, false}) {
        INFO("GELU epilogue " << (epilogue ? "on" : "off"));
        ctx.set_epilogues(epilogue);
        for (bf16* p : {(bf16*)d_pre16, (bf16*)d_out16})  // NaNs: a value not written shows
            REQUIRE(cudaMemsetAsync(p, 0xff, (size_t)B * OC * sizeof(bf16), s) == cudaSuccess);
        const long fused0 = ctx.fused_gelu_gemms(), unfused0 = ctx.unfused_gelu_gemms();
        cuda::matmul_forward_bf16_gelu(d_pre16, d_out16, d_inp16, d_w16, d_bias, B, C, OC, d_staging, ctx, s);
        const auto got_pre = widened(d_pre16.get()), got_out = widened(d_out16.get());
        CHECK(ctx.fused_gelu_gemms() + ctx.unfused_gelu_gemms() == fused0 + unfused0 + 1);
        const bool fused = ctx.fused_gelu_gemms() > fused0;
        if (!epilogue || OC % 8 != 0) CHECK_FALSE(fused);  // cuBLASLt's rule for GELU's input's stride
        if (epilogue && !fused)
            WARN("cuBLASLt offered no GELU_AUX_BIAS epilogue at B=" << B << " C=" << C << " OC=" << OC
                                                                    << ": matmul_forward_bf16 and GELU's pass ran");
        // pre: the GEMM's bound on the rounded operands (1e-4 of the |a||b| sum, as the bf16 matmul
        // tests) plus its rounding to bf16 (up to 2^-8 of |pre|, inside 40 * 1e-4).
        std::vector<float> s16(s_pre.size());
        for (size_t i = 0; i < s16.size(); ++i) s16[i] = s_pre[i] + 40.0f * std::fabs(pre[i]);
        CHECK(mismatches("pre (GELU's input, bf16)", got_pre, pre, 0.0, 1e-4, s16) == 0);
        // out against the tanh GELU of the CPU's fp32 sum (GELU of the unrounded value, on both
        // paths): the GEMM's bound times |GELU'| <= 1.13, one rounding to bf16 (up to 2^-8 of |out|;
        // 2^-7 leaves margin), and tanhf against the CPU's tanh_approx (1e-5, as the GELU test);
        // fused, cuBLASLt's own formula instead (the tanh approximation and the erf form differ by
        // 4.7e-4 at most: 2e-3; a hardware tanh's 2^-11 relative error moves GELU by |pre| 2^-12:
        // |pre| 2^-10). A layout or bias error is off by O(1).
        std::vector<float> want(pre.size()), s_out(pre.size());
        cpu::gelu_forward(want.data(), pre.data(), (long)want.size());
        for (size_t i = 0; i < want.size(); ++i)
            s_out[i] = 1.13e-4f * s_pre[i] + std::fabs(want[i]) / 128.0f + (fused ? std::fabs(pre[i]) / 1024.0f : 0.0f);
        CHECK(mismatches("out (GELU's output, bf16)", got_out, want, fused ? 2e-3 : 1e-5, 1.0, s_out) == 0);
        if (!fused) {  // the fallback's two sides from the fp32 sum it left in the staging, bit for bit
            DeviceBuffer<float> d_gelu32((size_t)B * OC);
            cuda::gelu_forward(d_gelu32, d_staging, (long)B * OC, s);
            CHECK(bf16_mismatches("pre (the staged sum, rounded)", d_pre16.get(), d_staging.get()) == 0);
            CHECK(bf16_mismatches("out (GELU of the staged sum, rounded)", d_out16.get(), d_gelu32.get()) == 0);
        }
        if (fused) {  // how far cuBLASLt's GELU sits from the tanh form, for the record
            double worst = 0;
            for (size_t i = 0; i < want.size(); ++i)
                worst = std::max(worst, std::fabs((double)got_out[i] - want[i]) - std::fabs(want[i]) / 256.0 -
                                            1.13e-4 * s_pre[i]);
            WARN("GELU epilogue at B=" << B << " C=" << C << " OC=" << OC << ": largest difference from the tanh "
                                       << "GELU beyond one bf16 rounding of the output: " << worst);
            // The plan found above, used again with another bias and other outputs: each pointer
            // must be the new one (the descriptor is shared), and the results those of the new bias.
            const auto bias2 = randn(OC, seed + 9, 0.5f, 1.0f);
            std::vector<float> pre2((size_t)B * OC), s_pre2((size_t)B * OC);
            cpu::matmul_forward(pre2.data(), inp_r.data(), w_r.data(), bias2.data(), B, C, OC);
            cpu::matmul_forward(s_pre2.data(), absolute(inp_r).data(), absolute(w_r).data(), absolute(bias2).data(),
                                B, C, OC);
            DeviceBuffer<float> d_bias2(bias2);
            DeviceBuffer<bf16> d_pre2((size_t)B * OC), d_out2((size_t)B * OC);
            for (bf16* p : {(bf16*)d_pre2, (bf16*)d_out2})
                REQUIRE(cudaMemsetAsync(p, 0xff, (size_t)B * OC * sizeof(bf16), s) == cudaSuccess);
            cuda::matmul_forward_bf16_gelu(d_pre2, d_out2, d_inp16, d_w16, d_bias2, B, C, OC, d_staging, ctx, s);
            const auto got_pre2 = widened(d_pre2.get()), got_out2 = widened(d_out2.get());
            for (size_t i = 0; i < s16.size(); ++i) s16[i] = s_pre2[i] + 40.0f * std::fabs(pre2[i]);
            CHECK(mismatches("pre with a second bias", got_pre2, pre2, 0.0, 1e-4, s16) == 0);
            cpu::gelu_forward(want.data(), pre2.data(), (long)want.size());
            for (size_t i = 0; i < want.size(); ++i)
                s_out[i] = 1.13e-4f * s_pre2[i] + std::fabs(want[i]) / 128.0f + std::fabs(pre2[i]) / 1024.0f;
            CHECK(mismatches("out with a second bias", got_out2, want, 2e-3, 1.0, s_out) == 0);
        }
    }

    // Backward of the matmul after GELU (OC -> C): its input is GELU's output, pre GELU's input.
    const int Cb = OC, OCb = C;
    const auto x16 = rounded(randn((size_t)B * Cb, seed + 3)), w2_16 = rounded(randn((size_t)OCb * Cb, seed + 4, 0.1f));
    const auto pre16 = rounded(randn((size_t)B * Cb, seed + 5, 2.0f));
    const auto dout16 = rounded(randn((size_t)B * OCb, seed + 6));
    const auto x_r = widened(x16), w2_r = widened(w2_16), pre_r = widened(pre16), dout_r = widened(dout16);
    const auto dw0 = randn((size_t)OCb * Cb, seed + 7), db0 = randn(OCb, seed + 8);
    std::vector<float> dinp((size_t)B * Cb), dw = dw0, db = db0, s_dinp((size_t)B * Cb);
    std::vector<float> s_dw((size_t)OCb * Cb, 0.0f), s_db(OCb, 0.0f);
    cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout_r.data(), x_r.data(), w2_r.data(), B, Cb, OCb);
    cpu::matmul_backward(s_dinp.data(), s_dw.data(), s_db.data(), absolute(dout_r).data(), absolute(x_r).data(),
                         absolute(w2_r).data(), B, Cb, OCb);
    std::vector<float> dw_z((size_t)OCb * Cb, 0.0f), db_z(OCb, 0.0f), t_dw = s_dw, t_db = s_db;  // onto zeros
    cpu::matmul_backward(nullptr, dw_z.data(), db_z.data(), dout_r.data(), x_r.data(), w2_r.data(), B, Cb, OCb);
    s_dw = plus_abs(s_dw, dw0);
    s_db = plus_abs(s_db, db0);
    std::vector<float> dpre(dinp.size()), ones(dinp.size(), 1.0f);
    cpu::gelu_backward(dpre.data(), pre_r.data(), dinp.data(), (long)dpre.size());
    DeviceBuffer<bf16> d_x16(x16), d_w2_16(w2_16), d_pre_in(pre16), d_dout16(dout16), d_dpre((size_t)B * Cb);
    DeviceBuffer<float> d_dw(dw0), d_db(db0), d_staging2((size_t)B * Cb);
    for (bool epilogue : {true, false}) {
        INFO("DGELU epilogue " << (epilogue ? "on" : "off"));
        ctx.set_epilogues(epilogue);
        d_dw.set(dw0);
        d_db.set(db0);
        REQUIRE(cudaMemsetAsync(d_dpre, 0xff, (size_t)B * Cb * sizeof(bf16), s) == cudaSuccess);
        const long fused0 = ctx.fused_dgelu_gemms(), unfused0 = ctx.unfused_dgelu_gemms();
        cuda::matmul_backward_bf16_gelu(d_dpre, d_dw, d_db, d_dout16, d_x16, d_w2_16, d_pre_in, B, Cb, OCb,
                                        d_staging2, ctx, s);
        const auto got = widened(d_dpre.get());
        CHECK(ctx.fused_dgelu_gemms() + ctx.unfused_dgelu_gemms() == fused0 + unfused0 + 1);
        const bool fused = ctx.fused_dgelu_gemms() > fused0;
        if (!epilogue || Cb % 8 != 0) CHECK_FALSE(fused);
        if (epilogue && !fused)
            WARN("cuBLASLt offered no DGELU epilogue at B=" << B << " C=" << Cb << " OC=" << OCb
                                                            << ": dinp in fp32 and gelu_backward_bf16 ran");
        // dpre = GELU'(pre) dinp, rounded: the GEMM's bound times |GELU'|, the derivative's formula
        // (tanhf against tanh_approx: 3e-5 absolute per unit of dinp, as the GELU test), one
        // rounding (up to 2^-8 of |dpre|; 2^-7 leaves margin) and, fused, cuBLASLt's own derivative:
        // the tanh and erf forms' derivatives differ by 8.7e-4 at most (2e-3), and a hardware tanh's
        // relative error of 2^-11 moves the derivative by up to 2^-11 (0.5 + 0.8 |x| (1 + 0.134 x^2))
        // (the derivative of 0.5 x (1 + t) in t, times t's error), each of |dinp|.
        auto dpre_bound = [&](const std::vector<float>& want_dpre, const std::vector<float>& at, bool own) {
            std::vector<float> bound(want_dpre.size()), slope(want_dpre.size());
            cpu::gelu_backward(slope.data(), at.data(), ones.data(), (long)slope.size());  // GELU'(at)
            for (size_t i = 0; i < bound.size(); ++i) {
                const float ax = std::fabs(at[i]);
                const float hw_tanh = (0.5f + 0.8f * ax * (1.0f + 0.134f * ax * ax)) / 2048.0f;
                const float formula = own ? 2e-3f + hw_tanh : 3e-5f;
                bound[i] = 1e-4f * std::fabs(slope[i]) * s_dinp[i] + std::fabs(want_dpre[i]) / 128.0f +
                           formula * std::fabs(dinp[i]);
            }
            return bound;
        };
        CHECK(mismatches("dpre (bf16)", got, dpre, 0.0, 1.0, dpre_bound(dpre, pre_r, fused)) == 0);
        CHECK(mismatches("dweight", d_dw.get(), dw, 0.0, 1e-4, s_dw) == 0);
        CHECK(mismatches("dbias", d_db.get(), db, 0.0, 1e-4, s_db) == 0);
        // accumulate = false: dweight and dbias written (NaNs first), dpre as before.
        REQUIRE(cudaMemsetAsync(d_dpre, 0xff, (size_t)B * Cb * sizeof(bf16), s) == cudaSuccess);
        d_dw.set(std::vector<float>((size_t)OCb * Cb, NAN));
        d_db.set(std::vector<float>(OCb, NAN));
        cuda::matmul_backward_bf16_gelu(d_dpre, d_dw, d_db, d_dout16, d_x16, d_w2_16, d_pre_in, B, Cb, OCb,
                                        d_staging2, ctx, s, false);
        CHECK(mismatches("dweight (written)", d_dw.get(), dw_z, 0.0, 1e-4, t_dw) == 0);
        CHECK(mismatches("dbias (written)", d_db.get(), db_z, 0.0, 1e-4, t_db) == 0);
        CHECK(mismatches("dpre (bf16, dweight written)", widened(d_dpre.get()), dpre, 0.0, 1.0,
                         dpre_bound(dpre, pre_r, fused)) == 0);
        if (fused) {  // the plan used again with another GELU input and output: the new pointers
            const auto pre2_16 = rounded(randn((size_t)B * Cb, seed + 10, 2.0f));
            const auto pre2_r = widened(pre2_16);
            std::vector<float> dpre2(dinp.size());
            cpu::gelu_backward(dpre2.data(), pre2_r.data(), dinp.data(), (long)dpre2.size());
            DeviceBuffer<bf16> d_pre2(pre2_16), d_dpre2((size_t)B * Cb);
            REQUIRE(cudaMemsetAsync(d_dpre2, 0xff, (size_t)B * Cb * sizeof(bf16), s) == cudaSuccess);
            cuda::matmul_backward_bf16_gelu(d_dpre2, d_dw, d_db, d_dout16, d_x16, d_w2_16, d_pre2, B, Cb, OCb,
                                            d_staging2, ctx, s);
            CHECK(mismatches("dpre with a second GELU input", widened(d_dpre2.get()), dpre2, 0.0, 1.0,
                             dpre_bound(dpre2, pre2_r, true)) == 0);
        }
    }
    ctx.set_epilogues(true);
}

TEST_CASE("cuda matmul_forward_bf16_gelu and matmul_backward_bf16_gelu match the CPU matmuls and GELU", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    check_matmul_gelu(128, 768, 3072, 600);  // GPT-2's MLP
    check_matmul_gelu(72, 48, 192, 650);     // a small GPT's (the model tests')
    check_matmul_gelu(40, 20, 60, 700);      // GELU's width not a multiple of 8: no epilogue, the passes
}

TEST_CASE("cuda relu, gelu and residual match the CPU", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const long N = 1000003;  // thousands of blocks, not a multiple of the block size
    auto x = randn(N, 11, 2.0f), dout = randn(N, 12), b = randn(N, 13);
    x[0] = 0.0f;  // ReLU's kink: both sides take the zero branch
    cudaStream_t stream = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    DeviceBuffer<float> d_x(x), d_dout(dout), d_b(b), d_out(N), d_dinp(N);
    std::vector<float> out(N), dinp(N);

    // ReLU is a comparison and a copy: exact.
    cpu::relu_forward(out.data(), x.data(), N);
    cpu::relu_backward(dinp.data(), x.data(), dout.data(), N);
    cuda::relu_forward(d_out, d_x, N, stream);
    cuda::relu_backward(d_dinp, d_x, d_dout, N, stream);
    CHECK(bit_mismatches("relu out", d_out.get(), out) == 0);
    CHECK(bit_mismatches("relu dinp", d_dinp.get(), dinp) == 0);

    // GELU: tanhf on the GPU, tanh_approx (abs error < 3e-7) on the CPU; times 0.5|x| and the
    // other factors (|x| <~ 8 here) that stays below ~3e-6: 1e-5 absolute. Backward multiplies by
    // the derivative's x^3 terms and dout: 3e-5 absolute. A wrong term is off by > 1e-2.
    cpu::gelu_forward(out.data(), x.data(), N);
    cpu::gelu_backward(dinp.data(), x.data(), dout.data(), N);
    cuda::gelu_forward(d_out, d_x, N, stream);
    cuda::gelu_backward(d_dinp, d_x, d_dout, N, stream);
    auto gelu_out = d_out.get(), gelu_dinp = d_dinp.get();
    CHECK(mismatches("gelu out", gelu_out, out, 1e-5, 0.0) == 0);
    CHECK(mismatches("gelu dinp", gelu_dinp, dinp, 3e-5, 0.0) == 0);
    // GELU's bf16 forms. Forward from the fp32 input: the input rounded and the fp32 form's out
    // rounded, bit for bit; backward from the rounded input: the fp32 form on the widened values,
    // rounded, bit for bit (outputs poisoned with NaNs first: a value not written shows).
    {
        std::vector<float> xr(N);
        cpu::round_bf16(xr.data(), x.data(), N);
        DeviceBuffer<float> d_xr(xr), d_out_r(N), d_dinp_r(N);
        DeviceBuffer<bf16> d_x16(N), d_pre16(N), d_out16(N), d_dinp16(N);
        cuda::to_bf16(d_x16, d_x, N, stream);
        cuda::gelu_forward(d_out_r, d_xr, N, stream);
        cuda::gelu_backward(d_dinp_r, d_xr, d_dout, N, stream);
        for (bf16* p : {(bf16*)d_pre16, (bf16*)d_out16, (bf16*)d_dinp16})
            REQUIRE(cudaMemsetAsync(p, 0xff, (size_t)N * sizeof(bf16), stream) == cudaSuccess);
        cuda::gelu_forward_keep_bf16(d_pre16, d_out16, d_x, N, stream);
        cuda::gelu_backward_bf16(d_dinp16, d_x16, d_dout, N, stream);
        CHECK(bf16_mismatches("gelu pre (bf16 form)", d_pre16.get(), x) == 0);
        CHECK(bf16_mismatches("gelu out (bf16 form)", d_out16.get(), gelu_out) == 0);
        CHECK(bf16_mismatches("gelu dinp (bf16 form)", d_dinp16.get(), d_dinp_r.get()) == 0);
        // The data can tell GELU of the fp32 input from GELU of the rounded one: rounded, they differ
        // in many places (so a forward that took GELU of the rounded value fails).
        const auto out_r = d_out_r.get();
        long differ = 0;
        for (long i = 0; i < N; ++i) differ += float_to_bf16(out_r[i]) != float_to_bf16(gelu_out[i]);
        REQUIRE(differ > N / 100);
    }

    // Residual: one IEEE add per element on both sides: exact.
    cpu::residual_forward(out.data(), x.data(), b.data(), N);
    cuda::residual_forward(d_out, d_x, d_b, N, stream);
    CHECK(bit_mismatches("residual out", d_out.get(), out) == 0);
    auto da = randn(N, 14), db = randn(N, 15);
    DeviceBuffer<float> d_da(da), d_db(db);
    cpu::residual_backward(da.data(), db.data(), dout.data(), N);
    cuda::residual_backward(d_da, d_db, d_dout, N, stream);
    CHECK(bit_mismatches("residual da", d_da.get(), da) == 0);
    CHECK(bit_mismatches("residual db", d_db.get(), db) == 0);
    REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
}

static void check_crossentropy(int B, int V, uint64_t seed) {
    INFO("crossentropy B=" << B << " V=" << V);
    auto logits = randn((size_t)B * V, seed, 3.0f);
    auto targets = randint(B, seed + 1, V);
    // Ties for the argmax. In rows 0, 3, 6, ...: the new maximum first at index 1 (thread 0's chunk
    // of 8 entries, after its start, which writes the result), again at 3 (the same chunk), at 16
    // (another lane's chunk, which meets lane 0 in the shuffles), at V - 1, 256 past the first
    // (another warp) and 2048 past it (thread 0's next chunk) where V allows. In rows 1, 4, 7, ...
    // the first is outside thread 0's chunks: at 9 (lane 1), 17 (lane 2), V - 1 and 2049 (thread 0's
    // next chunk), so thread 0 holds a later index or none and must take lane 1's in the merge. Only
    // the first of equal maxima, and never a later one, is right.
    for (int b = 0; b < B; ++b) {
        float* z = logits.data() + (size_t)b * V;
        if (b % 3 == 0)
            for (int v : {1, 3, 16, V - 1, 1 + 256, 1 + 2048})
                if (v < V) z[v] = 20.0f;
        if (b % 3 == 1)
            for (int v : {9, 17, V - 1, 1 + 2048})
                if (v < V) z[v] = 20.0f;
    }
    const float scale = 1.0f / B;
    std::vector<float> losses(B), stats(2 * (size_t)B), dlogits((size_t)B * V);
    std::vector<int> argmax(B);
    cpu::softmax_crossentropy_forward(losses.data(), stats.data(), argmax.data(), logits.data(), targets.data(), B, V);
    cpu::softmax_crossentropy_backward(dlogits.data(), logits.data(), stats.data(), targets.data(), scale, B, V);

    cuda::Context ctx(0);
    DeviceBuffer<float> d_logits(logits), d_losses(B), d_stats(2 * (size_t)B);
    DeviceBuffer<int> d_targets(targets), d_argmax(B);
    cuda::softmax_crossentropy_forward(d_losses, d_stats, d_argmax, d_logits, d_targets, B, V, ctx.stream());
    // Both sum exp in double: the CPU exp(z - max) against the row's max, the GPU exp(z - m) against
    // each thread's running max m, rescaled in double (exactly, up to double's rounding). What
    // differs is expf (CUDA: 2 ulp) against the CPU's exp_approx (2e-7), and the float subtractions' rounding
    // of the arguments (up to 2^-24 |z - max| on each side, under 5e-7 for the terms that weigh,
    // |z - max| < 8): under 1e-6 relative per term, and the sum's error is at most its terms'
    // largest, so 1 / sum within 1e-6 relative (a float sum over 50k terms misses by ~1e-6 more).
    // The max is one of the inputs (exact), and so is the argmax.
    // The loss adds log(sum) + max: 1e-5 absolute on values of a few units.
    auto got = d_stats.get();
    std::vector<float> got_max(B), want_max(B), got_inv(B), want_inv(B);
    for (int b = 0; b < B; ++b) {
        got_max[b] = got[2 * b], want_max[b] = stats[2 * b];
        got_inv[b] = got[2 * b + 1], want_inv[b] = stats[2 * b + 1];
    }
    CHECK(bit_mismatches("row max", got_max, want_max) == 0);
    CHECK(mismatches("row 1 / sum", got_inv, want_inv, 0.0, 1e-6) == 0);
    CHECK(d_argmax.get() == argmax);
    CHECK(mismatches("losses", d_losses.get(), losses, 1e-5, 1e-6) == 0);
    // Backward from the CPU's stats on both sides, in place over the logits on the GPU: p * scale
    // - [target] * scale with p = exp(z - max) * inv, products rounded the same way on both (the
    // kernel keeps them unfused); expf's 2 ulp and exp_approx's 2e-7 give 5e-7 relative, and at the
    // target (p near 1 minus 1) that is 5e-7 * scale absolute.
    d_stats.set(stats);
    cuda::softmax_crossentropy_backward(d_logits, d_logits, d_stats, d_targets, scale, B, V, ctx.stream());
    CHECK(mismatches("dlogits", d_logits.get(), dlogits, 1e-6 * scale, 1e-6) == 0);
    // Without an argmax buffer the kernel writes the same loss and stats.
    DeviceBuffer<float> d_logits2(logits), d_stats2(2 * (size_t)B);
    cuda::softmax_crossentropy_forward(d_losses, d_stats2, nullptr, d_logits2, d_targets, B, V, ctx.stream());
    CHECK(bit_mismatches("stats without argmax", d_stats2.get(), got) == 0);

    // The bf16 forms read the logits as bf16 (the ties above are bf16 values), in rows `stride`
    // values apart whose padding holds NaNs: what the fp32 forms compute on the widened logits, bit
    // for bit, and dlogits that result rounded (outputs poisoned first: a value not written shows,
    // and the padding of dlogits must stay as it was). Two strides: V + 13 (rows not 16-byte
    // aligned: entries read and written one by one) and V rounded up to 64, as the GPT's bf16
    // logits (chunks of 8 in 16-byte loads and stores, the last chunk of a row partly padding).
    const bf16 nan16 = 0x7FC0, poison16 = 0xFFFF;
    std::vector<float> widened_logits(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) widened_logits[i] = bf16_to_float(float_to_bf16(logits[i]));
    DeviceBuffer<float> d_wide(widened_logits), d_loss_w(B), d_stats_w(2 * (size_t)B), d_dwide((size_t)B * V);
    DeviceBuffer<int> d_arg_w(B);
    cudaStream_t s = ctx.stream();
    cuda::softmax_crossentropy_forward(d_loss_w, d_stats_w, d_arg_w, d_wide, d_targets, B, V, s);
    cuda::softmax_crossentropy_backward(d_dwide, d_wide, d_stats_w, d_targets, scale, B, V, s);
    const auto loss_w = d_loss_w.get(), stats_w = d_stats_w.get(), dwide = d_dwide.get();
    const auto arg_w = d_arg_w.get();
    for (const int stride : {V + 13, (V + 63) / 64 * 64}) {
        INFO("bf16 rows " << stride << " values apart");
        std::vector<bf16> logits16((size_t)B * stride, nan16);
        for (int b = 0; b < B; ++b)
            for (int v = 0; v < V; ++v)
                logits16[(size_t)b * stride + v] = float_to_bf16(logits[(size_t)b * V + v]);
        DeviceBuffer<bf16> d_logits16(logits16), d_dlogits16(std::vector<bf16>((size_t)B * stride, poison16));
        DeviceBuffer<float> d_loss16(B), d_stats16(2 * (size_t)B);
        DeviceBuffer<int> d_arg16(B);
        REQUIRE(cudaMemsetAsync(d_loss16, 0xff, B * sizeof(float), s) == cudaSuccess);
        REQUIRE(cudaMemsetAsync(d_stats16, 0xff, 2 * (size_t)B * sizeof(float), s) == cudaSuccess);
        REQUIRE(cudaMemsetAsync(d_arg16, 0xff, B * sizeof(int), s) == cudaSuccess);  // -1: no index
        cuda::softmax_crossentropy_forward_bf16(d_loss16, d_stats16, d_arg16, d_logits16, d_targets, B, V, stride, s);
        CHECK(bit_mismatches("losses (bf16 form)", d_loss16.get(), loss_w) == 0);
        CHECK(bit_mismatches("stats (bf16 form)", d_stats16.get(), stats_w) == 0);
        CHECK(d_arg16.get() == arg_w);
        cuda::softmax_crossentropy_backward_bf16(d_dlogits16, d_logits16, d_stats_w, d_targets, scale, B, V, stride,
                                                 s);
        long padding_written = 0;
        const auto rows = packed_rows(d_dlogits16.get(), B, V, stride, poison16, &padding_written);
        CHECK(bf16_mismatches("dlogits (bf16 form)", rows, dwide) == 0);
        CHECK(padding_written == 0);
    }
}

TEST_CASE("cuda softmax_crossentropy matches the CPU", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    check_crossentropy(300, 97, 600);    // more rows than a block has threads, odd V
    check_crossentropy(5, 200, 650);     // V below the block's 256 threads: idle threads in the argmax
    check_crossentropy(6, 50257, 700);   // GPT-2's vocabulary
}

TEST_CASE("cuda softmax_crossentropy finds the CPU's max and argmax in rows with NaN", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    // The CPU's scan takes a NaN only at index 0 (then it is the row's max) and skips it anywhere
    // else; the loss is NaN either way, but the accuracy count reads the argmax. A row of -inf only
    // names index 0 and sums NaN.
    const int B = 4, V = 600;
    auto logits = randn((size_t)B * V, 710, 3.0f);
    logits[0] = NAN;                                      // row 0: NaN first
    logits[V + 4] = NAN, logits[V + 20] = 30.0f;          // row 1: NaN before the max, another lane
    // row 2: NaN after the max, in its chunk of 8 (the same thread) and in another thread's
    logits[2 * V + 5] = 30.0f, logits[2 * V + 7] = NAN, logits[2 * V + 261] = NAN;
    std::fill(logits.begin() + 3 * V, logits.end(), -INFINITY);  // row 3
    std::vector<int> targets = {3, 3, 3, 3}, argmax(B);
    std::vector<float> losses(B), stats(2 * B);
    cpu::softmax_crossentropy_forward(losses.data(), stats.data(), argmax.data(), logits.data(), targets.data(), B, V);
    REQUIRE(argmax == std::vector<int>{0, 20, 5, 0});
    cuda::Context ctx(0);
    DeviceBuffer<float> d_logits(logits), d_losses(B), d_stats(2 * (size_t)B);
    DeviceBuffer<int> d_targets(targets), d_argmax(B);
    cuda::softmax_crossentropy_forward(d_losses, d_stats, d_argmax, d_logits, d_targets, B, V, ctx.stream());
    CHECK(d_argmax.get() == argmax);
    auto got = d_stats.get();
    for (int b = 0; b < B; ++b) {
        INFO("row " << b);
        CHECK(std::memcmp(&got[2 * b], &stats[2 * b], sizeof(float)) == 0);  // the max, NaN included
        CHECK(std::isnan(got[2 * b + 1]) == std::isnan(stats[2 * b + 1]));   // 1 / sum: NaN where the CPU's is
    }
}

static void check_encoder(int B, int T, int C, int V, int stride, uint64_t seed) {
    INFO("encoder B=" << B << " T=" << T << " C=" << C << " V=" << V << " stride=" << stride);
    // A small vocabulary makes tokens repeat many times: the scatter's hard case.
    auto tokens = randint((size_t)B * stride, seed, V);
    auto wte = randn((size_t)V * C, seed + 1), wpe = randn((size_t)T * C, seed + 2);
    auto dout = randn((size_t)B * T * C, seed + 3);
    auto dwte0 = randn((size_t)V * C, seed + 4), dwpe0 = randn((size_t)T * C, seed + 5);
    std::vector<float> out((size_t)B * T * C), dwte = dwte0, dwpe = dwpe0;
    cpu::encoder_forward(out.data(), tokens.data(), stride, wte.data(), wpe.data(), B, T, C);
    cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), stride, B, T, C);

    cuda::Context ctx(0);
    DeviceBuffer<int> d_tokens(tokens);
    DeviceBuffer<float> d_wte(wte), d_wpe(wpe), d_dout(dout), d_dwte(dwte0), d_dwpe(dwpe0), d_out((size_t)B * T * C);
    cuda::encoder_forward(d_out, d_tokens, stride, d_wte, d_wpe, B, T, C, ctx.stream());
    // Exact: one add per element.
    CHECK(bit_mismatches("out", d_out.get(), out) == 0);
    cuda::encoder_backward(d_dwte, d_dwpe, d_dout, d_tokens, stride, B, T, C, ctx, ctx.stream());
    // Exact: each row of dwte and dwpe adds its rows of dout onto its old value in position
    // order, as the CPU does; any other order (or an atomic) would differ in the last bits.
    CHECK(bit_mismatches("dwte", d_dwte.get(), dwte) == 0);
    CHECK(bit_mismatches("dwpe", d_dwpe.get(), dwpe) == 0);
}

TEST_CASE("cuda encoder_forward/backward match the CPU bit for bit", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    check_encoder(5, 67, 83, 37, 70, 800);      // B*T = 335 positions, row stride > T
    check_encoder(4, 256, 768, 1000, 257, 900);  // GPT-2 width, 1024 positions
    check_encoder(2, 600, 40, 3, 600, 1000);     // 3 tokens over 1200 positions: ~400 places each
    check_encoder(8, 1024, 48, 50, 1025, 1100);  // GPT-2's 8192 positions, ~160 places a token
    check_encoder(8, 1024, 16, 50257, 1025, 1200);  // GPT-2's vocabulary: most tokens once
}

static void check_layernorm(long N, int C, uint64_t seed) {
    INFO("layernorm N=" << N << " C=" << C);
    auto inp = randn((size_t)N * C, seed, 1.5f, 1.0f);  // mean 1: the mean must really be subtracted
    auto w = randn(C, seed + 1), b = randn(C, seed + 2), dout = randn((size_t)N * C, seed + 3);
    auto dinp0 = randn((size_t)N * C, seed + 4), dw0 = randn(C, seed + 5), db0 = randn(C, seed + 6);
    std::vector<float> out((size_t)N * C), mean(N), rstd(N), dinp = dinp0, dw = dw0, db = db0;
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                            rstd.data(), N, C);
    // Magnitudes behind the parameter-gradient column sums.
    std::vector<float> s_dw = absolute(dw0), s_db = absolute(db0);
    for (long i = 0; i < N; ++i)
        for (int c = 0; c < C; ++c) {
            float d = dout[i * C + c];
            s_dw[c] += std::fabs((inp[i * C + c] - mean[i]) * rstd[i] * d);
            s_db[c] += std::fabs(d);
        }

    cuda::Context ctx(0);
    DeviceBuffer<float> d_inp(inp), d_w(w), d_b(b), d_dout(dout), d_dinp(dinp0), d_dw(dw0), d_db(db0);
    DeviceBuffer<float> d_out((size_t)N * C), d_mean(N), d_rstd(N);
    cuda::layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C, ctx.stream());
    // Row sums in another order: the mean of C values of size ~2.5 differs by ~1e-6 (5e-5 bound);
    // rstd by a few ulps (2e-5 relative); outputs carry both times |w| (1e-4 absolute).
    CHECK(mismatches("mean", d_mean.get(), mean, 5e-5, 0.0) == 0);
    CHECK(mismatches("rstd", d_rstd.get(), rstd, 0.0, 2e-5) == 0);
    auto got_out = d_out.get();
    CHECK(mismatches("out", got_out, out, 1e-4, 1e-5) == 0);
    // The bf16 form: the same computation, rounded as it is stored, so the bf16 rounding of the
    // fp32 form's output bit for bit, and the same mean and rstd (--precision bf16's matmul input).
    {
        DeviceBuffer<bf16> d_out16((size_t)N * C);
        DeviceBuffer<float> d_mean16(N), d_rstd16(N);
        cuda::layernorm_forward_bf16(d_out16, d_mean16, d_rstd16, d_inp, d_w, d_b, N, C, ctx.stream());
        CHECK(bf16_mismatches("layernorm out (bf16 form)", d_out16.get(), got_out) == 0);
        CHECK(bit_mismatches("mean (bf16 form)", d_mean16.get(), d_mean.get()) == 0);
        CHECK(bit_mismatches("rstd (bf16 form)", d_rstd16.get(), d_rstd.get()) == 0);
    }
    // Backward from the CPU's mean/rstd so only the backward's own rounding is compared: dinp
    // (accumulated onto dinp0) as out; dweight/dbias are N-row column sums: 1e-5 of their sum of
    // |terms| (the GEMM argument) plus 1e-6.
    d_mean.set(mean);
    d_rstd.set(rstd);
    cuda::layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, ctx, ctx.stream());
    const auto got_dinp = d_dinp.get();
    CHECK(mismatches("dinp", got_dinp, dinp, 1e-4, 1e-5) == 0);
    auto got_dw = d_dw.get(), got_db = d_db.get();
    CHECK(mismatches("dweight", got_dw, dw, 1e-6, 1e-5, s_dw) == 0);
    CHECK(mismatches("dbias", got_db, db, 1e-6, 1e-5, s_db) == 0);
    // Fixed summation order: running it again from the same start gives the same bits.
    d_dw.set(dw0);
    d_db.set(db0);
    cuda::layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, ctx, ctx.stream());
    CHECK(bit_mismatches("dweight (second run)", d_dw.get(), got_dw) == 0);
    CHECK(bit_mismatches("dbias (second run)", d_db.get(), got_db) == 0);
    // The bf16 forms take dout as bf16 (a bf16 matmul's input gradient): from the same start, the
    // fp32 form's dinp, dweight and dbias on the widened dout, bit for bit, and layernorm_backward_bf16's
    // rounded copy of dinp the bf16 rounding of that dinp (poisoned first: a value not written shows).
    const std::vector<bf16> dout16 = rounded(dout);
    const std::vector<float> dout_w = widened(dout16);
    REQUIRE(dout_w != dout);  // the rounding changes the input, so the bits below say which dout was read
    DeviceBuffer<float> d_dout_w(dout_w);
    DeviceBuffer<bf16> d_dout16(dout16);
    d_dinp.set(dinp0);
    d_dw.set(dw0);
    d_db.set(db0);
    cuda::layernorm_backward(d_dinp, d_dw, d_db, d_dout_w, d_inp, d_w, d_mean, d_rstd, N, C, ctx, ctx.stream());
    const auto want_dinp = d_dinp.get(), want_dw = d_dw.get(), want_db = d_db.get();
    for (bool copy : {false, true}) {
        INFO((copy ? "layernorm_backward_bf16" : "layernorm_backward from a bf16 dout"));
        d_dinp.set(dinp0);
        d_dw.set(dw0);
        d_db.set(db0);
        DeviceBuffer<bf16> d_dinp16((size_t)N * C);
        REQUIRE(cudaMemsetAsync(d_dinp16, 0xff, (size_t)N * C * sizeof(bf16), ctx.stream()) == cudaSuccess);
        if (copy)
            cuda::layernorm_backward_bf16(d_dinp, d_dinp16, d_dw, d_db, d_dout16, d_inp, d_w, d_mean, d_rstd, N, C,
                                          ctx, ctx.stream());
        else
            cuda::layernorm_backward(d_dinp, d_dw, d_db, d_dout16, d_inp, d_w, d_mean, d_rstd, N, C, ctx,
                                     ctx.stream());
        CHECK(bit_mismatches("dinp (bf16 dout)", d_dinp.get(), want_dinp) == 0);
        if (copy) CHECK(bf16_mismatches("dinp rounded (bf16 form)", d_dinp16.get(), want_dinp) == 0);
        CHECK(bit_mismatches("dweight (bf16 dout)", d_dw.get(), want_dw) == 0);
        CHECK(bit_mismatches("dbias (bf16 dout)", d_db.get(), want_db) == 0);
    }
    // accumulate = false, every form: dweight and dbias written (NaNs first), equal to what each
    // adds onto zeros (the same fixed-order sums; a -0 is the one value whose bits could differ),
    // dinp still added to; with no rows, zeros.
    const std::vector<float> zeros(C, 0.0f), nans(C, NAN);
    for (int form = 0; form < 3; ++form) {
        INFO("accumulate = false, " << (form == 0 ? "fp32 dout" : form == 1 ? "bf16 dout" : "bf16 form"));
        auto run = [&](bool accumulate) {
            d_dinp.set(dinp0);
            d_dw.set(accumulate ? zeros : nans);
            d_db.set(accumulate ? zeros : nans);
            DeviceBuffer<bf16> d_dinp16((size_t)N * C);
            if (form == 0)
                cuda::layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C, ctx,
                                         ctx.stream(), accumulate);
            else if (form == 1)
                cuda::layernorm_backward(d_dinp, d_dw, d_db, d_dout16, d_inp, d_w, d_mean, d_rstd, N, C, ctx,
                                         ctx.stream(), accumulate);
            else
                cuda::layernorm_backward_bf16(d_dinp, d_dinp16, d_dw, d_db, d_dout16, d_inp, d_w, d_mean, d_rstd, N,
                                              C, ctx, ctx.stream(), accumulate);
            return std::vector<std::vector<float>>{d_dinp.get(), d_dw.get(), d_db.get()};
        };
        const auto added = run(true), written = run(false);
        CHECK(bit_mismatches("dinp (dweight written)", written[0], added[0]) == 0);
        CHECK(mismatches("dweight (written)", written[1], added[1], 0.0, 0.0) == 0);
        CHECK(mismatches("dbias (written)", written[2], added[2], 0.0, 0.0) == 0);
    }
    d_dw.set(nans);
    d_db.set(nans);
    cuda::layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, 0, C, ctx, ctx.stream(), false);
    CHECK(d_dw.get() == zeros);
    CHECK(d_db.get() == zeros);
}

// One Context, no waits in between: a bias gradient over 300 rows queued, then LayerNorm's over
// 40000 rows, whose column sums need a larger reduction scratch: the context grows it with the
// first still queued, and both sums come out right.
TEST_CASE("cuda column sums: a context's scratch grows while a smaller sum is queued", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const int B = 300, OC = 129;
    const long N = 40000;
    const int C = 33;
    auto dout_b = randn((size_t)B * OC, 1400), db0 = randn(OC, 1401);
    auto inp = randn((size_t)N * C, 1402, 1.5f, 1.0f), w = randn(C, 1403), b = randn(C, 1404);
    auto dout_ln = randn((size_t)N * C, 1405);
    std::vector<float> mean(N), rstd(N), out((size_t)N * C), dinp((size_t)N * C, 0.0f), dw(C, 0.0f), dbl(C, 0.0f);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    cpu::layernorm_backward(dinp.data(), dw.data(), dbl.data(), dout_ln.data(), inp.data(), w.data(), mean.data(),
                            rstd.data(), N, C);
    std::vector<float> db = db0, s_db = absolute(db0), s_dw(C, 0.0f), s_dbl(C, 0.0f);
    for (int r = 0; r < B; ++r)
        for (int c = 0; c < OC; ++c) {
            db[c] += dout_b[(size_t)r * OC + c];
            s_db[c] += std::fabs(dout_b[(size_t)r * OC + c]);
        }
    for (long i = 0; i < N; ++i)
        for (int c = 0; c < C; ++c) {
            float d = dout_ln[i * C + c];
            s_dw[c] += std::fabs((inp[i * C + c] - mean[i]) * rstd[i] * d);
            s_dbl[c] += std::fabs(d);
        }

    cuda::Context ctx(0);
    const int K = 7;  // a tiny matmul: only its bias gradient matters here
    auto x = randn((size_t)B * K, 1406), wt = randn((size_t)OC * K, 1407);
    DeviceBuffer<float> d_dout_b(dout_b), d_db(db0), d_x(x), d_wt(wt), d_dwt((size_t)OC * K);
    DeviceBuffer<float> d_inp(inp), d_w(w), d_dout_ln(dout_ln), d_mean(mean), d_rstd(rstd);
    DeviceBuffer<float> d_dinp((size_t)N * C), d_dw(C), d_dbl(C);
    REQUIRE(cudaMemsetAsync(d_dinp, 0, (size_t)N * C * sizeof(float), ctx.stream()) == cudaSuccess);
    REQUIRE(cudaMemsetAsync(d_dw, 0, C * sizeof(float), ctx.stream()) == cudaSuccess);
    REQUIRE(cudaMemsetAsync(d_dbl, 0, C * sizeof(float), ctx.stream()) == cudaSuccess);
    REQUIRE(cudaMemsetAsync(d_dwt, 0, (size_t)OC * K * sizeof(float), ctx.stream()) == cudaSuccess);
    cuda::matmul_backward(nullptr, d_dwt, d_db, d_dout_b, d_x, d_wt, B, K, OC, ctx, ctx.stream());
    cuda::layernorm_backward(d_dinp, d_dw, d_dbl, d_dout_ln, d_inp, d_w, d_mean, d_rstd, N, C, ctx, ctx.stream());
    CHECK(mismatches("bias gradient", d_db.get(), db, 1e-6, 1e-5, s_db) == 0);
    CHECK(mismatches("layernorm dweight", d_dw.get(), dw, 1e-6, 1e-5, s_dw) == 0);
    CHECK(mismatches("layernorm dbias", d_dbl.get(), dbl, 1e-6, 1e-5, s_dbl) == 0);
}

TEST_CASE("cuda layernorm_forward/backward match the CPU", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    check_layernorm(1031, 97, 1100);  // 129 blocks of 8 rows, C not a multiple of 32
    check_layernorm(300, 768, 1200);  // GPT-2 width
    check_layernorm(40000, 33, 1300); // more rows than 128 chunks of 256: the chunks grow to 313 rows
}

// The residual add fused into the LayerNorm after it: residual_forward then layernorm_forward on
// the GPU, bit for bit (res is one IEEE add; the LayerNorm reads the same values), and the CPU twin
// within the LayerNorm bounds above; the bf16 form's out the rounding of the fp32 form's.
static void check_residual_layernorm(long N, int C, uint64_t seed) {
    INFO("residual_layernorm N=" << N << " C=" << C);
    auto a = randn((size_t)N * C, seed, 1.5f, 1.0f), b = randn((size_t)N * C, seed + 1);
    auto w = randn(C, seed + 2), bias = randn(C, seed + 3);
    std::vector<float> res((size_t)N * C), out((size_t)N * C), mean(N), rstd(N);
    cpu::residual_layernorm_forward(res.data(), out.data(), mean.data(), rstd.data(), a.data(), b.data(), w.data(),
                                    bias.data(), N, C);
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    DeviceBuffer<float> d_a(a), d_b(b), d_w(w), d_bias(bias);
    DeviceBuffer<float> d_res((size_t)N * C), d_out((size_t)N * C), d_mean(N), d_rstd(N);
    DeviceBuffer<float> d_res1((size_t)N * C), d_out1((size_t)N * C), d_mean1(N), d_rstd1(N);
    cuda::residual_forward(d_res1, d_a, d_b, (long)N * C, s);
    cuda::layernorm_forward(d_out1, d_mean1, d_rstd1, d_res1, d_w, d_bias, N, C, s);
    auto poison = [&](void* p, size_t bytes) {  // NaNs: a value not written shows
        REQUIRE(cudaMemsetAsync(p, 0xff, bytes, s) == cudaSuccess);
    };
    poison(d_res, (size_t)N * C * sizeof(float));
    poison(d_out, (size_t)N * C * sizeof(float));
    poison(d_mean, N * sizeof(float));
    poison(d_rstd, N * sizeof(float));
    cuda::residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C, s);
    const auto got_res = d_res.get(), got_out = d_out.get(), got_mean = d_mean.get(), got_rstd = d_rstd.get();
    CHECK(bit_mismatches("res (fused vs two ops)", got_res, d_res1.get()) == 0);
    CHECK(bit_mismatches("out (fused vs two ops)", got_out, d_out1.get()) == 0);
    CHECK(bit_mismatches("mean (fused vs two ops)", got_mean, d_mean1.get()) == 0);
    CHECK(bit_mismatches("rstd (fused vs two ops)", got_rstd, d_rstd1.get()) == 0);
    // Against the CPU: the add exact, the LayerNorm as check_layernorm bounds it.
    CHECK(bit_mismatches("res vs CPU", got_res, res) == 0);
    CHECK(mismatches("mean vs CPU", got_mean, mean, 5e-5, 0.0) == 0);
    CHECK(mismatches("rstd vs CPU", got_rstd, rstd, 0.0, 2e-5) == 0);
    CHECK(mismatches("out vs CPU", got_out, out, 1e-4, 1e-5) == 0);
    {
        DeviceBuffer<bf16> d_out16((size_t)N * C);
        DeviceBuffer<float> d_res16((size_t)N * C), d_mean16(N), d_rstd16(N);
        poison(d_out16, (size_t)N * C * sizeof(bf16));
        poison(d_res16, (size_t)N * C * sizeof(float));
        poison(d_mean16, N * sizeof(float));
        poison(d_rstd16, N * sizeof(float));
        cuda::residual_layernorm_forward_bf16(d_res16, d_out16, d_mean16, d_rstd16, d_a, d_b, d_w, d_bias, N, C, s);
        CHECK(bit_mismatches("res (bf16 form)", d_res16.get(), got_res) == 0);
        CHECK(bf16_mismatches("out (bf16 form)", d_out16.get(), got_out) == 0);
        CHECK(bit_mismatches("mean (bf16 form)", d_mean16.get(), got_mean) == 0);
        CHECK(bit_mismatches("rstd (bf16 form)", d_rstd16.get(), got_rstd) == 0);
    }
    REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("cuda residual_layernorm_forward: the residual add and LayerNorm in one pass, as the two ops", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    check_residual_layernorm(1031, 97, 1400);  // C not a multiple of 32
    check_residual_layernorm(300, 768, 1500);  // GPT-2 width
}

static void check_attention(int B, int T, int C, int NH, uint64_t seed, bool tf32) {
    INFO("attention B=" << B << " T=" << T << " C=" << C << " NH=" << NH << (tf32 ? " tf32" : " fp32"));
    const size_t n_inp = (size_t)B * T * 3 * C, n_att = (size_t)B * NH * T * T, n_out = (size_t)B * T * C;
    auto inp = randn(n_inp, seed), dout = randn(n_out, seed + 1);
    std::vector<float> out(n_out), att(n_att), dinp(n_inp), datt(n_att);
    cpu::attention_forward(out.data(), att.data(), inp.data(), B, T, C, NH, tf32);
    cpu::attention_backward(dinp.data(), datt.data(), dout.data(), inp.data(), att.data(), B, T, C, NH, tf32);

    cuda::Context ctx(0);
    DeviceBuffer<float> d_inp(inp), d_dout(dout), d_out(n_out), d_att(n_att), d_dinp(n_inp), d_datt(n_att);
    // Garbage in the outputs first: everything must be written (att's upper triangle included).
    std::vector<float> junk(n_inp, std::numeric_limits<float>::quiet_NaN());
    d_dinp.set(junk);
    d_att.set(std::vector<float>(n_att, 7.0f));
    cuda::attention_forward(d_out, d_att, d_inp, B, T, C, NH, tf32, ctx, ctx.stream());
    // fp32: scores are hs-term dot products, softmax rows sum exp in another order, outputs are
    // T-term weighted sums of values ~1: differences ~1e-6; 1e-4 (1 + |x|) leaves margin.
    // tf32: both sides take 10-bit operands, but the tensor cores' conversion may round where the
    // CPU's does not (or truncate), one TF32 unit (2^-10) in an operand, so a term can move by
    // ~1e-3 relative; 5e-3 (1 + |x|). Both still catch a wrong mask, scale or head offset
    // (errors ~1e-1).
    const double tol = tf32 ? 5e-3 : 1e-4;
    CHECK(mismatches("att", d_att.get(), att, tol, tol) == 0);
    CHECK(mismatches("out", d_out.get(), out, tol, tol) == 0);
    cuda::attention_backward(d_dinp, d_datt, d_dout, d_inp, d_att, B, T, C, NH, tf32, ctx, ctx.stream());
    CHECK(mismatches("dinp", d_dinp.get(), dinp, tol, tol) == 0);
    if (tf32 && T % 8 == 0 && (C / NH) % 8 == 0) {
        // The GPU really took TF32 operands: its fp32 products give other numbers (an ignored
        // flag, or NVIDIA_TF32_OVERRIDE=0, would pass the tolerance above but not this). Only on
        // aligned shapes: for unaligned ones cuBLAS may choose an fp32 kernel, which it may.
        DeviceBuffer<float> d_out32(n_out), d_att32(n_att);
        cuda::attention_forward(d_out32, d_att32, d_inp, B, T, C, NH, false, ctx, ctx.stream());
        std::vector<float> a = d_out.get(), b = d_out32.get();
        double most = 0;
        for (size_t i = 0; i < n_out; ++i) most = std::max(most, (double)std::fabs(a[i] - b[i]));
        INFO("largest difference between TF32 and fp32 outputs " << most);
        CHECK(most > 1e-6);
    }
}

TEST_CASE("cuda attention_forward/backward match the CPU, fp32 and with TF32 products", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    for (bool tf32 : {false, true}) {
        check_attention(3, 67, 48, 4, 1300, tf32);   // hs 12, T odd
        check_attention(2, 150, 96, 3, 1400, tf32);  // hs 32, T > 128
        check_attention(2, 128, 128, 4, 1500, tf32);  // aligned (hs 32, T 128): TF32 must show
    }
}

TEST_CASE("cuda adamw_update and sgd_momentum_update match the CPU", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const size_t n = 1000003;
    auto p = randn(n, 1500), m = randn(n, 1501, 0.1f), v = absolute(randn(n, 1502, 0.01f));
    auto p_cpu = p, m_cpu = m, v_cpu = v;
    cudaStream_t stream = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    DeviceBuffer<float> d_p(p), d_m(m), d_v(v), d_g(n);
    // Three steps with fresh gradients: t = 1..3 exercises the bias corrections.
    for (long t = 1; t <= 3; ++t) {
        auto g = randn(n, 1510 + t);
        d_g.set(g);
        adamw_update(p_cpu.data(), g.data(), m_cpu.data(), v_cpu.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        cuda::adamw_update(d_p, d_g, d_m, d_v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, stream);
    }
    // Same expressions on both sides; they differ only where a compiler fuses a multiply-add
    // (1 ulp per operation). Moments: 1e-5 relative, and for m, whose two terms (~0.1-0.4 each)
    // can cancel, an absolute floor of a few of their ulps (5e-8): a fused and an unfused
    // beta1*m + (1-beta1)*g differ by that much where the sum is near zero. Parameters move by ~lr =
    // 1e-2 per step: 1e-6 absolute (+1e-6 relative) is 1e-4 of a step, so a wrong correction or
    // decay shows.
    CHECK(mismatches("adamw m", d_m.get(), m_cpu, 5e-8, 1e-5) == 0);
    CHECK(mismatches("adamw v", d_v.get(), v_cpu, 1e-12, 1e-5) == 0);
    CHECK(mismatches("adamw p", d_p.get(), p_cpu, 1e-6, 1e-6) == 0);

    auto q = randn(n, 1600), buf = randn(n, 1601, 0.1f), g = randn(n, 1602);
    auto q_cpu = q, buf_cpu = buf;
    DeviceBuffer<float> d_q(q), d_buf(buf), d_g2(g);
    sgd_momentum_update(q_cpu.data(), g.data(), buf_cpu.data(), n, 1e-2f, 0.9f, 1e-2f);
    cuda::sgd_momentum_update(d_q, d_g2, d_buf, n, 1e-2f, 0.9f, 1e-2f, stream);
    // buf = momentum * buf + g with g up to ~5: a fused multiply-add moves a near-zero sum by a
    // few ulps of the terms (5e-7).
    CHECK(mismatches("sgd buf", d_buf.get(), buf_cpu, 5e-7, 1e-6) == 0);
    CHECK(mismatches("sgd p", d_q.get(), q_cpu, 1e-7, 1e-6) == 0);
    REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
}

// DeviceStep's one-launch update: views cut into chunks (an empty view, views of a few values,
// views across one and several chunk boundaries, decayed or not) give the same bits as the
// per-view ops, for AdamW over three steps and for SGD with momentum; with a bf16 copy asked for,
// it holds every new parameter rounded as to_bf16 rounds it, and the parameters are the same bits.
TEST_CASE("cuda adamw and sgd over chunks update every view as the per-view ops do", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const std::vector<cuda::UpdateChunk> views = {{0, 5, 0},          {5, 70000, 1},       {70005, 131072, 1},
                                                  {201077, 0, 1},     {201077, 3000, 0},   {204077, 65536, 1},
                                                  {269613, 200001, 0}};
    const size_t n = 269613 + 200001;
    const std::vector<cuda::UpdateChunk> chunks = cuda::update_chunks(views);
    size_t covered = 0;
    for (const cuda::UpdateChunk& c : chunks) {
        REQUIRE(c.offset == covered);  // in order, back to back, none empty, none too long
        REQUIRE((c.size > 0 && c.size <= cuda::kUpdateChunk));
        covered += c.size;
    }
    REQUIRE(covered == n);
    REQUIRE(chunks.size() == 1 + 2 + 2 + 0 + 1 + 1 + 4);

    cuda::Context ctx(0);
    cudaStream_t s = ctx.stream();
    DeviceBuffer<cuda::UpdateChunk> d_chunks(chunks);
    auto p = randn(n, 1700), m = randn(n, 1701, 0.1f), v = absolute(randn(n, 1702, 0.01f));
    DeviceBuffer<float> d_p1(p), d_m1(m), d_v1(v), d_p2(p), d_m2(m), d_v2(v), d_g(n);
    for (long t = 1; t <= 3; ++t) {
        d_g.set(randn(n, 1710 + t));
        for (const cuda::UpdateChunk& w : views)
            cuda::adamw_update(d_p1 + w.offset, d_g + w.offset, d_m1 + w.offset, d_v1 + w.offset, w.size, 1e-2f, 0.9f,
                               0.95f, 1e-8f, w.decay ? 0.1f : 0.0f, t, s);
        cuda::adamw_update_chunks(d_p2, d_g, d_m2, d_v2, d_chunks, (int)chunks.size(), 1e-2f, 0.9f, 0.95f, 1e-8f,
                                  0.1f, t, 1.0f, s);
    }
    CHECK(bit_mismatches("adamw p (chunks)", d_p2.get(), d_p1.get()) == 0);
    CHECK(bit_mismatches("adamw m (chunks)", d_m2.get(), d_m1.get()) == 0);
    CHECK(bit_mismatches("adamw v (chunks)", d_v2.get(), d_v1.get()) == 0);
    // Clipping inside the update: the bits of scale() followed by the per-view update, and the
    // gradient left as it was.
    const float clip = 0.37f;
    {
        const auto g = randn(n, 1715);
        DeviceBuffer<float> d_gs(g);
        cuda::scale(d_gs, clip, n, s);
        for (const cuda::UpdateChunk& w : views)
            cuda::adamw_update(d_p1 + w.offset, d_gs + w.offset, d_m1 + w.offset, d_v1 + w.offset, w.size, 1e-2f, 0.9f,
                               0.95f, 1e-8f, w.decay ? 0.1f : 0.0f, 4, s);
        d_g.set(g);
        DeviceBuffer<bf16> d_p16(std::vector<bf16>(n, 0xFFFF));  // a NaN no rounding of these values gives
        cuda::adamw_update_chunks(d_p2, d_g, d_m2, d_v2, d_chunks, (int)chunks.size(), 1e-2f, 0.9f, 0.95f, 1e-8f,
                                  0.1f, 4, clip, s, d_p16);
        CHECK(bit_mismatches("adamw p (chunks, clipped)", d_p2.get(), d_p1.get()) == 0);
        CHECK(bf16_mismatches("adamw p's bf16 copy (chunks, clipped)", d_p16.get(), d_p2.get()) == 0);
        CHECK(bit_mismatches("adamw m (chunks, clipped)", d_m2.get(), d_m1.get()) == 0);
        CHECK(bit_mismatches("adamw v (chunks, clipped)", d_v2.get(), d_v1.get()) == 0);
        CHECK(bit_mismatches("g after the clipped update", d_g.get(), g) == 0);
    }

    auto q = randn(n, 1720), buf = randn(n, 1721, 0.1f);
    DeviceBuffer<float> d_q1(q), d_b1(buf), d_q2(q), d_b2(buf);
    d_g.set(randn(n, 1722));
    for (const cuda::UpdateChunk& w : views)
        cuda::sgd_momentum_update(d_q1 + w.offset, d_g + w.offset, d_b1 + w.offset, w.size, 1e-2f, 0.9f,
                                  w.decay ? 1e-2f : 0.0f, s);
    cuda::sgd_momentum_update_chunks(d_q2, d_g, d_b2, d_chunks, (int)chunks.size(), 1e-2f, 0.9f, 1e-2f, 1.0f, s);
    CHECK(bit_mismatches("sgd p (chunks)", d_q2.get(), d_q1.get()) == 0);
    CHECK(bit_mismatches("sgd buf (chunks)", d_b2.get(), d_b1.get()) == 0);
    {
        const auto g = randn(n, 1723);
        DeviceBuffer<float> d_gs(g);
        cuda::scale(d_gs, clip, n, s);
        for (const cuda::UpdateChunk& w : views)
            cuda::sgd_momentum_update(d_q1 + w.offset, d_gs + w.offset, d_b1 + w.offset, w.size, 1e-2f, 0.9f,
                                      w.decay ? 1e-2f : 0.0f, s);
        d_g.set(g);
        DeviceBuffer<bf16> d_q16(std::vector<bf16>(n, 0xFFFF));
        cuda::sgd_momentum_update_chunks(d_q2, d_g, d_b2, d_chunks, (int)chunks.size(), 1e-2f, 0.9f, 1e-2f, clip, s,
                                         d_q16);
        CHECK(bit_mismatches("sgd p (chunks, clipped)", d_q2.get(), d_q1.get()) == 0);
        CHECK(bf16_mismatches("sgd p's bf16 copy (chunks, clipped)", d_q16.get(), d_q2.get()) == 0);
        CHECK(bit_mismatches("sgd buf (chunks, clipped)", d_b2.get(), d_b1.get()) == 0);
        CHECK(bit_mismatches("g after the clipped update", d_g.get(), g) == 0);
    }
}

TEST_CASE("cuda sum_squares and scale match global_norm and clip_grad_norm", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    cudaStream_t stream = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    DeviceBuffer<double> d_out(1), d_partial(cuda::kNormBlocks);
    // Sizes below, at and far above the chunk count, chunks of 8 values and of more, and not
    // multiples of 8 (or of 4: a chunk's last values read one by one).
    for (size_t n : {size_t(1), size_t(63), size_t(cuda::kNormBlocks), size_t(8 * cuda::kNormBlocks),
                     size_t(1000003), size_t(12345679)}) {
        INFO("n = " << n);
        auto x = randn(n, 600 + n, 3.0f);
        DeviceBuffer<float> d_x(x);
        cuda::sum_squares(d_out, d_partial, d_x, n, stream);
        double got = d_out.get()[0], want = global_norm(x.data(), n);
        // Both sum the same squares in double, in other orders: 1e-12 relative is far above
        // double rounding over 1e7 terms (~1e-16 * sqrt(n)) and far below a missed chunk.
        CHECK(std::sqrt(got) == Approx(want).epsilon(1e-12));
        cuda::sum_squares(d_out, d_partial, d_x, n, stream);
        CHECK(d_out.get()[0] == got);  // a fixed order: the same bits every run
        if (n > 1) {  // from a pointer that is not 16-byte aligned: every value read one by one
            cuda::sum_squares(d_out, d_partial, d_x + 1, n - 1, stream);
            CHECK(std::sqrt(d_out.get()[0]) == Approx(global_norm(x.data() + 1, n - 1)).epsilon(1e-12));
        }
        // Clipping's scale: the same products, rounded the same way.
        std::vector<float> clipped = x;
        double norm = clip_grad_norm(clipped.data(), n, 0.5 * want);
        CHECK(norm == want);
        cuda::scale(d_x, (float)(0.5 * want / (want + 1e-6)), n, stream);
        CHECK(bit_mismatches("scaled", d_x.get(), clipped) == 0);
    }
    REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
}
