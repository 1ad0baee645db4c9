// Flash attention's kernels (src/cuda/flash_attention.cu) against their CPU twin
// (src/cpu/flash_attention.cpp, itself held to attention's definition in tests/unit), on seeded
// random inputs, at every head size they are built for, with T below, at and past the tile of 64
// and at GPT-2 124M's shape; and their gradients the same bits on every run.
#include "helpers.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/cuda/ops.h"
#include "dptrain/backend/cuda/gpt.h"
#include "dptrain/core/error.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace dptrain;
using cudatest::DeviceBuffer;
using cudatest::bf16_mismatches;
using cudatest::bit_mismatches;
using cudatest::mismatches;
using cudatest::randn;

static void check_flash(int B, int T, int C, int NH, uint64_t seed) {
    INFO("flash attention B=" << B << " T=" << T << " C=" << C << " NH=" << NH);
    const size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_stat = (size_t)B * NH * T;
    auto inp = randn(n_inp, seed), dout = randn(n_out, seed + 1);
    std::vector<float> out(n_out), lse(n_stat), delta(n_stat), dinp(n_inp);
    cpu::flash_attention_forward(out.data(), lse.data(), inp.data(), B, T, C, NH);
    cpu::flash_attention_backward(dinp.data(), delta.data(), dout.data(), inp.data(), out.data(), lse.data(), B, T, C,
                                  NH);

    cuda::Context ctx(0);
    DeviceBuffer<float> d_inp(inp), d_dout(dout), d_out(n_out), d_lse(n_stat), d_delta(n_stat), d_dinp(n_inp);
    // NaN in every output first: each value must be written.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    d_out.set(std::vector<float>(n_out, nan));
    d_lse.set(std::vector<float>(n_stat, nan));
    d_dinp.set(std::vector<float>(n_inp, nan));
    cuda::flash_attention_forward(d_out, d_lse, d_inp, B, T, C, NH, ctx.stream());
    // lse: fp32 scores from the same bf16 operands (exact products, sums in another order), exp
    // and log an ulp apart: ~1e-6; 1e-4 (1 + |x|) leaves margin and catches a wrong scale or mask.
    CHECK(mismatches("lse", d_lse.get(), lse, 1e-4, 1e-4) == 0);
    // out and the gradients: the same operands and rounding points on both sides, but a P or dS
    // whose fp32 value differs by an ulp can round to the neighbouring bf16 value (2^-8 relative)
    // on one side, moving an output by up to 2^-8 p |v|: 1e-2 (1 + |x|). A wrong mask, scale,
    // tile offset or head offset is off by ~1e-1 or more.
    CHECK(mismatches("out", d_out.get(), out, 1e-2, 1e-2) == 0);
    cuda::flash_attention_backward(d_dinp, d_delta, d_dout, d_inp, d_out, d_lse, B, T, C, NH, ctx.stream());
    const std::vector<float> first = d_dinp.get();
    CHECK(mismatches("dinp", first, dinp, 1e-2, 1e-2) == 0);
    // Deterministic: no atomics, so a second backward gives the same bits.
    d_dinp.set(std::vector<float>(n_inp, nan));
    cuda::flash_attention_backward(d_dinp, d_delta, d_dout, d_inp, d_out, d_lse, B, T, C, NH, ctx.stream());
    CHECK(bit_mismatches("dinp, second run", d_dinp.get(), first) == 0);
    // The bf16 forms --precision bf16 runs, from q, k, v already rounded to bf16 (as its qkv matmul
    // writes them): the kernels round the same values as they load them, so forward's out and lse
    // are the fp32-input form's bits and its copy of out their rounding, and backward's dinp is the
    // fp32 form's rounded, bit for bit; every value written (NaNs first).
    DeviceBuffer<bf16> d_inp16(n_inp);
    cuda::to_bf16(d_inp16, d_inp, n_inp, ctx.stream());
    DeviceBuffer<float> d_out2(std::vector<float>(n_out, nan)), d_lse2(std::vector<float>(n_stat, nan));
    DeviceBuffer<bf16> d_out16(std::vector<bf16>(n_out, (bf16)0x7FC0));
    cuda::flash_attention_forward_bf16(d_out2, d_out16, d_lse2, d_inp16, B, T, C, NH, ctx.stream());
    const std::vector<float> out_fp32 = d_out.get();
    CHECK(bit_mismatches("out from bf16 q, k, v", d_out2.get(), out_fp32) == 0);
    CHECK(bit_mismatches("lse from bf16 q, k, v", d_lse2.get(), d_lse.get()) == 0);
    CHECK(bf16_mismatches("out's bf16 copy", d_out16.get(), out_fp32) == 0);
    // Without the fp32 output (null: the GPT in bf16 keeps only the rounded copy), the same copy.
    DeviceBuffer<bf16> d_out16b(std::vector<bf16>(n_out, (bf16)0x7FC0));
    cuda::flash_attention_forward_bf16(nullptr, d_out16b, d_lse2, d_inp16, B, T, C, NH, ctx.stream());
    CHECK(bf16_mismatches("out's bf16 copy, no fp32 out", d_out16b.get(), out_fp32) == 0);
    // Backward's bf16 form takes dout and out in bf16 too (as the projection's backward and the
    // forward store them): the fp32 form's delta and dinp (rounded) on the widened dout and out, bit
    // for bit. The kernels round dout as they load it anyway; delta's sums see the rounding.
    std::vector<bf16> dout16(n_out);
    dptrain::to_bf16(dout16.data(), dout.data(), n_out);
    std::vector<float> dout_w(n_out), out_w(n_out);
    from_bf16(dout_w.data(), dout16.data(), n_out);
    const std::vector<bf16> out16 = d_out16.get();
    from_bf16(out_w.data(), out16.data(), n_out);
    DeviceBuffer<float> d_dout_w(dout_w), d_out_w(out_w), d_delta_w(n_stat);
    DeviceBuffer<bf16> d_dout16(dout16);
    cuda::flash_attention_backward(d_dinp, d_delta_w, d_dout_w, d_inp, d_out_w, d_lse, B, T, C, NH, ctx.stream());
    const std::vector<float> want_dinp = d_dinp.get(), want_delta = d_delta_w.get();
    // Against the CPU twin's backward from the same rounded dout and out (from the unrounded ones
    // a value of a thousand moved past 1e-2 (1 + |x|): their rounding, not the kernels').
    std::vector<float> dinp_w(n_inp), delta_cpu_w(n_stat);
    cpu::flash_attention_backward(dinp_w.data(), delta_cpu_w.data(), dout_w.data(), inp.data(), out_w.data(),
                                  lse.data(), B, T, C, NH);
    CHECK(mismatches("dinp from the rounded dout and out", want_dinp, dinp_w, 1e-2, 1e-2) == 0);
    // delta, each row's dout . out in fp32 (sums in another order): as lse, 1e-4 (1 + |x|).
    CHECK(mismatches("delta from the rounded dout and out", want_delta, delta_cpu_w, 1e-4, 1e-4) == 0);
    DeviceBuffer<bf16> d_dinp16(std::vector<bf16>(n_inp, (bf16)0x7FC0));
    d_delta.set(std::vector<float>(n_stat, nan));
    cuda::flash_attention_backward_bf16(d_dinp16, d_delta, d_dout16, d_inp16, d_out16, d_lse, B, T, C, NH,
                                        ctx.stream());
    CHECK(bf16_mismatches("dinp (bf16 form)", d_dinp16.get(), want_dinp) == 0);
    CHECK(bit_mismatches("delta (bf16 form)", d_delta.get(), want_delta) == 0);
}

TEST_CASE("cuda flash_attention_forward/backward match the CPU twin", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    check_flash(3, 37, 96, 3, 2100);    // hs 32, one partial tile
    check_flash(2, 150, 64, 4, 2200);   // hs 16, tiles of 64, 64 and 22
    check_flash(2, 200, 128, 2, 2300);  // hs 64, four tiles, the last partial
    check_flash(1, 64, 128, 1, 2400);   // hs 128, one full tile
    check_flash(1, 130, 256, 2, 2500);  // hs 128, three tiles
}

// Apart, so that the GPU check's racecheck can take the small shapes above alone.
TEST_CASE("cuda flash attention matches the CPU twin at GPT-2 124M's shape", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    check_flash(1, 1024, 768, 12, 2600);  // one sequence, 12 heads of 64, 16 tiles
}

TEST_CASE("CudaGpt with flash attention: built where the GPU has the shared memory, refused where not", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    int optin = 0;
    REQUIRE(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) == cudaSuccess);
    for (int hs : {16, 32, 64, 128}) {
        const size_t need = cuda::flash_attention_shared_bytes(hs * 2, 2);
        INFO("head size " << hs << ": " << need << " bytes, the GPU allows " << optin);
        GptConfig cfg;
        cfg.vocab_size = 16;
        cfg.block_size = 8;
        cfg.n_layer = 1;
        cfg.n_head = 2;
        cfg.n_embd = hs * 2;
        cfg.flash_attention = true;
        if (need <= (size_t)optin) {
            CHECK_NOTHROW(CudaGpt(cfg, 2, 0));
        } else {
            try {
                CudaGpt g(cfg, 2, 0);
                FAIL("built without the shared memory its kernels need");
            } catch (const UserError& e) {
                CHECK(std::string(e.what()).find("shared memory per block") != std::string::npos);
            }
        }
    }
}
