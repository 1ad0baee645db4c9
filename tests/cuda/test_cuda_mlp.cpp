// CudaMlp against the CPU Mlp: one forward and backward on the same parameters and batch, then
// 50 optimizer steps each (the same AdamW on the host), whose loss curves must agree.
#include "helpers.h"

#include "dptrain/backend/cuda/mlp.h"
#include "dptrain/model/optim.h"

#include <algorithm>
#include <cmath>

using namespace dptrain;
using namespace cudatest;

TEST_CASE("CudaMlp: forward, backward and 50 training steps match the CPU Mlp", "[cuda]") {
    REQUIRE_GPU_OR_SKIP();
    const int B = 48, in = 37, classes = 11;
    for (Activation act : {Activation::relu, Activation::gelu}) {
        Mlp cpu(in, {64, 29}, classes, act, B);
        CudaMlp gpu(in, {64, 29}, classes, act, B, 0);
        REQUIRE(gpu.signature() == cpu.signature());
        const size_t P = cpu.num_params();
        std::vector<float> p_cpu(P), p_gpu(P), g_cpu(P), g_gpu(P);
        cpu.init(p_cpu.data(), 5);
        gpu.init(p_gpu.data(), 5);
        REQUIRE(p_cpu == p_gpu);
        std::vector<float> x = randn((size_t)B * in, 17);
        std::vector<int> y = randint(B, 18, classes);
        ModelBatch batch;
        batch.B = B;
        batch.x = x.data();
        batch.labels = y.data();

        // One step: the loss within 1e-5 relative (fp32 sums in another order), every gradient
        // within 1e-5 of the largest gradient magnitude (the matmul tolerances, chained).
        long c_cpu = 0, c_gpu = 0;
        double l_cpu = cpu.forward(p_cpu.data(), batch, &c_cpu), l_gpu = gpu.forward(p_gpu.data(), batch, &c_gpu);
        CHECK(l_gpu == Approx(l_cpu).epsilon(1e-5));
        CHECK(c_gpu == c_cpu);
        // The GPU model's own gradients poisoned first: each layer's backward writes its weight and
        // bias gradients (no zeroing pass), so a value nothing wrote comes back NaN.
        REQUIRE(cudaMemset(gpu.device_grads(), 0xFF, P * sizeof(float)) == cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        cpu.backward(g_cpu.data(), p_cpu.data(), batch, 1.0f / B, nullptr);
        gpu.backward(g_gpu.data(), p_gpu.data(), batch, 1.0f / B, nullptr);
        CHECK(std::all_of(g_gpu.begin(), g_gpu.end(), [](float x) { return std::isfinite(x); }));
        double gmax = 0, diff = 0;
        for (size_t i = 0; i < P; ++i) {
            gmax = std::max(gmax, (double)std::fabs(g_cpu[i]));
            diff = std::max(diff, (double)std::fabs(g_cpu[i] - g_gpu[i]));
        }
        INFO("max gradient " << gmax << ", max difference " << diff);
        CHECK(diff <= 1e-5 * gmax);

        // 50 AdamW steps on each (the host optimizer, as the trainer runs it): the loss curves
        // agree within 1e-3 relative at every step (differences compound, but slowly).
        Optimizer opt_cpu(Optimizer::Kind::adamw, cpu.layout(), 0.9, 0.999, 1e-8, 0.0, 0.01);
        Optimizer opt_gpu(Optimizer::Kind::adamw, gpu.layout(), 0.9, 0.999, 1e-8, 0.0, 0.01);
        for (int step = 1; step <= 50; ++step) {
            std::fill(g_cpu.begin(), g_cpu.end(), 0.0f);
            std::fill(g_gpu.begin(), g_gpu.end(), 0.0f);
            double a = cpu.forward(p_cpu.data(), batch, nullptr), b = gpu.forward(p_gpu.data(), batch, nullptr);
            INFO("step " << step);
            CHECK(b == Approx(a).epsilon(1e-3));
            cpu.backward(g_cpu.data(), p_cpu.data(), batch, 1.0f / B, nullptr);
            gpu.backward(g_gpu.data(), p_gpu.data(), batch, 1.0f / B, nullptr);
            opt_cpu.step(p_cpu.data(), g_cpu.data(), 1e-3, step);
            opt_gpu.step(p_gpu.data(), g_gpu.data(), 1e-3, step);
        }
    }
}
