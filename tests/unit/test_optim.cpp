// Optimizer steps against values computed by hand, the LR schedule's shape, and clipping.
#include "dptrain/model/optim.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace dptrain;

TEST_CASE("AdamW: two steps by hand", "[optim]") {
    float p[2] = {1.0f, -2.0f}, m[2] = {0, 0}, v[2] = {0, 0};
    const float g1[2] = {0.5f, -1.0f}, g2[2] = {0.1f, 0.2f};
    const float lr = 0.1f, b1 = 0.9f, b2 = 0.99f, eps = 1e-8f, wd = 0.01f;
    adamw_update(p, g1, m, v, 2, lr, b1, b2, eps, wd, 1);
    // step 1: mhat = g, vhat = g^2, so the update is lr * (sign(g) + wd * p).
    CHECK(p[0] == Approx(1.0 - 0.1 * (1.0 + 0.01 * 1.0)).epsilon(1e-6));
    CHECK(p[1] == Approx(-2.0 - 0.1 * (-1.0 + 0.01 * -2.0)).epsilon(1e-6));
    double p0 = p[0];
    adamw_update(p, g2, m, v, 2, lr, b1, b2, eps, wd, 2);
    double mm = 0.9 * 0.05 + 0.1 * 0.1, vv = 0.99 * 0.0025 + 0.01 * 0.01;
    double mhat = mm / (1 - 0.81), vhat = vv / (1 - 0.9801);
    CHECK(m[0] == Approx(mm).epsilon(1e-6));
    CHECK(v[0] == Approx(vv).epsilon(1e-6));
    CHECK(p[0] == Approx(p0 - 0.1 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.01 * p0)).epsilon(1e-6));
}

TEST_CASE("SGD with momentum: two steps by hand", "[optim]") {
    float p[1] = {1.0f}, buf[1] = {0.0f};
    const float g[1] = {0.5f};
    sgd_momentum_update(p, g, buf, 1, 0.1f, 0.9f, 0.0f);
    CHECK(buf[0] == Approx(0.5));
    CHECK(p[0] == Approx(0.95));
    sgd_momentum_update(p, g, buf, 1, 0.1f, 0.9f, 0.0f);
    CHECK(buf[0] == Approx(0.95));
    CHECK(p[0] == Approx(0.855));
}

TEST_CASE("Optimizer applies weight decay to matrices only", "[optim]") {
    ParamLayout L;
    L.add("w", {1, 1}, true);
    L.add("b", {1}, false);
    Optimizer opt(Optimizer::Kind::sgd, L, 0.9, 0.999, 1e-8, 0.0, 0.5);
    float p[2] = {1.0f, 1.0f}, g[2] = {0.0f, 0.0f};
    opt.step(p, g, 0.1, 1);
    CHECK(p[0] == Approx(1.0 - 0.1 * 0.5));
    CHECK(p[1] == 1.0f);
}

TEST_CASE("LR schedule: linear warmup then cosine to the floor", "[optim]") {
    LrSchedule s;
    s.lr = 1.0;
    s.min_ratio = 0.1;
    s.warmup = 10;
    s.total = 110;
    CHECK(s.at(0) == Approx(0.1));
    CHECK(s.at(9) == Approx(1.0));
    CHECK(s.at(10) == Approx(1.0));
    CHECK(s.at(60) == Approx(0.55));  // halfway through the cosine
    CHECK(s.at(110) == Approx(0.1));
    CHECK(s.at(500) == Approx(0.1));
    for (long t = 10; t < 110; ++t) CHECK(s.at(t + 1) <= s.at(t));
}

TEST_CASE("global norm and clipping", "[optim]") {
    float g[2] = {3.0f, 4.0f};
    CHECK(global_norm(g, 2) == Approx(5.0));
    CHECK(clip_grad_norm(g, 2, 10.0) == Approx(5.0));
    CHECK(g[0] == 3.0f);  // under the limit: untouched
    CHECK(clip_grad_norm(g, 2, 1.0) == Approx(5.0));
    CHECK(global_norm(g, 2) == Approx(1.0).epsilon(1e-5));
    float h[2] = {3.0f, 4.0f};
    clip_grad_norm(h, 2, 0.0);  // 0 = off
    CHECK(h[1] == 4.0f);
}
