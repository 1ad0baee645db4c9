// CudaGpt against the CPU Gpt: one forward and backward on the same parameters and windows, then
// 50 optimizer steps each (the same AdamW on the host), whose loss curves must agree.
#include "helpers.h"

#include "dptrain/cuda_gpt.h"
#include "dptrain/error.h"
#include "dptrain/optim.h"

#include <cmath>

using namespace dptrain;
using namespace cudatest;

TEST_CASE("CudaGpt: forward, backward and 50 training steps match the CPU Gpt", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    GptConfig cfg;
    cfg.vocab_size = 67;  // not a multiple of anything the kernels tile by
    cfg.block_size = 24;
    cfg.n_layer = 2;
    cfg.n_head = 4;
    cfg.n_embd = 48;
    const int B = 5, T = cfg.block_size, stride = T + 3;  // a caller's stride wider than T + 1
    Gpt cpu(cfg, B);
    CudaGpt gpu(cfg, B, 0);
    REQUIRE(gpu.signature() == cpu.signature());
    REQUIRE(gpu.flops_per_sample() == cpu.flops_per_sample());
    const size_t P = cpu.num_params();
    std::vector<float> p_cpu(P), p_gpu(P), g_cpu(P), g_gpu(P);
    cpu.init(p_cpu.data(), 9);
    gpu.init(p_gpu.data(), 9);
    REQUIRE(p_cpu == p_gpu);
    std::vector<int> tokens = randint((size_t)B * stride, 21, cfg.vocab_size);
    ModelBatch batch;
    batch.B = B;
    batch.tokens = tokens.data();
    batch.stride = stride;

    // One step: the summed loss within 1e-5 relative (fp32 sums in other orders through two
    // layers), the argmax count equal, every gradient within 1e-4 of the largest gradient
    // magnitude (attention's and layernorm's backward chained through two blocks; the op tests
    // hold each op to 1e-5 alone).
    long c_cpu = 0, c_gpu = 0;
    double l_cpu = cpu.forward(p_cpu.data(), batch, &c_cpu), l_gpu = gpu.forward(p_gpu.data(), batch, &c_gpu);
    CHECK(l_gpu == Approx(l_cpu).epsilon(1e-5));
    CHECK(c_gpu == c_cpu);
    const float scale = 1.0f / (B * T);
    cpu.backward(g_cpu.data(), p_cpu.data(), batch, scale, nullptr);
    gpu.backward(g_gpu.data(), p_gpu.data(), batch, scale, nullptr);
    double gmax = 0, diff = 0;
    for (size_t i = 0; i < P; ++i) {
        gmax = std::max(gmax, (double)std::fabs(g_cpu[i]));
        diff = std::max(diff, (double)std::fabs(g_cpu[i] - g_gpu[i]));
    }
    INFO("max gradient " << gmax << ", max difference " << diff);
    CHECK(diff <= 1e-4 * gmax);

    // 50 AdamW steps on each: the loss curves agree within 1e-3 relative at every step.
    Optimizer opt_cpu(Optimizer::Kind::adamw, cpu.layout(), 0.9, 0.95, 1e-8, 0.0, 0.1);
    Optimizer opt_gpu(Optimizer::Kind::adamw, gpu.layout(), 0.9, 0.95, 1e-8, 0.0, 0.1);
    double first = 0, last = 0;
    for (int step = 1; step <= 50; ++step) {
        std::fill(g_cpu.begin(), g_cpu.end(), 0.0f);
        std::fill(g_gpu.begin(), g_gpu.end(), 0.0f);
        double a = cpu.forward(p_cpu.data(), batch, nullptr), b = gpu.forward(p_gpu.data(), batch, nullptr);
        INFO("step " << step);
        CHECK(b == Approx(a).epsilon(1e-3));
        if (step == 1) first = a;
        last = a;
        cpu.backward(g_cpu.data(), p_cpu.data(), batch, scale, nullptr);
        gpu.backward(g_gpu.data(), p_gpu.data(), batch, scale, nullptr);
        opt_cpu.step(p_cpu.data(), g_cpu.data(), 3e-3, step);
        opt_gpu.step(p_gpu.data(), g_gpu.data(), 3e-3, step);
    }
    CHECK(last < 0.5 * first);  // it learns the fixed batch: the comparison is not of two flat curves
}

TEST_CASE("CudaGpt: a token outside the vocabulary is refused as on the CPU", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    GptConfig cfg;
    cfg.vocab_size = 16;
    cfg.block_size = 8;
    cfg.n_layer = 1;
    cfg.n_head = 2;
    cfg.n_embd = 16;
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
