// Every CPU op's backward against central finite differences of its forward, and the whole MLP.
// Tolerance: float32 forward with step h = 1e-2 (1e-3 for the model) gives O(h^2) truncation
// plus rounding ~1e-7/h; |analytic - numeric| <= 2e-3 + 2e-2 * |numeric| covers both with margin
// while still catching a wrong term (errors of a wrong formula are O(1)).
#include "helpers.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/fastmath.h"
#include "dptrain/model/model.h"
#include "dptrain/core/rng.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

using namespace dptrain;
using testing::randn;

// Weighted sum of outputs, so every output gets a distinct upstream gradient.
static double dot(const std::vector<float>& a, const std::vector<float>& w) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += (double)a[i] * w[i];
    return s;
}

TEST_CASE("matmul_backward matches finite differences", "[ops]") {
    const int B = 3, C = 5, OC = 4;
    auto inp = randn(B * C, 1), w = randn(OC * C, 2), bias = randn(OC, 3), dout = randn(B * OC, 4);
    std::vector<float> out(B * OC);
    auto loss = [&] {
        cpu::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), B, C, OC);
        return dot(out, dout);
    };
    std::vector<float> dinp(B * C), dw(OC * C, 0.0f), db(OC, 0.0f);
    cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), B, C, OC);
    CHECK(testing::check_grad(inp, dinp, loss, 1e-2f) == 0);
    CHECK(testing::check_grad(w, dw, loss, 1e-2f) == 0);
    CHECK(testing::check_grad(bias, db, loss, 1e-2f) == 0);

    SECTION("weight and bias gradients accumulate") {
        std::vector<float> dw2 = dw, db2 = db;
        cpu::matmul_backward(nullptr, dw2.data(), db2.data(), dout.data(), inp.data(), w.data(), B, C, OC);
        for (size_t i = 0; i < dw.size(); ++i) CHECK(dw2[i] == Approx(2 * dw[i]));
        for (size_t i = 0; i < db.size(); ++i) CHECK(db2[i] == Approx(2 * db[i]));
    }
}

// One or two rows take sgemv, more take sgemm: the same products, summed in another order.
// 1e-5 relative: both are float32 dot products of C = 96 terms of order 1.
TEST_CASE("matmul_forward: one or two rows agree with the same rows among many", "[ops]") {
    const int B = 5, C = 96, OC = 37;
    auto inp = randn(B * C, 21), w = randn(OC * C, 22), bias = randn(OC, 23);
    std::vector<float> all(B * OC);
    cpu::matmul_forward(all.data(), inp.data(), w.data(), bias.data(), B, C, OC);
    for (int rows : {1, 2})
        for (const float* b : std::vector<const float*>{bias.data(), nullptr})
            for (int r = 0; r + rows <= B; ++r) {
                std::vector<float> some(rows * OC, 7.0f), ref(all);
                if (!b) cpu::matmul_forward(ref.data(), inp.data(), w.data(), nullptr, B, C, OC);
                cpu::matmul_forward(some.data(), inp.data() + r * C, w.data(), b, rows, C, OC);
                for (int i = 0; i < rows * OC; ++i) {
                    const float want = ref[r * OC + i];
                    INFO("rows " << rows << " from " << r << ", element " << i << (b ? "" : ", no bias"));
                    CHECK(std::fabs(some[i] - want) <= 1e-5f * (1.0f + std::fabs(want)));
                }
            }
}

TEST_CASE("matmul_forward_rows: a row's bits do not depend on the rows around it or the threads", "[ops]") {
    // C 101: not a multiple of the 8 lanes (the tail); C 96: a multiple (eight outputs finished at
    // once). OC 203: 25 tiles of eight outputs and 3 alone, in 4 blocks, so 3 threads split the call.
    const int B = 13, OC = 203;
    const int threads = cpu::get_threads();
    for (int C : {101, 96}) {
        for (bool with_bias : {true, false}) {
            auto inp = randn(B * C, 31), w = randn(OC * C, 32), bias = randn(OC, 33);
            const float* b = with_bias ? bias.data() : nullptr;
            INFO("C " << C);
            std::vector<float> all(B * OC), sgemm(B * OC);
            cpu::matmul_forward_rows(all.data(), inp.data(), w.data(), b, B, C, OC);
            // The same product as matmul_forward, within rounding (a different order of additions).
            cpu::matmul_forward(sgemm.data(), inp.data(), w.data(), b, B, C, OC);
            for (int i = 0; i < B * OC; ++i) {
                INFO("element " << i << (b ? "" : ", no bias"));
                CHECK(std::fabs(all[i] - sgemm[i]) <= 1e-5f * (1.0f + std::fabs(sgemm[i])));
            }
            // Every run of rows, from every start: the same bits as among all 13 (matmul_forward
            // differs in the last bits between 1-2, 3, 4-7, 8-11 and 12+ rows).
            long differ = 0;
            for (int rows = 1; rows <= B; ++rows)
                for (int r = 0; r + rows <= B; ++r) {
                    std::vector<float> some(rows * OC, 7.0f);
                    cpu::matmul_forward_rows(some.data(), inp.data() + r * C, w.data(), b, rows, C, OC);
                    for (int i = 0; i < rows * OC; ++i) differ += some[i] != all[r * OC + i];
                }
            CHECK(differ == 0);
            for (int t : {1, 3}) {
                cpu::set_threads(t);
                std::vector<float> again(B * OC);
                cpu::matmul_forward_rows(again.data(), inp.data(), w.data(), b, B, C, OC);
                CHECK(again == all);
            }
            cpu::set_threads(threads);
        }
    }
}

// bf16 weights are widened exactly and go through the same additions: the fp32 form's bits on the
// widened weights, for the tail (C 101) and whole tiles (C 96), with and without bias, on 1 and 3
// threads. A product that read the weights as fp32 bits, or rounded instead of widening, differs.
TEST_CASE("matmul_forward_rows with bf16 weights: the fp32 form's bits on the widened weights", "[ops]") {
    const int B = 7, OC = 203;
    const int threads = cpu::get_threads();
    for (int C : {101, 96}) {
        const auto inp = randn(B * C, 41), w = randn(OC * C, 42), bias = randn(OC, 43);
        std::vector<bf16> w16(w.size());
        to_bf16(w16.data(), w.data(), w.size());
        std::vector<float> widened(w.size());
        from_bf16(widened.data(), w16.data(), w.size());
        for (bool with_bias : {true, false})
            for (int t : {1, 3}) {
                INFO("C " << C << (with_bias ? "" : ", no bias") << ", " << t << " threads");
                cpu::set_threads(t);
                const float* b = with_bias ? bias.data() : nullptr;
                std::vector<float> got(B * OC, 7.0f), want(B * OC, -7.0f);
                cpu::matmul_forward_rows(got.data(), inp.data(), w16.data(), b, B, C, OC);
                cpu::matmul_forward_rows(want.data(), inp.data(), widened.data(), b, B, C, OC);
                CHECK(got == want);
            }
        cpu::set_threads(threads);
        // Not the fp32 weights' result: the rounding is there (a test of the test).
        std::vector<float> got(B * OC), fp32(B * OC);
        cpu::matmul_forward_rows(got.data(), inp.data(), w16.data(), nullptr, B, C, OC);
        cpu::matmul_forward_rows(fp32.data(), inp.data(), w.data(), nullptr, B, C, OC);
        CHECK(got != fp32);
    }
}

TEST_CASE("relu and gelu backward match finite differences", "[ops]") {
    const long N = 40;
    auto inp = randn(N, 5), dout = randn(N, 6);
    // Keep ReLU inputs away from the kink at 0, where the derivative is undefined.
    for (auto& x : inp)
        if (std::fabs(x) < 0.05f) x = 0.5f;
    std::vector<float> out(N), dinp(N);
    auto relu_loss = [&] {
        cpu::relu_forward(out.data(), inp.data(), N);
        return dot(out, dout);
    };
    cpu::relu_backward(dinp.data(), inp.data(), dout.data(), N);
    CHECK(testing::check_grad(inp, dinp, relu_loss, 1e-2f) == 0);

    auto gelu_loss = [&] {
        cpu::gelu_forward(out.data(), inp.data(), N);
        return dot(out, dout);
    };
    cpu::gelu_backward(dinp.data(), inp.data(), dout.data(), N);
    CHECK(testing::check_grad(inp, dinp, gelu_loss, 1e-2f) == 0);
    // Known values of the tanh approximation.
    float x[3] = {0.0f, 1.0f, -2.0f}, y[3];
    cpu::gelu_forward(y, x, 3);
    CHECK(y[0] == 0.0f);
    CHECK(y[1] == Approx(0.841192f).epsilon(1e-5));
    CHECK(y[2] == Approx(-0.045402f).epsilon(1e-4));
}

TEST_CASE("softmax cross-entropy: values and backward", "[ops]") {
    const int B = 4, V = 6;
    auto logits = randn(B * V, 7, 2.0f);
    std::vector<int> targets = {0, 5, 2, 2};
    std::vector<float> losses(B), stats(2 * B);
    std::vector<int> argmax(B);
    auto loss = [&] {
        cpu::softmax_crossentropy_forward(losses.data(), stats.data(), argmax.data(), logits.data(), targets.data(), B,
                                          V);
        double s = 0;
        for (float l : losses) s += l;
        return s / B;
    };
    loss();
    for (int b = 0; b < B; ++b) {
        const float* z = logits.data() + b * V;
        double sum = 0;
        for (int v = 0; v < V; ++v) sum += std::exp((double)z[v]);
        CHECK(losses[b] == Approx(std::log(sum) - z[targets[b]]).epsilon(1e-5));
        // The stats backward recomputes the probabilities from: the row's max and 1 / sum exp(z - max).
        const int arg = (int)(std::max_element(z, z + V) - z);
        CHECK(argmax[b] == arg);
        CHECK(stats[2 * b] == z[arg]);
        CHECK(stats[2 * b + 1] == Approx(std::exp((double)z[arg]) / sum).epsilon(1e-6));
    }
    // Backward, with the stats of the unperturbed logits, against finite differences of the mean.
    const std::vector<float> stats_here = stats;  // the finite differences below overwrite stats
    std::vector<float> dlogits(B * V);
    cpu::softmax_crossentropy_backward(dlogits.data(), logits.data(), stats.data(), targets.data(), 1.0f / B, B, V);
    for (int b = 0; b < B; ++b) {  // each row's gradient sums to zero: probabilities sum to 1
        double row = 0;
        for (int v = 0; v < V; ++v) row += dlogits[b * V + v];
        CHECK(std::fabs(row) < 1e-6);
    }
    CHECK(testing::check_grad(logits, dlogits, loss, 1e-2f) == 0);

    SECTION("backward in place over the logits gives the same bits") {
        std::vector<float> stats0(2 * B);
        cpu::softmax_crossentropy_forward(losses.data(), stats0.data(), nullptr, logits.data(), targets.data(), B, V);
        CHECK(stats0 == stats_here);  // argmax null: the rest is unchanged
        std::vector<float> inplace = logits;
        cpu::softmax_crossentropy_backward(inplace.data(), inplace.data(), stats0.data(), targets.data(), 1.0f / B, B,
                                           V);
        CHECK(std::memcmp(inplace.data(), dlogits.data(), dlogits.size() * sizeof(float)) == 0);
    }
    SECTION("large logits do not overflow") {
        std::vector<float> big = {1000.0f, 0.0f}, st(2), l(1), d(2);
        int t = 1, arg = -1;
        cpu::softmax_crossentropy_forward(l.data(), st.data(), &arg, big.data(), &t, 1, 2);
        CHECK(l[0] == Approx(1000.0f));
        CHECK(arg == 0);
        cpu::softmax_crossentropy_backward(d.data(), big.data(), st.data(), &t, 1.0f, 1, 2);
        CHECK(d[0] == Approx(1.0f));
        CHECK(d[1] == Approx(-1.0f));
    }
    SECTION("ties: the first largest logit is the argmax, as std::max_element") {
        std::vector<float> z = {0.5f, 2.0f, -1.0f, 2.0f, -3.0f, -3.0f, -3.0f, -3.0f}, st(4), l(2);
        std::vector<int> t = {0, 1}, arg(2, -1);
        cpu::softmax_crossentropy_forward(l.data(), st.data(), arg.data(), z.data(), t.data(), 2, 4);
        CHECK(arg[0] == 1);
        CHECK(arg[1] == 0);  // all equal: the first
    }
    SECTION("NaN: the row's max only at index 0, skipped anywhere else, as a scan from z[0]") {
        // Wide rows, so that the max runs in SIMD lanes (the GPU kernel keeps the same rule).
        const int W = 600;
        auto z = randn(3 * (size_t)W, 8, 3.0f);
        z[0] = NAN;                                     // row 0: NaN first
        z[W + 4] = NAN, z[W + 20] = 30.0f;              // row 1: NaN before the max
        z[2 * W + 5] = 30.0f, z[2 * W + 261] = NAN;     // row 2: NaN after it
        std::vector<float> st(6), l(3);
        std::vector<int> t = {3, 3, 3}, arg(3, -1);
        cpu::softmax_crossentropy_forward(l.data(), st.data(), arg.data(), z.data(), t.data(), 3, W);
        CHECK(arg == std::vector<int>{0, 20, 5});
        CHECK(std::isnan(st[0]));
        CHECK(st[2] == 30.0f);
        CHECK(st[4] == 30.0f);
        // A row of -inf names index 0 (its loss is NaN); a row of one value is its own max.
        std::vector<float> low(W, -INFINITY), one = {NAN, 2.5f};
        cpu::softmax_crossentropy_forward(l.data(), st.data(), arg.data(), low.data(), t.data(), 1, W);
        CHECK(arg[0] == 0);
        CHECK(st[0] == -INFINITY);
        std::vector<int> zero = {0, 0};
        cpu::softmax_crossentropy_forward(l.data(), st.data(), arg.data(), one.data(), zero.data(), 2, 1);
        CHECK(std::isnan(st[0]));
        CHECK(st[2] == 2.5f);
        CHECK(arg[0] == 0);
        CHECK(arg[1] == 0);
        CHECK(l[1] == Approx(0.0).margin(1e-6));
    }
}

TEST_CASE("MLP backward matches finite differences of the mean loss", "[ops][model]") {
    for (Activation act : {Activation::gelu, Activation::relu}) {
        const int B = 5, D = 6, K = 4;
        Mlp m(D, {7, 5}, K, act, B);
        std::vector<float> params(m.num_params()), grads(m.num_params(), 0.0f);
        m.init(params.data(), 11);
        // Biases start at zero; give them values so their gradients are exercised off the origin.
        Rng r(12);
        for (auto& p : params) p += 0.1f * r.normal();
        auto x = randn(B * D, 13);
        std::vector<int> y = {0, 3, 1, 2, 3};
        auto loss = [&] { return m.forward(params.data(), x.data(), y.data(), B, nullptr) / B; };
        loss();
        m.backward(grads.data(), params.data(), x.data(), y.data(), B, 1.0f / B);
        CHECK(testing::check_grad(params, grads, loss, 1e-3f) == 0);
    }
}

TEST_CASE("MLP layout, init and signature", "[model]") {
    Mlp m(3, {4}, 2, Activation::relu, 8);
    const ParamLayout& L = m.layout();
    REQUIRE(L.views.size() == 4);
    CHECK(L.find("fc0.weight").shape == std::vector<int>{4, 3});
    CHECK(L.find("fc1.bias").offset == 4 * 3 + 4 + 2 * 4);
    CHECK(L.total == 4 * 3 + 4 + 2 * 4 + 2);
    CHECK(L.find("fc0.weight").decay);
    CHECK_FALSE(L.find("fc0.bias").decay);
    CHECK(m.signature() == "mlp in=3 hidden=4 classes=2 act=relu");
    std::vector<float> a(m.num_params()), b(m.num_params()), c(m.num_params());
    m.init(a.data(), 5);
    m.init(b.data(), 5);
    m.init(c.data(), 6);
    CHECK(a == b);
    CHECK(a != c);
    // Forward and the weights' gradients for both layers, the inputs' gradient for the second only
    // (backward computes none for the data).
    CHECK(m.flops_per_sample() == 2.0 * (3 * 4 + 4 * 2) + 2.0 * (3 * 4 + 4 * 2) + 2.0 * (4 * 2));
}

// The softmaxes' and the cross-entropy's exp: within 3e-7 relative of exp in double over the range
// a max-subtracted argument takes (and beyond), 1 at 0, NaN kept (a NaN logit must show).
TEST_CASE("exp_approx stays within 3e-7 relative of exp", "[ops]") {
    double worst = 0;
    for (int i = -870000; i <= 880000; ++i) {
        const float x = i * 1e-4f;
        const double want = std::exp((double)x);
        worst = std::max(worst, std::fabs((double)cpu::exp_approx(x) - want) / want);
    }
    INFO("worst relative error " << worst);
    CHECK(worst < 3e-7);
    CHECK(cpu::exp_approx(0.0f) == 1.0f);
    CHECK(std::isnan(cpu::exp_approx(NAN)));
}

TEST_CASE("tanh_approx stays within 3e-7 of std::tanh", "[ops]") {
    double worst = 0;
    for (int i = -200000; i <= 200000; ++i) {
        float y = i * 1e-4f;
        worst = std::max(worst, (double)std::fabs(cpu::tanh_approx(y) - std::tanh(y)));
    }
    CHECK(worst < 3e-7);
    CHECK(cpu::tanh_approx(50.0f) == 1.0f);
    CHECK(cpu::tanh_approx(-50.0f) == -1.0f);
}
