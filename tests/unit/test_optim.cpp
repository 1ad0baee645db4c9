// Optimizer steps against values computed by hand, the LR schedule's shape, clipping, and the
// sharded optimizer state (shards of the flat buffer, stepped apart, equal to the whole step).
#include "dptrain/model/optim.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

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

TEST_CASE("shard_span: contiguous shards in rank order, on 16-float lines, within two lines of even", "[optim][shard]") {
    for (size_t total : {0ul, 1ul, 15ul, 16ul, 17ul, 100ul, 1000ul, 12345ul}) {
        for (int ranks : {1, 2, 3, 4, 7, 8}) {
            size_t at = 0, lo = total, hi = 0;
            for (int r = 0; r < ranks; ++r) {
                const Span s = shard_span(total, r, ranks);
                INFO("total " << total << " ranks " << ranks << " rank " << r);
                CHECK(s.begin == at);
                CHECK(s.end >= s.begin);
                CHECK((s.begin % 16 == 0 || s.begin == total));
                lo = std::min(lo, s.size());
                hi = std::max(hi, s.size());
                at = s.end;
            }
            CHECK(at == total);
            CHECK(hi - lo < 32);
        }
    }
}

// A sharded step is the same arithmetic on each float as the whole step: the shards' steps
// together must give the whole step's parameters and state bit for bit, with shards that begin
// and end inside views (weight decay kept per view).
TEST_CASE("Optimizer over shards equals the whole step bit for bit", "[optim][shard]") {
    ParamLayout L;
    L.add("w0", {7, 9}, true);
    L.add("b0", {9}, false);
    L.add("w1", {9, 11}, true);
    L.add("b1", {11}, false);
    for (OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::sgd}) {
        OptimizerSettings s;
        s.kind = kind;
        s.weight_decay = 0.1;
        std::vector<float> p0(L.total), g(L.total);
        for (size_t i = 0; i < L.total; ++i) {
            p0[i] = std::sin(0.37f * (float)i);
            g[i] = std::cos(0.11f * (float)i) * 0.1f;
        }
        std::vector<float> whole = p0, sharded = p0;
        Optimizer all(s, L);
        const int W = 3;
        std::vector<std::unique_ptr<Optimizer>> part;
        for (int r = 0; r < W; ++r) part.push_back(std::make_unique<Optimizer>(s, L, shard_span(L.total, r, W)));
        CHECK(part[1]->shard().begin > 0);
        CHECK(part[1]->m().size() == part[1]->shard().size());
        CHECK(part[1]->full_m() == L.total);
        for (long t = 1; t <= 3; ++t) {
            all.step(whole.data(), g.data(), 0.01, t);
            for (auto& o : part) o->step(sharded.data() + o->shard().begin, g.data() + o->shard().begin, 0.01, t);
        }
        long wrong = 0;
        for (size_t i = 0; i < L.total; ++i) wrong += whole[i] != sharded[i];
        for (auto& o : part)
            for (size_t i = 0; i < o->shard().size(); ++i) wrong += all.m()[o->shard().begin + i] != o->m()[i];
        INFO((kind == OptimizerKind::adamw ? "adamw" : "sgd"));
        CHECK(wrong == 0);
        CHECK(whole != p0);
    }
}

TEST_CASE("clip_to_norm scales a shard by the whole gradient's norm", "[optim][shard]") {
    float g[4] = {3, 4, 0, 12};  // norm 13
    clip_to_norm(g + 2, 2, 13.0, 6.5);
    CHECK(g[3] == Approx(6.0).epsilon(1e-6));
    CHECK(g[0] == 3.0f);
    clip_to_norm(g, 4, 13.0, 0.0);  // off
    CHECK(g[0] == 3.0f);
    CHECK(sum_squares(g, 2) == 25.0);
}
