// Helpers of the CUDA tests (helpers.h).
#include "helpers.h"

#include "dptrain/core/rng.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace cudatest {

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
