// dptrain-ckpt: look into checkpoints.
//   dptrain-ckpt info FILE          step, data position, model, tensor sizes, checksums verified;
//                                   exit 1 when a tensor holds NaN/Inf
//   dptrain-ckpt diff A B [--tol X] max |A - B| over parameters and optimizer state; exit 0 when
//                                   within X (default 0: bit-identical), 1 otherwise
#include "dptrain/io/checkpoint.h"
#include "dptrain/core/error.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace dptrain;

static double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        double d = std::fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;  // NaN propagates as a difference
    }
    return m;
}

int main(int argc, char** argv) {
    std::string cmd = argc > 1 ? argv[1] : "";
    try {
        if (cmd == "info" && argc == 3) {
            CheckpointState s = load_checkpoint(argv[2]);
            long nonfinite = 0;
            for (const auto* v : {&s.params, &s.opt_m, &s.opt_v})
                for (float x : *v) nonfinite += !std::isfinite(x);
            std::printf("%s: step %ld | epoch %ld + %ld samples | global batch %ld | seed %llu | written by %d ranks\n"
                        "model %s | optimizer %s | %zu parameters | checksums verified | %ld non-finite values\n",
                        argv[2], s.step, s.epoch, s.epoch_offset, s.global_batch, (unsigned long long)s.seed,
                        s.world_size, s.model.c_str(), s.optimizer.c_str(), s.params.size(), nonfinite);
            return nonfinite ? 1 : 0;
        }
        if (cmd == "diff" && (argc == 4 || (argc == 6 && std::strcmp(argv[4], "--tol") == 0))) {
            double tol = argc == 6 ? std::atof(argv[5]) : 0.0;
            CheckpointState a = load_checkpoint(argv[2]), b = load_checkpoint(argv[3]);
            if (a.params.size() != b.params.size() || a.opt_m.size() != b.opt_m.size() || a.opt_v.size() != b.opt_v.size()) {
                std::printf("different shapes: %s vs %s\n", a.model.c_str(), b.model.c_str());
                return 1;
            }
            bool same = std::memcmp(a.params.data(), b.params.data(), a.params.size() * 4) == 0 &&
                        std::memcmp(a.opt_m.data(), b.opt_m.data(), a.opt_m.size() * 4) == 0 &&
                        std::memcmp(a.opt_v.data(), b.opt_v.data(), a.opt_v.size() * 4) == 0;
            double dp = max_abs_diff(a.params, b.params), dm = max_abs_diff(a.opt_m, b.opt_m),
                   dv = max_abs_diff(a.opt_v, b.opt_v);
            std::printf("steps %ld vs %ld | max abs diff: params %.3g, opt_m %.3g, opt_v %.3g | %s\n", a.step, b.step, dp,
                        dm, dv, same ? "bit-identical" : "not bit-identical");
            bool ok = tol == 0.0 ? same : (dp <= tol && dm <= tol && dv <= tol);
            return ok ? 0 : 1;
        }
        std::fprintf(stderr, "usage: dptrain-ckpt info FILE | dptrain-ckpt diff A B [--tol X]\n");
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dptrain-ckpt: error: %s\n", e.what());
        return 2;
    }
}
