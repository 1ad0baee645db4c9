// dptrain-ckpt: look into checkpoints (the usage below says how).
#include "dptrain/core/error.h"
#include "dptrain/io/checkpoint.h"
#include "dptrain/tools/cli.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

using namespace dptrain;
namespace po = boost::program_options;

namespace {

const char* kUsage =
    "usage: dptrain-ckpt info FILE\n"
    "           step, data position, model, tensor sizes, checksums verified; exit 1 when a tensor holds\n"
    "           NaN or Inf\n"
    "       dptrain-ckpt diff A B [--tol X]\n"
    "           the largest |A - B| over parameters and optimizer state; exit 0 when within X (default 0:\n"
    "           bit-identical), 1 otherwise\n"
    "Exit 2 (with one line on stderr) for a bad argument or a file that is not a valid checkpoint.\n";

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        double d = std::fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;  // NaN propagates as a difference
    }
    return m;
}

int info(int argc, char** argv) {
    std::string file;
    po::options_description desc;
    desc.add_options()("file", po::value(&file));
    parse_subcommand(argc, argv, desc, {"file"});
    if (file.empty()) throw po::error("give the checkpoint file");
    CheckpointState s = load_checkpoint(file);
    long nonfinite = 0;
    for (const auto* v : {&s.params, &s.opt_m, &s.opt_v})
        for (float x : *v) nonfinite += !std::isfinite(x);
    std::printf("%s: step %ld | epoch %ld + %ld samples | global batch %ld | seed %llu | written by %d ranks\n"
                "model %s | optimizer %s | %zu parameters | checksums verified | %ld non-finite values\n",
                file.c_str(), s.step, s.epoch, s.epoch_offset, s.global_batch, (unsigned long long)s.seed,
                s.world_size, s.model.c_str(), s.optimizer.c_str(), s.params.size(), nonfinite);
    return nonfinite ? 1 : 0;
}

int diff(int argc, char** argv) {
    std::string fa, fb;
    double tol = 0.0;
    po::options_description desc;
    desc.add_options()("a", po::value(&fa))("b", po::value(&fb))(
        "tol", po::value(&tol)->default_value(0.0), "largest |A - B| still equal; 0: bit-identical");
    parse_subcommand(argc, argv, desc, {"a", "b"});
    if (fb.empty()) throw po::error("give the two checkpoints to compare");
    if (!(tol >= 0)) throw po::error(strfmt("--tol %g must be >= 0", tol));
    CheckpointState a = load_checkpoint(fa), b = load_checkpoint(fb);
    if (a.params.size() != b.params.size() || a.opt_m.size() != b.opt_m.size() || a.opt_v.size() != b.opt_v.size()) {
        std::printf("different shapes: %s vs %s\n", a.model.c_str(), b.model.c_str());
        return 1;
    }
    const bool same = std::memcmp(a.params.data(), b.params.data(), a.params.size() * 4) == 0 &&
                      std::memcmp(a.opt_m.data(), b.opt_m.data(), a.opt_m.size() * 4) == 0 &&
                      std::memcmp(a.opt_v.data(), b.opt_v.data(), a.opt_v.size() * 4) == 0;
    const double dp = max_abs_diff(a.params, b.params), dm = max_abs_diff(a.opt_m, b.opt_m),
                 dv = max_abs_diff(a.opt_v, b.opt_v);
    std::printf("steps %ld vs %ld | max abs diff: params %.3g, opt_m %.3g, opt_v %.3g | %s\n", a.step, b.step, dp, dm,
                dv, same ? "bit-identical" : "not bit-identical");
    const bool ok = tol == 0.0 ? same : (dp <= tol && dm <= tol && dv <= tol);
    return ok ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    return run_tool("dptrain-ckpt", kUsage, argc, argv, [&] {
        const std::string cmd = argc > 1 ? argv[1] : "";
        if (cmd == "info") return info(argc - 1, argv + 1);
        if (cmd == "diff") return diff(argc - 1, argv + 1);
        throw po::error(cmd.empty() ? "no command given (info or diff)" : "not a command (info or diff)");
    });
}
