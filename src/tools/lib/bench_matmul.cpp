// dptrain-bench matmul: the CPU backend's matmul_forward for few rows (decoding) on GPT layer
// shapes, beside one sgemm of all rows and one sgemv a row; and matmul_forward_rows against the
// same sgemm. Best of --repeats timings of ~50 ms each. dptrain-bench products (below): a training
// step's products in micro-batches. Not for: training's products (hundreds of rows, sgemm anyway).
#include "dptrain/tools/bench.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/tools/cli.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace dptrain {

namespace {

// "128x384,768x2304" -> {{128, 384}, {768, 2304}}: input width C by output width OC.
std::vector<std::pair<int, int>> parse_shapes(const std::string& text) {
    std::vector<std::pair<int, int>> out;
    for (const std::string& item : split_list(text)) {
        int c = 0, oc = 0;
        char tail = 0;
        if (std::sscanf(item.c_str(), "%dx%d%c", &c, &oc, &tail) != 2 || c < 1 || oc < 1 || c > 65536 || oc > 262144)
            throw boost::program_options::error("--shapes '" + item + "' is not CxOC (e.g. 128x384)");
        out.emplace_back(c, oc);
    }
    if (out.empty()) throw boost::program_options::error("--shapes is empty");
    return out;
}

// "1,2,4" -> {1, 2, 4}, each in 1..most.
std::vector<int> parse_counts(const std::string& text, const char* option, const char* what, long most) {
    std::vector<int> out;
    for (const std::string& item : split_list(text)) {
        char* end = nullptr;
        const long n = std::strtol(item.c_str(), &end, 10);
        if (*end || n < 1 || n > most)
            throw boost::program_options::error(strfmt("%s '%s' is not %s in 1..%ld", option, item.c_str(), what, most));
        out.push_back((int)n);
    }
    return out;
}

// Microseconds a call: the best of `repeats` timings of `calls` calls.
double best_us(int repeats, long calls, const std::function<void()>& fn) {
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
        const double t0 = now_seconds();
        for (long i = 0; i < calls; ++i) fn();
        best = std::min(best, (now_seconds() - t0) / (double)calls * 1e6);
    }
    return best;
}

}  // namespace

int bench_matmul(int argc, char** argv) {
    const int rank = MpiCommunicator(MPI_COMM_WORLD).rank();
    std::string shapes_text = "128x384,128x128,128x512,512x128,768x2304,768x768,3072x768,768x50257";
    std::string rows_text = "1,2,4,8";
    int repeats = 5, threads = 1;
    boost::program_options::options_description desc;
    desc.add_options()("shapes", boost::program_options::value(&shapes_text))(
        "rows", boost::program_options::value(&rows_text))("repeats", boost::program_options::value(&repeats))(
        "threads", boost::program_options::value(&threads));
    parse_subcommand(argc, argv, desc);
    const auto shapes = parse_shapes(shapes_text);
    const std::vector<int> rows = parse_counts(rows_text, "--rows", "a row count", 4096);
    if (rows.empty()) throw boost::program_options::error("--rows is empty");
    if (repeats < 1 || threads < 1) throw boost::program_options::error("--repeats and --threads must be at least 1");
    if (rank != 0) return 0;
    cpu::set_threads(threads);
    std::printf("# dptrain-bench matmul: microseconds a call, best of %d; %d thread%s; out = inp (rows x C) "
                "times weight (OC x C) transposed, plus a bias\n",
                repeats, threads, threads == 1 ? "" : "s");
    std::printf("%7s %7s %5s %14s %14s %7s %14s %14s %7s\n", "C", "OC", "rows", "matmul_forward", "sgemm (peer)",
                "ratio", "sgemv a row", "forward_rows", "ratio");
    for (const auto& [C, OC] : shapes) {
        const int most = *std::max_element(rows.begin(), rows.end());
        std::vector<float> w((size_t)OC * C), x((size_t)most * C), bias(OC), out((size_t)most * OC);
        for (size_t i = 0; i < w.size(); ++i) w[i] = (float)((i * 7919) % 1000) * 1e-4f - 0.05f;
        for (size_t i = 0; i < x.size(); ++i) x[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
        std::fill(bias.begin(), bias.end(), 0.1f);
        for (int B : rows) {
            // About 1 GFLOP a timing (50 ms at 20 GFLOP/s), at least 3 calls.
            const long calls = std::max(3L, (long)(1e9 / (2.0 * B * C * OC)));
            const double ours = best_us(repeats, calls, [&] {
                cpu::matmul_forward(out.data(), x.data(), w.data(), bias.data(), B, C, OC);
            });
            const double peer = best_us(repeats, calls, [&] {
                for (int b = 0; b < B; ++b) std::copy(bias.begin(), bias.end(), out.begin() + (size_t)b * OC);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OC, C, 1.0f, x.data(), C, w.data(), C, 1.0f,
                            out.data(), OC);
            });
            const double rowwise = best_us(repeats, calls, [&] {
                for (int b = 0; b < B; ++b)
                    cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.0f, w.data(), C, x.data() + (size_t)b * C, 1,
                                0.0f, out.data() + (size_t)b * OC, 1);
            });
            const double fixed = best_us(repeats, calls, [&] {
                cpu::matmul_forward_rows(out.data(), x.data(), w.data(), bias.data(), B, C, OC);
            });
            std::printf("%7d %7d %5d %14.2f %14.2f %6.2fx %14.2f %14.2f %6.2fx\n", C, OC, B, ours, peer, peer / ours,
                        rowwise, fixed, peer / fixed);
        }
    }
    return 0;
}

namespace {

// An MLP's widths, input first.
std::vector<int> parse_widths(const std::string& text) {
    const std::vector<int> dims = parse_counts(text, "--dims", "a width", 65536);
    if (dims.size() < 2) throw boost::program_options::error("--dims needs an input and an output width (e.g. 32,256,10)");
    return dims;
}

// Weights and each layer's input and output for all rows, allocated once; a micro-batch uses its
// slice.
struct MlpProducts {
    std::vector<int> dims;
    std::vector<std::vector<float>> w, dw, bias, dbias, act, grad;

    MlpProducts(const std::vector<int>& d, int rows) : dims(d) {
        const int L = (int)dims.size() - 1;
        w.resize(L), dw.resize(L), bias.resize(L), dbias.resize(L), act.resize(L + 1), grad.resize(L + 1);
        for (int l = 0; l < L; ++l) {
            w[l].resize((size_t)dims[l + 1] * dims[l]);
            for (size_t i = 0; i < w[l].size(); ++i) w[l][i] = (float)((i * 7919) % 1000) * 1e-4f - 0.05f;
            dw[l].assign(w[l].size(), 0.0f);
            bias[l].assign(dims[l + 1], 0.1f);
            dbias[l].assign(dims[l + 1], 0.0f);
        }
        for (int l = 0; l <= L; ++l) {
            act[l].resize((size_t)rows * dims[l]);
            for (size_t i = 0; i < act[l].size(); ++i) act[l][i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
            grad[l] = act[l];
        }
    }
    float* in(int l, int first) { return act[l].data() + (size_t)first * dims[l]; }
    float* din(int l, int first) { return grad[l].data() + (size_t)first * dims[l]; }

    // dptrain's calls for rows [first, first + B): forward, then backward (no input gradient for
    // the first layer), the weight gradients summed in place.
    void ops(int B, int first) {
        const int L = (int)dims.size() - 1;
        for (int l = 0; l < L; ++l)
            cpu::matmul_forward(in(l + 1, first), in(l, first), w[l].data(), bias[l].data(), B, dims[l], dims[l + 1]);
        for (int l = L - 1; l >= 0; --l)
            cpu::matmul_backward(l == 0 ? nullptr : din(l, first), dw[l].data(), dbias[l].data(), din(l + 1, first),
                                 in(l, first), w[l].data(), B, dims[l], dims[l + 1]);
    }
    // The same products as bare sgemm calls (the peer).
    void bare(int B, int first) {
        const int L = (int)dims.size() - 1;
        for (int l = 0; l < L; ++l)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, dims[l + 1], dims[l], 1.0f, in(l, first), dims[l],
                        w[l].data(), dims[l], 0.0f, in(l + 1, first), dims[l + 1]);
        for (int l = L - 1; l >= 0; --l) {
            if (l > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, dims[l], dims[l + 1], 1.0f, din(l + 1, first),
                            dims[l + 1], w[l].data(), dims[l], 0.0f, din(l, first), dims[l]);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dims[l + 1], dims[l], B, 1.0f, din(l + 1, first),
                        dims[l + 1], in(l, first), dims[l], 1.0f, dw[l].data(), dims[l]);
        }
    }
    double flops(int rows) const {
        double f = 0;
        for (size_t l = 0; l + 1 < dims.size(); ++l) f += 2.0 * rows * dims[l] * dims[l + 1] * (l == 0 ? 2 : 3);
        return f;
    }
};

}  // namespace

// dptrain-bench products: what gradient accumulation cannot save. An MLP step's products (as the
// CPU backend calls them) over --rows rows in one call each, against --micro-batches calls of
// rows/N, weight gradients summed in place; beside them the same as bare sgemm calls. The ratio is
// the floor a micro-batched step meets on this machine.
int bench_products(int argc, char** argv) {
    const int rank = MpiCommunicator(MPI_COMM_WORLD).rank();
    std::string dims_text = "32,256,256,10";
    int rows = 128, micro = 4, repeats = 5, threads = 1;
    boost::program_options::options_description desc;
    desc.add_options()("dims", boost::program_options::value(&dims_text))(
        "rows", boost::program_options::value(&rows))("micro-batches", boost::program_options::value(&micro))(
        "repeats", boost::program_options::value(&repeats))("threads", boost::program_options::value(&threads));
    parse_subcommand(argc, argv, desc);
    const std::vector<int> dims = parse_widths(dims_text);
    if (rows < 1 || micro < 1) throw boost::program_options::error("--rows and --micro-batches must be at least 1");
    if (rows % micro != 0)
        throw boost::program_options::error(strfmt("--rows %d is not a multiple of --micro-batches %d", rows, micro));
    if (repeats < 1 || threads < 1) throw boost::program_options::error("--repeats and --threads must be at least 1");
    if (rank != 0) return 0;
    cpu::set_threads(threads);
    MlpProducts mlp(dims, rows);
    const long calls = std::max(3L, (long)(1e9 / mlp.flops(rows)));  // about 1 GFLOP a timing
    auto step_us = [&](void (MlpProducts::*fn)(int, int), int n) {
        return best_us(repeats, calls, [&] {
            for (int m = 0; m < n; ++m) (mlp.*fn)(rows / n, m * (rows / n));
        });
    };
    const double ours1 = step_us(&MlpProducts::ops, 1), oursN = step_us(&MlpProducts::ops, micro);
    const double peer1 = step_us(&MlpProducts::bare, 1), peerN = step_us(&MlpProducts::bare, micro);
    std::printf("# dptrain-bench products: an MLP step's matrix products (dims %s), microseconds a step, best of %d; "
                "%d thread%s\n",
                dims_text.c_str(), repeats, threads, threads == 1 ? "" : "s");
    std::printf("%-22s %12s %14s %8s\n", "", strfmt("%d rows", rows).c_str(),
                strfmt("%d x %d rows", micro, rows / micro).c_str(), "ratio");
    std::printf("%-22s %12.1f %14.1f %7.3fx\n", "dptrain's ops", ours1, oursN, oursN / ours1);
    std::printf("%-22s %12.1f %14.1f %7.3fx\n", "sgemm alone (peer)", peer1, peerN, peerN / peer1);
    return 0;
}

} // namespace dptrain
