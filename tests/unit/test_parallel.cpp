// parallel_for's split (core/parallel.h), and the CPU ops and optimizer loops that use it: the same
// bits on one thread and on three, at shapes large enough for a team. Exact equality is right:
// every item's results are computed alone, in the same order, whichever thread computes them.
// Not OpenBLAS's products: sgemm's own split over threads may round differently.
#include "helpers.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/parallel.h"
#include "dptrain/model/optim.h"

#include <catch2/catch.hpp>

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <tuple>
#include <vector>

using namespace dptrain;
using testing::randn;

namespace {

// Sets the OpenMP thread count for a scope and restores it.
struct Threads {
    int saved = omp_get_max_threads();
    explicit Threads(int n) { omp_set_num_threads(n); }
    ~Threads() { omp_set_num_threads(saved); }
};

struct Call {
    long begin, end;
    int thread;
    bool in_team;
};

std::vector<Call> calls_of(long n, long cost) {
    std::vector<Call> calls;
    std::mutex mu;
    parallel_for(n, cost, [&](long begin, long end) {
        std::lock_guard<std::mutex> g(mu);
        calls.push_back({begin, end, omp_get_thread_num(), omp_in_parallel() != 0});
    });
    std::sort(calls.begin(), calls.end(), [](const Call& a, const Call& b) { return a.begin < b.begin; });
    return calls;
}

// The outputs of `run` on 1 thread and on 3, each from the same inputs (`run` copies them).
void same_bits(const std::function<std::vector<float>()>& run) {
    std::vector<float> one, three;
    {
        Threads t(1);
        one = run();
    }
    {
        Threads t(3);
        three = run();
    }
    REQUIRE(one.size() == three.size());
    CHECK(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("parallel_for: below the grain, one call in the caller", "[ops]") {
    Threads t(3);
    auto calls = calls_of(1000, kParallelGrain / 1000 - 1);
    REQUIRE(calls.size() == 1);
    CHECK(calls[0].begin == 0);
    CHECK(calls[0].end == 1000);
    CHECK_FALSE(calls[0].in_team);
    CHECK(calls_of(0, kParallelGrain).empty());
}

TEST_CASE("parallel_for: above the grain, contiguous ranges in thread order that cover the loop once", "[ops]") {
    Threads t(3);
    const long n = 1001;
    auto calls = calls_of(n, kParallelGrain);
    REQUIRE(calls.size() == 3);
    long next = 0;
    for (size_t k = 0; k < calls.size(); ++k) {
        CHECK(calls[k].begin == next);
        CHECK(calls[k].end > calls[k].begin);
        CHECK(calls[k].thread == (int)k);
        CHECK(calls[k].in_team);
        next = calls[k].end;
    }
    CHECK(next == n);
    // Fewer items than threads: no empty ranges.
    auto few = calls_of(2, kParallelGrain);
    REQUIRE(few.size() == 2);
    CHECK(few[0].end == few[1].begin);
}

TEST_CASE("parallel_for: one thread, or inside a team already, runs in the caller", "[ops]") {
    {
        Threads t(1);
        auto calls = calls_of(1 << 20, 8);
        REQUIRE(calls.size() == 1);
        CHECK_FALSE(calls[0].in_team);
    }
    Threads t(2);
    std::vector<std::vector<Call>> inner(2);
#pragma omp parallel num_threads(2)
    inner[omp_get_thread_num()] = calls_of(1 << 20, 8);
    for (const auto& calls : inner) {
        REQUIRE(calls.size() == 1);
        CHECK(calls[0].end == 1 << 20);
    }
}

TEST_CASE("elementwise ops and LayerNorm: the same bits on 1 and 3 threads", "[ops]") {
    const long N = 3 * kParallelGrain + 7;  // not a multiple of the thread count
    const auto x = randn(N, 1), dout = randn(N, 2);
    same_bits([&] {
        std::vector<float> out(5 * N);
        cpu::relu_forward(out.data(), x.data(), N);
        cpu::relu_backward(out.data() + N, x.data(), dout.data(), N);
        cpu::gelu_forward(out.data() + 2 * N, x.data(), N);
        cpu::gelu_backward(out.data() + 3 * N, x.data(), dout.data(), N);
        cpu::round_bf16(out.data() + 4 * N, x.data(), N);
        std::vector<float> a(x), b(dout);
        cpu::residual_backward(a.data(), b.data(), dout.data(), N);
        out.insert(out.end(), a.begin(), a.end());
        out.insert(out.end(), b.begin(), b.end());
        return out;
    });
    const int C = 96;
    const long rows = N / C;
    const auto w = randn(C, 3), bias = randn(C, 4);
    same_bits([&] {
        std::vector<float> out(rows * C), res(rows * C), mean(rows), rstd(rows), dinp(rows * C, 0.0f), dw(C, 0.0f),
            db(C, 0.0f);
        cpu::residual_layernorm_forward(res.data(), out.data(), mean.data(), rstd.data(), x.data(), dout.data(),
                                        w.data(), bias.data(), rows, C);
        cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), res.data(), w.data(), mean.data(),
                                rstd.data(), rows, C);
        for (auto* v : {&res, &mean, &rstd, &dinp, &dw, &db}) out.insert(out.end(), v->begin(), v->end());
        return out;
    });
}

TEST_CASE("matmul bias, cross-entropy and the embedding: the same bits on 1 and 3 threads", "[ops]") {
    const int B = 96, C = 64, OC = 640, T = 8;
    // Zero inputs: the forward's product adds exact zeros to the bias rows it filled.
    const std::vector<float> zeros(B * C, 0.0f);
    const auto w = randn(OC * C, 6), bias = randn(OC, 7), dout = randn(B * OC, 8), logits = randn(B * OC, 9);
    std::vector<int> targets(B), tokens(B * T);
    for (int b = 0; b < B; ++b) targets[b] = (b * 37) % OC;
    for (int i = 0; i < B * T; ++i) tokens[i] = (i * 13) % OC;
    same_bits([&] {
        std::vector<float> out(B * OC), dw(OC * C, 0.0f), db(OC, 0.0f);
        cpu::matmul_forward(out.data(), zeros.data(), w.data(), bias.data(), B, C, OC);
        cpu::matmul_backward(nullptr, dw.data(), db.data(), dout.data(), zeros.data(), w.data(), B, C, OC);
        std::vector<float> losses(B), stats(2 * B), dlogits(B * OC);
        std::vector<int> argmax(B);
        cpu::softmax_crossentropy_forward(losses.data(), stats.data(), argmax.data(), logits.data(), targets.data(), B,
                                          OC);
        cpu::softmax_crossentropy_backward(dlogits.data(), logits.data(), stats.data(), targets.data(), 0.01f, B, OC);
        for (int b = 0; b < B; ++b) losses.push_back((float)argmax[b]);
        for (auto* v : {&db, &losses, &stats, &dlogits}) out.insert(out.end(), v->begin(), v->end());
        // The embedding: token rows of w (as a table of OC rows of C), positions from the logits.
        std::vector<float> emb((size_t)B * T * C), dwte(OC * C, 0.0f), dwpe(T * C, 0.0f);
        const auto demb = randn(emb.size(), 10);
        cpu::encoder_forward(emb.data(), tokens.data(), T, w.data(), logits.data(), B, T, C);
        cpu::encoder_backward(dwte.data(), dwpe.data(), demb.data(), tokens.data(), T, B, T, C);
        for (auto* v : {&emb, &dwte, &dwpe}) out.insert(out.end(), v->begin(), v->end());
        return out;
    });
}

TEST_CASE("AdamW, SGD, the norm and the clip: the same bits on 1 and 3 threads", "[optim]") {
    const size_t n = 5 * kParallelGrain + 3;
    const auto p0 = randn(n, 10), g = randn(n, 11, 0.1f);
    same_bits([&] {
        std::vector<float> p(p0), m(n, 0.0f), v(n, 0.0f), q(p0), buf(n, 0.0f), c(g);
        for (long t = 1; t <= 3; ++t) {
            adamw_update(p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
            sgd_momentum_update(q.data(), g.data(), buf.data(), n, 1e-2f, 0.9f, 1e-4f);
        }
        const double norm = global_norm(g.data(), n);
        clip_to_norm(c.data(), n, norm, norm / 2);
        std::vector<float> out(p);
        for (auto* x : {&m, &v, &q, &buf, &c}) out.insert(out.end(), x->begin(), x->end());
        out.push_back((float)norm);
        out.push_back((float)(norm - (float)norm));
        return out;
    });
}
