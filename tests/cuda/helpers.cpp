// Helpers of the CUDA tests (helpers.h).
#include "helpers.h"

#include "dptrain/core/rng.h"
#include "dptrain/model/optim.h"

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace cudatest {

void check_backward_and_steps(dptrain::Model& cpu, dptrain::Model& gpu, float* device_grads,
                              std::vector<float>& p_cpu, std::vector<float>& p_gpu,
                              const dptrain::ModelBatch& batch, float scale, double grad_tol, double curve_tol) {
    using dptrain::Optimizer;
    const size_t P = cpu.num_params();
    const std::vector<float> g0 = randn(P, 33, 1e-6f);
    std::vector<float> g_cpu = g0, g_gpu = g0;
    REQUIRE(cudaMemset(device_grads, 0xFF, P * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    cpu.backward(g_cpu.data(), p_cpu.data(), batch, scale, nullptr);
    gpu.backward(g_gpu.data(), p_gpu.data(), batch, scale, nullptr);
    CHECK(std::all_of(g_gpu.begin(), g_gpu.end(), [](float x) { return std::isfinite(x); }));
    for (const dptrain::ParamView& v : cpu.layout().views) {
        double gmax = 0, diff = 0;
        for (size_t i = v.offset; i < v.offset + v.size; ++i) {
            const double want = (double)g_cpu[i] - g0[i], got = (double)g_gpu[i] - g0[i];
            gmax = std::max(gmax, std::fabs(want));
            diff = std::max(diff, std::fabs(want - got));
        }
        INFO(v.name << ": largest gradient " << gmax << ", largest difference " << diff);
        CHECK(gmax > 0);
        CHECK(diff <= grad_tol * gmax);
    }
    Optimizer opt_cpu(Optimizer::Kind::adamw, cpu.layout(), 0.9, 0.95, 1e-8, 0.0, 0.1);
    Optimizer opt_gpu(Optimizer::Kind::adamw, gpu.layout(), 0.9, 0.95, 1e-8, 0.0, 0.1);
    double first = 0, last = 0;
    for (int step = 1; step <= 50; ++step) {
        std::fill(g_cpu.begin(), g_cpu.end(), 0.0f);
        std::fill(g_gpu.begin(), g_gpu.end(), 0.0f);
        const double a = cpu.forward(p_cpu.data(), batch, nullptr), b = gpu.forward(p_gpu.data(), batch, nullptr);
        INFO("step " << step);
        CHECK(b == Approx(a).epsilon(curve_tol));
        if (step == 1) first = a;
        last = a;
        cpu.backward(g_cpu.data(), p_cpu.data(), batch, scale, nullptr);
        gpu.backward(g_gpu.data(), p_gpu.data(), batch, scale, nullptr);
        opt_cpu.step(p_cpu.data(), g_cpu.data(), 3e-3, step);
        opt_gpu.step(p_gpu.data(), g_gpu.data(), 3e-3, step);
    }
    CHECK(last < 0.5 * first);
}

bool have_gpu() {
    static int state = -1;  // -1 not asked yet, 0 no GPU, 1 GPU
    if (state < 0) {
        std::string why;
        state = dptrain::cuda::device_count(&why) > 0 ? 1 : 0;
        if (!state) {
            std::printf("SKIPPED cuda: no GPU (%s)\n", why.c_str());
            std::fflush(stdout);
        }
    }
    return state == 1;
}

std::vector<float> randn(size_t n, uint64_t seed, float scale, float offset) {
    dptrain::Rng r(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = offset + scale * r.normal();
    return v;
}

std::vector<int> randint(size_t n, uint64_t seed, int below) {
    dptrain::Rng r(seed);
    std::vector<int> v(n);
    for (auto& x : v) x = (int)r.below((uint64_t)below);
    return v;
}

int mismatches(const char* what, const std::vector<float>& got, const std::vector<float>& want, double abs_tol,
               double rel_tol, const std::vector<float>& scale) {
    REQUIRE(got.size() == want.size());
    REQUIRE((scale.empty() || scale.size() == want.size()));
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        double s = scale.empty() ? std::fabs((double)want[i]) : (double)scale[i];
        double tol = abs_tol + rel_tol * s, diff = std::fabs((double)got[i] - (double)want[i]);
        if (!(diff <= tol) && ++bad <= 5)
            WARN(what << "[" << i << "]: cuda " << got[i] << " cpu " << want[i] << " (|diff| " << diff << " > tol "
                      << tol << ")");
    }
    return bad;
}

int bit_mismatches(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
    REQUIRE(got.size() == want.size());
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && ++bad <= 5)
            WARN(what << "[" << i << "]: cuda " << got[i] << " cpu " << want[i] << " (bits differ)");
    return bad;
}

int bf16_mismatches(const char* what, const std::vector<dptrain::bf16>& got, const std::vector<float>& fp32) {
    REQUIRE(got.size() == fp32.size());
    std::vector<dptrain::bf16> want(fp32.size());
    dptrain::to_bf16(want.data(), fp32.data(), fp32.size());
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i] && ++bad <= 5)
            WARN(what << "[" << i << "]: cuda " << got[i] << ", the fp32 form's " << fp32[i] << " rounds to "
                      << want[i]);
    return bad;
}

} // namespace cudatest
