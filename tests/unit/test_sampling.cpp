// TokenPicker, the next token's choice for generate and serve: each mode draws from the right
// distribution (observed frequencies against the softmax, over enough draws that a wrong
// distribution is far outside the tolerance: 200,000 draws give a standard error under 0.0012 on
// each probability, the tolerance is 0.006), top-k and the nucleus draw only from their sets, and
// the nucleus over a flat vocabulary (more tokens than the first sorted prefix holds) is the set a
// whole sort gives.
#include "dptrain/infer/inference.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

using namespace dptrain;

namespace {

std::vector<double> softmax(const std::vector<float>& z, double temperature) {
    const float top = *std::max_element(z.begin(), z.end());
    std::vector<double> p(z.size());
    double sum = 0;
    for (size_t i = 0; i < z.size(); ++i) sum += p[i] = std::exp((z[i] - top) / temperature);
    for (double& v : p) v /= sum;
    return p;
}

std::vector<double> frequencies(TokenPicker& t, const std::vector<float>& z, int draws) {
    std::vector<double> f(z.size(), 0.0);
    for (int d = 0; d < draws; ++d) f[(size_t)t.pick(z.data())] += 1.0 / draws;
    return f;
}

} // namespace

TEST_CASE("sampling: temperature 0 takes the largest logit", "[sampling]") {
    const std::vector<float> z = {0.1f, 2.5f, -1.0f, 2.4f};
    TokenPicker t(4, 0.0, 0, 1.0, 7);
    for (int i = 0; i < 10; ++i) CHECK(t.pick(z.data()) == 1);
}

TEST_CASE("sampling: the whole vocabulary is drawn by its softmax", "[sampling]") {
    const std::vector<float> z = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, -30.0f};
    for (double temperature : {1.0, 0.7}) {
        TokenPicker t((int)z.size(), temperature, 0, 1.0, 11);
        const std::vector<double> want = softmax(z, temperature), got = frequencies(t, z, 200000);
        for (size_t i = 0; i < z.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(0.006));
    }
}

TEST_CASE("sampling: top-k draws only the k most likely, in their proportions", "[sampling]") {
    const std::vector<float> z = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
    TokenPicker t((int)z.size(), 1.0, 2, 1.0, 13);
    const std::vector<double> got = frequencies(t, z, 200000);
    const double a = std::exp(2.0), b = std::exp(1.0);
    CHECK(got[2] == Approx(a / (a + b)).margin(0.006));
    CHECK(got[0] == Approx(b / (a + b)).margin(0.006));
    CHECK(got[1] + got[3] + got[4] == 0.0);
}

TEST_CASE("sampling: the nucleus is the fewest most likely tokens reaching top_p, however many", "[sampling]") {
    // 5,000 nearly equal logits: half the mass needs about 2,500 tokens, more than the first
    // prefixes sorted (64, 256, 1,024), so the picker must widen its prefix to find them.
    const int V = 5000;
    std::vector<float> z(V);
    for (int i = 0; i < V; ++i) z[(size_t)((i * 7919) % V)] = -0.0002f * (float)i;  // a rank order scattered over ids
    const double top_p = 0.5;
    const std::vector<double> p = softmax(z, 1.0);
    std::vector<int> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return z[(size_t)a] > z[(size_t)b]; });
    std::vector<int> rank(V);
    int nucleus = 0;
    double acc = 0;
    for (int r = 0; r < V; ++r) {
        rank[(size_t)order[(size_t)r]] = r;
        if (acc < top_p) acc += p[(size_t)order[(size_t)r]], nucleus = r + 1;
    }
    REQUIRE(nucleus > 1024);
    TokenPicker t(V, 1.0, 0, top_p, 17);
    int deepest = 0;
    for (int d = 0; d < 5000; ++d) deepest = std::max(deepest, rank[(size_t)t.pick(z.data())]);
    CHECK(deepest < nucleus);
    // The draws reach the nucleus's edge: each of its last 20 ranks is drawn ~1/2,500 a draw, so 5,000
    // draws miss all 20 with a chance of e^-40.
    CHECK(deepest >= nucleus - 20);
    // Within top-k, the nucleus is taken of the k's mass: top-k 2 and top_p 0.5 of {2, 1, ...} is
    // the largest alone.
    const std::vector<float> small = {1.0f, 0.0f, 2.0f, -1.0f};
    TokenPicker tk(4, 1.0, 2, 0.5, 19);
    for (int d = 0; d < 1000; ++d) CHECK(tk.pick(small.data()) == 2);
}
