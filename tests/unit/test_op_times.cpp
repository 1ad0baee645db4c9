// --profile-ops: OpTimes' sums and table, and that the CPU models time every op of a forward and
// backward while an OpTimes is set (and none once it is cleared).
#include "helpers.h"

#include "dptrain/model/gpt.h"
#include "dptrain/model/model.h"
#include "dptrain/model/op_times.h"

#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

using namespace dptrain;

TEST_CASE("OpTimes sums by kind and tables the kinds that ran, longest first", "[ops][profile]") {
    OpTimes t;
    t.add(OpKind::layernorm, 0.002);
    t.add(OpKind::matmul, 0.005);
    t.add(OpKind::matmul, 0.003);
    CHECK(t.seconds(OpKind::matmul) == Approx(0.008));
    CHECK(t.calls(OpKind::matmul) == 2);
    CHECK(t.calls(OpKind::attention) == 0);
    CHECK(t.total() == Approx(0.010));
    std::istringstream lines(t.table());
    std::vector<std::string> rows;
    for (std::string l; std::getline(lines, l);) rows.push_back(l);
    REQUIRE(rows.size() == 3);  // matmul, layernorm, total: kinds that never ran are left out
    CHECK(rows[0].find("matmul") != std::string::npos);
    CHECK(rows[0].find("8.000 ms") != std::string::npos);
    CHECK(rows[0].find("80.0%") != std::string::npos);
    CHECK(rows[0].find("2 calls") != std::string::npos);
    CHECK(rows[1].find("layernorm") != std::string::npos);
    CHECK(rows[1].find("1 call") != std::string::npos);
    CHECK(rows[1].find("calls") == std::string::npos);
    CHECK(rows[2].find("total") != std::string::npos);
    CHECK(rows[2].find("10.000 ms") != std::string::npos);
    int runs = 0;
    timed(nullptr, OpKind::other, [&] { ++runs; });  // not timed, still run
    timed(&t, OpKind::other, [&] { ++runs; });
    CHECK(runs == 2);
    CHECK(t.calls(OpKind::other) == 1);
}

TEST_CASE("Gpt times each op of forward and backward into the OpTimes it is given", "[ops][profile][gpt]") {
    GptConfig cfg;
    cfg.vocab_size = 11;
    cfg.block_size = 8;
    cfg.n_layer = 3;
    cfg.n_head = 2;
    cfg.n_embd = 16;
    const int B = 2, L = cfg.n_layer, stride = cfg.block_size + 1;
    Gpt m(cfg, B);
    std::vector<float> p(m.num_params()), g(m.num_params(), 0.0f);
    m.init(p.data(), 1);
    std::vector<int> tokens((size_t)B * stride);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (int)(i * 5 % cfg.vocab_size);
    ModelBatch in;
    in.B = B;
    in.tokens = tokens.data();
    in.stride = stride;
    for (Precision prec : {Precision::fp32, Precision::bf16}) {
        INFO((prec == Precision::bf16 ? "bf16" : "fp32"));
        m.set_precision(prec);
        OpTimes t;
        m.set_op_times(&t);
        m.forward(p.data(), in, nullptr);
        m.backward(g.data(), p.data(), in, 0.1f, nullptr);
        m.set_op_times(nullptr);
        // Every op of the model, counted: 4 matmuls a layer and the head, both ways (bf16 adds
        // the weights' rounding); attention and GELU a layer, both ways; a layernorm twice a layer
        // and the final one, both ways (the two residual adds a layer run inside the forward ones
        // after them); the encoder and the cross-entropy both ways.
        CHECK(t.calls(OpKind::matmul) == 2 * (4 * L + 1) + (prec == Precision::bf16 ? 1 : 0));
        CHECK(t.calls(OpKind::attention) == 2 * L);
        CHECK(t.calls(OpKind::activation) == 2 * L);
        CHECK(t.calls(OpKind::layernorm) == 2 * (2 * L + 1));
        CHECK(t.calls(OpKind::encoder) == 2);
        CHECK(t.calls(OpKind::crossentropy) == 2);
        CHECK(t.calls(OpKind::other) == 1);  // clearing the residual stream's gradient
        CHECK(t.total() > 0.0);
        // Cleared: nothing more is counted.
        const double before = t.total();
        m.forward(p.data(), in, nullptr);
        CHECK(t.total() == before);
    }
}

TEST_CASE("Mlp times each op of forward and backward into the OpTimes it is given", "[ops][profile]") {
    const int B = 5;
    Mlp m(7, {9, 6}, 3, Activation::gelu, B);
    std::vector<float> p(m.num_params()), g(m.num_params(), 0.0f), x(B * 7, 0.5f);
    std::vector<int> y = {0, 1, 2, 0, 1};
    m.init(p.data(), 2);
    for (Precision prec : {Precision::fp32, Precision::bf16}) {
        INFO((prec == Precision::bf16 ? "bf16" : "fp32"));
        m.set_precision(prec);
        OpTimes t;
        m.set_op_times(&t);
        m.forward(p.data(), x.data(), y.data(), B, nullptr);
        m.backward(g.data(), p.data(), x.data(), y.data(), B, 0.2f, nullptr);
        m.set_op_times(nullptr);
        // Three layers both ways (bf16 adds the weights' rounding), the activations between them.
        CHECK(t.calls(OpKind::matmul) == 2 * 3 + (prec == Precision::bf16 ? 1 : 0));
        CHECK(t.calls(OpKind::activation) == 2 * 2);
        CHECK(t.calls(OpKind::crossentropy) == 2);
    }
}
