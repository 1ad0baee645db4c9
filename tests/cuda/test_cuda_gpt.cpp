// CudaGpt against the CPU Gpt, in fp32 and bf16: one forward and backward on the same parameters
// and windows (a batch smaller than the models' max_batch, gradients added onto non-zero ones),
// then 50 optimizer steps each (the same AdamW on the host), whose loss curves must agree.
#include "helpers.h"

#include "dptrain/backend/cuda/gpt.h"
#include "dptrain/core/error.h"
#include "dptrain/model/optim.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

using namespace dptrain;
using namespace cudatest;

namespace {

// Tolerances, by precision:
// - fp32: the summed loss within 1e-5 relative (fp32 sums in other orders through two blocks),
//   each gradient tensor within 1e-4 of its own largest value (attention's and layernorm's
//   backward chained through two blocks; the op tests hold each op to 1e-5 alone), the 50-step
//   curve within 1e-3 (differences compound, slowly).
// - bf16: both sides round the same operands the same way, but an activation that differs by an
//   fp32 ulp can round to the neighbouring bf16 value (2^-8 apart) on one side: a few elements
//   per tensor move by 0.4%. Attention's products take TF32 operands on both sides; the tensor
//   cores' conversion may land one TF32 unit (2^-10) from the CPU's rounding, a smaller effect
//   than bf16's. Loss 1e-4 relative, gradients 2e-2 of each tensor's largest value, curve 2e-2:
//   50 steps in bf16 amplify one flipped rounding. The CPU model alone, its 61k parameters with 100
//   of them moved by one fp32 ulp (enough to flip a few bf16 roundings), moved its own curve by up
//   to 1.5% (1.2% with flash attention) at steps 36-37; the GPU's curve was within 0.65% of the
//   CPU's at every step on an H200, past the 5e-3 first set here at four steps of the 50.
struct Tolerance {
    double loss, grad, curve;
};

// epilogues: cuBLASLt's bias, bf16-output, bias-gradient and GELU epilogues where it has them (the
// default), or off, so that the fallbacks run in the model's order of ops (staging in dbig_, the
// column sums in the reduction scratch beside LayerNorm's). Either way GELU is taken of fc's fp32
// sum, as on the CPU; with them, by cuBLASLt's own GELU (within a bf16 rounding of the tanh
// form's, so near a rounding boundary an element may land on the neighbouring bf16 value, as below).
// One small layer, for the tests of refusals (V = 16, T = 8).
GptConfig one_layer_config() {
    GptConfig cfg;
    cfg.vocab_size = 16;
    cfg.block_size = 8;
    cfg.n_layer = 1;
    cfg.n_head = 2;
    cfg.n_embd = 16;
    return cfg;
}

void compare_with_cpu(Precision prec, Tolerance tol, bool flash = false, bool epilogues = true) {
    INFO((prec == Precision::bf16 ? "bf16" : "fp32") << (flash ? ", flash attention" : "")
                                                     << (epilogues ? "" : ", no cuBLASLt epilogues"));
    GptConfig cfg;
    cfg.vocab_size = 67;  // not a multiple of anything the kernels tile by
    cfg.block_size = 24;
    cfg.n_layer = 2;
    cfg.n_head = flash ? 3 : 4;  // flash: head size 16, one partial key tile
    cfg.n_embd = 48;
    cfg.flash_attention = flash;
    // The models hold activations for 8 windows and see 5: offsets must use the allocation's
    // stride, sizes the batch's. The caller's rows are wider than T + 1, and the padding holds
    // tokens outside the vocabulary, so reading it would fail the token check.
    const int max_batch = 8, B = 5, T = cfg.block_size, stride = T + 3, V = cfg.vocab_size;
    Gpt cpu(cfg, max_batch);
    // The GPU model is built in the other precision and switched twice (its precision-sized buffers
    // made, freed, made again and freed again), and once more to the same (nothing changes).
    const Precision other = prec == Precision::bf16 ? Precision::fp32 : Precision::bf16;
    CudaGpt gpu(cfg, max_batch, 0, other);
    cpu.set_precision(prec);
    gpu.set_precision(prec);
    gpu.set_precision(other);
    gpu.set_precision(prec);
    gpu.set_precision(prec);
    gpu.context().set_epilogues(epilogues);
    REQUIRE(gpu.signature() == cpu.signature());
    REQUIRE(gpu.flops_per_sample() == cpu.flops_per_sample());
    const size_t P = cpu.num_params();
    std::vector<float> p_cpu(P), p_gpu(P);
    cpu.init(p_cpu.data(), 9);
    gpu.init(p_gpu.data(), 9);
    REQUIRE(p_cpu == p_gpu);
    std::vector<int> tokens = randint((size_t)B * stride, 21, V);
    for (int b = 0; b < B; ++b)
        for (int t = T + 1; t < stride; ++t) tokens[(size_t)b * stride + t] = V + 7;
    ModelBatch batch;
    batch.B = B;
    batch.tokens = tokens.data();
    batch.stride = stride;

    long c_cpu = 0, c_gpu = 0;
    double l_cpu = cpu.forward(p_cpu.data(), batch, &c_cpu), l_gpu = gpu.forward(p_gpu.data(), batch, &c_gpu);
    CHECK(l_gpu == Approx(l_cpu).epsilon(tol.loss));
    CHECK(std::abs(c_gpu - c_cpu) <= (prec == Precision::bf16 ? 1 : 0));  // a bf16 near-tie may flip one argmax
    // It learns the fixed batch (on the CPU: 507 -> 22 in fp32).
    check_backward_and_steps(cpu, gpu, gpu.device_grads(), p_cpu, p_gpu, batch, 1.0f / (B * T), tol.grad, tol.curve);
    const cuda::Context& ctx = gpu.context();
    if (prec == Precision::bf16 && !epilogues) {  // only the fallbacks ran
        CHECK(ctx.fused_bias_gemms() == 0);
        CHECK(ctx.direct_out16_gemms() == 0);
        CHECK(ctx.fused_bias_grads() == 0);
        CHECK(ctx.fused_gelu_gemms() == 0);
        CHECK(ctx.fused_dgelu_gemms() == 0);
        if (flash) CHECK(ctx.staged_out16_gemms() > 0);  // qkv's (fc's fallback stages in fp32 itself)
        else CHECK(ctx.staged_out16_gemms() == 0);       // nothing else takes that path
        CHECK(ctx.unfused_bias_grads() > 0);
        CHECK(ctx.unfused_gelu_gemms() > 0);
        CHECK(ctx.unfused_dgelu_gemms() > 0);
    } else if (prec == Precision::bf16 && (ctx.staged_out16_gemms() > 0 || ctx.unfused_bias_grads() > 0 ||
                                           ctx.unfused_gelu_gemms() > 0 || ctx.unfused_dgelu_gemms() > 0)) {
        WARN("cuBLASLt ran " << ctx.staged_out16_gemms() << " bf16-output GEMMs through staging, "
                             << ctx.unfused_bias_grads() << " bias gradients as column sums, and GELU's forward "
                             << ctx.unfused_gelu_gemms() << " and backward " << ctx.unfused_dgelu_gemms()
                             << " times outside the GEMMs");
    }
}

} // namespace

TEST_CASE("CudaGpt: forward, backward and 50 training steps match the CPU Gpt in fp32", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    compare_with_cpu(Precision::fp32, {1e-5, 1e-4, 1e-3});
}

TEST_CASE("CudaGpt: forward, backward and 50 training steps match the CPU Gpt in bf16", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    compare_with_cpu(Precision::bf16, {1e-4, 2e-2, 2e-2});
}

// Flash attention on both sides (the same tiles and bf16 rounding points; a P or dS an ulp apart
// may round to the neighbouring bf16 value on one side, an effect of bf16's size): bf16's
// tolerances.
TEST_CASE("CudaGpt: forward, backward and 50 training steps match the CPU Gpt with flash attention", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    compare_with_cpu(Precision::bf16, {1e-4, 2e-2, 2e-2}, true);
}

TEST_CASE("CudaGpt in bf16 without cuBLASLt's epilogues (the fallback paths) matches the CPU Gpt", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    compare_with_cpu(Precision::bf16, {1e-4, 2e-2, 2e-2}, false, false);
    compare_with_cpu(Precision::bf16, {1e-4, 2e-2, 2e-2}, true, false);
}

TEST_CASE("CudaGpt: a token outside the vocabulary is refused as on the CPU", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const GptConfig cfg = one_layer_config();
    CudaGpt gpu(cfg, 2, 0);
    std::vector<float> p(gpu.num_params());
    gpu.init(p.data(), 1);
    std::vector<int> tokens(2 * 9, 3);
    tokens[13] = 16;
    ModelBatch batch;
    batch.B = 2;
    batch.tokens = tokens.data();
    batch.stride = 9;
    CHECK_THROWS_WITH(gpu.forward(p.data(), batch, nullptr), Catch::Contains("token 16 outside the model's vocabulary of 16"));
}

// A precision switch between a forward and its backward reallocates the activations the backward
// would read: it refuses, as the CPU twin does, until the next forward.
TEST_CASE("CudaGpt: a backward after a precision switch refuses until the next forward", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const GptConfig cfg = one_layer_config();
    CudaGpt gpu(cfg, 2, 0);
    std::vector<float> p(gpu.num_params()), g(gpu.num_params(), 0.0f);
    gpu.init(p.data(), 1);
    std::vector<int> tokens = randint(2 * 9, 5, cfg.vocab_size);
    ModelBatch batch;
    batch.B = 2;
    batch.tokens = tokens.data();
    batch.stride = 9;
    gpu.forward(p.data(), batch, nullptr);
    gpu.set_precision(Precision::bf16);
    CHECK_THROWS_AS(gpu.backward(g.data(), p.data(), batch, 1.0f, nullptr), std::logic_error);
    gpu.forward(p.data(), batch, nullptr);
    CHECK_NOTHROW(gpu.backward(g.data(), p.data(), batch, 1.0f, nullptr));
}
