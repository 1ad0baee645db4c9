// CudaLlama against the CPU Llama: one forward and backward on the same parameters and windows (a
// batch smaller than max_batch, gradients added onto non-zero ones, the device's buffer poisoned so
// a gradient nothing wrote shows), then 50 AdamW steps each whose loss curves must agree; fp32,
// bf16 and flash attention, grouped-query heads, tied and untied heads. Then --recompute against
// keeping everything (the same bits), the refusals, and the device memory the plan promises.
#include "helpers.h"

#include "dptrain/backend/cuda/llama.h"
#include "dptrain/backend/gpu_sizes.h"
#include "dptrain/core/error.h"
#include "dptrain/model/gpt_buffers.h"
#include "dptrain/model/optim.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

using namespace dptrain;
using namespace cudatest;

namespace {

// test_cuda_gpt.cpp's tolerances and their reasons: fp32 loss 1e-5 relative, each gradient tensor
// 1e-4 of its largest value, curve 1e-3; bf16 (and flash, whose operands are bf16 on both sides)
// 1e-4, 2e-2, 2e-2, a value an fp32 ulp apart rounding to the neighbouring bf16 on one side. The
// norms' and the rotation's sums run in other orders than the CPU's (warp shuffles).
struct Tolerance {
    double loss, grad, curve;
};

// V 67 (no tile divides it), 2 layers, head size 12 (flash: 16), 4 query heads over 2 key/value
// heads (flash: 3 over 1), SwiGLU 40 wide.
GptConfig small_llama(bool flash, bool tied) {
    GptConfig cfg;
    cfg.arch = DecoderArch::llama;
    cfg.vocab_size = 67;
    cfg.block_size = 24;
    cfg.n_layer = 2;
    cfg.n_head = flash ? 3 : 4;
    cfg.n_kv_head = flash ? 1 : 2;
    cfg.n_embd = 48;
    cfg.ffn_hidden = 40;
    cfg.rope_theta = 500.0f;  // a short period, so positions 0..23 turn every pair visibly
    cfg.tie_embeddings = tied;
    cfg.flash_attention = flash;
    return cfg;
}

ModelBatch batch_of(std::vector<int>& tokens, int B, int stride) {
    ModelBatch b;
    b.B = B;
    b.tokens = tokens.data();
    b.stride = stride;
    return b;
}

void compare_with_cpu(Precision prec, Tolerance tol, bool flash, bool tied) {
    INFO((prec == Precision::bf16 ? "bf16" : "fp32") << (flash ? ", flash attention" : "")
                                                     << (tied ? ", tied head" : ", untied head"));
    const GptConfig cfg = small_llama(flash, tied);
    // Activations for 8 windows, 5 seen; rows wider than T + 1 with tokens outside the vocabulary in
    // the padding, so reading it would fail the token check.
    const int max_batch = 8, B = 5, T = cfg.block_size, stride = T + 3, V = cfg.vocab_size;
    Llama cpu(cfg, max_batch);
    const Precision other = prec == Precision::bf16 ? Precision::fp32 : Precision::bf16;
    CudaLlama gpu(cfg, max_batch, 0, other);  // switched, back and again: its operands made and freed
    cpu.set_precision(prec);
    gpu.set_precision(prec);
    gpu.set_precision(other);
    gpu.set_precision(prec);
    REQUIRE(gpu.signature() == cpu.signature());
    REQUIRE(gpu.flops_per_sample() == cpu.flops_per_sample());
    REQUIRE(gpu.activation_bytes() == cpu.activation_bytes());
    const size_t P = cpu.num_params();
    std::vector<float> p_cpu(P), p_gpu(P);
    cpu.init(p_cpu.data(), 9);
    gpu.init(p_gpu.data(), 9);
    REQUIRE(p_cpu == p_gpu);
    std::vector<int> tokens = randint((size_t)B * stride, 21, V);
    for (int b = 0; b < B; ++b)
        for (int t = T + 1; t < stride; ++t) tokens[(size_t)b * stride + t] = V + 7;
    const ModelBatch batch = batch_of(tokens, B, stride);

    long c_cpu = 0, c_gpu = 0;
    const double l_cpu = cpu.forward(p_cpu.data(), batch, &c_cpu), l_gpu = gpu.forward(p_gpu.data(), batch, &c_gpu);
    CHECK(l_gpu == Approx(l_cpu).epsilon(tol.loss));
    CHECK(std::abs(c_gpu - c_cpu) <= (prec == Precision::bf16 ? 1 : 0));  // a bf16 near-tie may flip one argmax
    // Every tensor takes part (the untied head and wte both): each one's gradient is checked non-zero.
    check_backward_and_steps(cpu, gpu, gpu.device_grads(), p_cpu, p_gpu, batch, 1.0f / (B * T), tol.grad, tol.curve);
}

// Loss and every gradient of one forward and backward, the device's buffer poisoned first.
std::vector<float> one_backward(CudaLlama& m, const std::vector<float>& p, const ModelBatch& in, double* loss) {
    const size_t P = p.size();
    std::vector<float> g(P, 0.0f);
    REQUIRE(cudaMemset(m.device_grads(), 0xFF, P * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    *loss = m.forward(p.data(), in, nullptr);
    m.backward(g.data(), p.data(), in, 1.0f / (in.B * in.stride), nullptr);
    return g;
}

} // namespace

TEST_CASE("CudaLlama: forward, backward and 50 training steps match the CPU Llama in fp32", "[cuda][llama]") {
    REQUIRE_GPU_OR_SKIP();
    compare_with_cpu(Precision::fp32, {1e-5, 1e-4, 1e-3}, false, false);
    compare_with_cpu(Precision::fp32, {1e-5, 1e-4, 1e-3}, false, true);
}

TEST_CASE("CudaLlama: forward, backward and 50 training steps match the CPU Llama in bf16", "[cuda][llama]") {
    REQUIRE_GPU_OR_SKIP();
    compare_with_cpu(Precision::bf16, {1e-4, 2e-2, 2e-2}, false, false);
    compare_with_cpu(Precision::bf16, {1e-4, 2e-2, 2e-2}, false, true);
}

TEST_CASE("CudaLlama: flash attention matches the CPU Llama's, fp32 and bf16", "[cuda][llama]") {
    REQUIRE_GPU_OR_SKIP();
    compare_with_cpu(Precision::fp32, {1e-4, 2e-2, 2e-2}, true, false);
    compare_with_cpu(Precision::bf16, {1e-4, 2e-2, 2e-2}, true, true);
}

// Backward reruns the same ops on the same values in the same order: the same bits. Three layers
// and two batches in turn, so that a layer reading another's slot, or a batch reading what the last
// one left there, shows.
TEST_CASE("CudaLlama with --recompute gives the bits of keeping every activation", "[cuda][llama]") {
    REQUIRE_GPU_OR_SKIP();
    for (bool flash : {false, true})
        for (Recompute r : {Recompute::attention, Recompute::block})
            for (Precision prec : {Precision::fp32, Precision::bf16}) {
                INFO((flash ? "flash, " : "") << (r == Recompute::block ? "block" : "attention") << ", "
                                              << (prec == Precision::bf16 ? "bf16" : "fp32"));
                GptConfig cfg = small_llama(flash, false);
                cfg.n_layer = 3;
                CudaLlama keep(cfg, 4, 0, prec);
                cfg.recompute = r;
                CudaLlama again(cfg, 4, 0, prec);
                CHECK(again.activation_bytes() < keep.activation_bytes());
                std::vector<float> p(keep.num_params());
                keep.init(p.data(), 3);
                for (int round = 0; round < 2; ++round) {
                    std::vector<int> tokens = randint((size_t)4 * (cfg.block_size + 1), 40 + round, cfg.vocab_size);
                    const ModelBatch in = batch_of(tokens, 4 - round, cfg.block_size + 1);
                    double l_keep = 0, l_again = 0;
                    const std::vector<float> g_keep = one_backward(keep, p, in, &l_keep);
                    const std::vector<float> g_again = one_backward(again, p, in, &l_again);
                    CHECK(l_again == l_keep);
                    CHECK(bit_mismatches("gradients", g_again, g_keep) == 0);
                }
            }
}

TEST_CASE("CudaLlama refuses as the CPU Llama does: a token outside the vocabulary, a backward after a "
          "precision switch",
          "[cuda][llama]") {
    REQUIRE_GPU_OR_SKIP();
    GptConfig cfg = small_llama(false, false);
    cfg.block_size = 8;
    CudaLlama gpu(cfg, 2, 0);
    std::vector<float> p(gpu.num_params()), g(gpu.num_params(), 0.0f);
    gpu.init(p.data(), 1);
    std::vector<int> tokens = randint(2 * 9, 5, cfg.vocab_size);
    tokens[13] = cfg.vocab_size;
    const ModelBatch bad = batch_of(tokens, 2, 9);
    CHECK_THROWS_WITH(gpu.forward(p.data(), bad, nullptr), Catch::Contains("token 67 outside the model's vocabulary"));
    tokens[13] = 3;
    const ModelBatch in = batch_of(tokens, 2, 9);
    gpu.forward(p.data(), in, nullptr);
    gpu.set_precision(Precision::bf16);
    CHECK_THROWS_AS(gpu.backward(g.data(), p.data(), in, 1.0f, nullptr), std::logic_error);
    gpu.forward(p.data(), in, nullptr);
    CHECK_NOTHROW(gpu.backward(g.data(), p.data(), in, 1.0f, nullptr));
}

// What the memory plan says a CudaLlama takes (its activations, the bf16 operands, parameters and
// gradients) against what making one takes from the device; the input slots and the reduction
// scratch are the difference allowed (a few MiB at this size).
TEST_CASE("CudaLlama takes from the device what the memory plan's formulas say", "[cuda][llama]") {
    REQUIRE_GPU_OR_SKIP();
    GptConfig cfg = small_llama(false, false);
    cfg.vocab_size = 4096;
    cfg.block_size = 256;
    cfg.n_embd = 256;
    cfg.n_head = 4;
    cfg.n_kv_head = 2;
    cfg.ffn_hidden = 0;
    for (Precision prec : {Precision::fp32, Precision::bf16}) {
        INFO((prec == Precision::bf16 ? "bf16" : "fp32"));
        const int B = 8;
        size_t free0 = 0, free1 = 0, total = 0;
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        REQUIRE(cudaMemGetInfo(&free0, &total) == cudaSuccess);
        CudaLlama m(cfg, B, 0, prec);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        REQUIRE(cudaMemGetInfo(&free1, &total) == cudaSuccess);
        const double taken = (double)free0 - (double)free1;
        const double plan = (double)Llama::activation_bytes(cfg, B) + gpu_llama_operand_bytes(cfg, B, prec) +
                            8.0 * (double)Llama::count_params(cfg);
        CHECK(m.activation_bytes() == Llama::activation_bytes(cfg, B));
        CHECK(m.operand_bytes() == gpu_llama_operand_bytes(cfg, B, prec));
        INFO("taken " << taken / 1048576 << " MiB, planned " << plan / 1048576 << " MiB");
        CHECK(taken >= plan);
        CHECK(taken <= plan + 64.0 * 1048576);
    }
}
