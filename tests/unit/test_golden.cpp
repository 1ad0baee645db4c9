// dptrain's GPT and Llama against an independent implementation: tests/golden/gpt_tiny.h5 and
// llama_tiny.h5, written by tests/golden/make_{gpt,llama}_reference.py with PyTorch (regenerate
// with those scripts). Same weights and tokens; every tensor must agree. Tolerances, both sides float32 with different summation
// orders: logits and loss within 2e-5 absolute + 1e-4 relative; gradients within 1e-6 absolute
// + 1e-3 relative of the largest gradient of their tensor; after 3 AdamW steps (lr 1e-2, where
// the first step moves every weight by ~lr) losses within 1e-4 and parameters within 5e-5.
#include "dptrain/model/gpt.h"
#include "dptrain/model/llama.h"
#include "dptrain/data/h5.h"
#include "dptrain/model/optim.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

using namespace dptrain;

static std::string fixture(const char* name = "gpt_tiny.h5") {
    std::string here = __FILE__;
    return here.substr(0, here.rfind("/unit/")) + "/golden/" + name;
}

template <typename T>
static std::vector<T> read(hid_t f, const char* name, h5::Kind k) {
    h5::Hid d = h5::open_dataset(f, "the golden fixture", name, "regenerate the fixture");
    size_t n = 1;
    for (hsize_t x : h5::dims(d.get())) n *= x;
    std::vector<T> v(n);
    h5::read_dataset(d.get(), k, v.data());
    return v;
}

// Largest |a - b| beyond atol + rtol * scale, per tensor of the layout; 0 when all agree.
static int compare(const ParamLayout& L, const std::vector<float>& got, const std::vector<float>& want, double atol,
                   double rtol, const char* what) {
    int bad = 0;
    for (const ParamView& v : L.views) {
        double scale = 0, worst = 0;
        for (size_t i = 0; i < v.size; ++i) scale = std::max(scale, (double)std::fabs(want[v.offset + i]));
        for (size_t i = 0; i < v.size; ++i)
            worst = std::max(worst, (double)std::fabs(got[v.offset + i] - want[v.offset + i]));
        if (worst > atol + rtol * scale) {
            ++bad;
            WARN(what << " " << v.name << ": max |diff| " << worst << " (largest value " << scale << ")");
        }
    }
    return bad;
}

// The fixture's checks on model m (built from its attributes): logits, loss, gradients, AdamW steps.
static void check_against(hid_t f, LanguageModel& m) {
    const int B = (int)h5::read_attr_i64(f, "batch"), T = m.config().block_size, V = m.config().vocab_size;
    auto tokens = read<int>(f, "/tokens", h5::Kind::i32);
    auto params = read<float>(f, "/params", h5::Kind::f32);
    auto logits_ref = read<float>(f, "/logits", h5::Kind::f32);
    auto grads_ref = read<float>(f, "/grads", h5::Kind::f32);
    auto losses_ref = read<float>(f, "/losses_adamw", h5::Kind::f32);
    auto params_ref = read<float>(f, "/params_adamw", h5::Kind::f32);
    float loss_ref = read<float>(f, "/loss", h5::Kind::f32)[0];

    REQUIRE(params.size() == m.num_params());
    ModelBatch in;
    in.B = B;
    in.tokens = tokens.data();
    in.stride = T + 1;
    const double terms = (double)B * T;
    double loss = m.forward(params.data(), in, nullptr) / terms;
    CHECK(loss == Approx(loss_ref).margin(2e-5).epsilon(1e-4));
    long bad_logits = 0;
    for (size_t i = 0; i < (size_t)B * T * V; ++i)
        bad_logits += std::fabs(m.logits()[i] - logits_ref[i]) > 2e-5 + 1e-4 * std::fabs(logits_ref[i]);
    CHECK(bad_logits == 0);
    std::vector<float> grads(m.num_params(), 0.0f);
    m.backward(grads.data(), params.data(), in, (float)(1.0 / terms), nullptr);
    CHECK(compare(m.layout(), grads, grads_ref, 1e-6, 1e-3, "gradient") == 0);

    Optimizer opt(Optimizer::Kind::adamw, m.layout(), h5::read_attr_f64(f, "beta1"), h5::read_attr_f64(f, "beta2"),
                  h5::read_attr_f64(f, "eps"), 0.0, h5::read_attr_f64(f, "weight_decay"));
    double lr = h5::read_attr_f64(f, "lr");
    for (size_t step = 0; step < losses_ref.size(); ++step) {
        std::fill(grads.begin(), grads.end(), 0.0f);
        double l = m.forward(params.data(), in, nullptr) / terms;
        CHECK(l == Approx(losses_ref[step]).margin(1e-4));
        m.backward(grads.data(), params.data(), in, (float)(1.0 / terms), nullptr);
        opt.step(params.data(), grads.data(), lr, (long)step + 1);
    }
    CHECK(compare(m.layout(), params, params_ref, 5e-5, 0.0, "parameter after AdamW") == 0);
}

TEST_CASE("GPT matches the PyTorch reference: logits, loss, gradients, AdamW steps", "[gpt][golden]") {
    std::lock_guard<std::mutex> g(h5::lock());
    h5::Hid f = h5::open_file(fixture(), "regenerate it with tests/golden/make_gpt_reference.py");
    GptConfig cfg;
    cfg.vocab_size = (int)h5::read_attr_i64(f.get(), "vocab_size");
    cfg.block_size = (int)h5::read_attr_i64(f.get(), "block_size");
    cfg.n_layer = (int)h5::read_attr_i64(f.get(), "n_layer");
    cfg.n_head = (int)h5::read_attr_i64(f.get(), "n_head");
    cfg.n_embd = (int)h5::read_attr_i64(f.get(), "n_embd");
    Gpt m(cfg, (int)h5::read_attr_i64(f.get(), "batch"));
    check_against(f.get(), m);
}

TEST_CASE("Llama matches the PyTorch reference: logits, loss, gradients, AdamW steps", "[llama][golden]") {
    std::lock_guard<std::mutex> g(h5::lock());
    h5::Hid f = h5::open_file(fixture("llama_tiny.h5"), "regenerate it with tests/golden/make_llama_reference.py");
    GptConfig cfg;
    cfg.arch = DecoderArch::llama;
    cfg.vocab_size = (int)h5::read_attr_i64(f.get(), "vocab_size");
    cfg.block_size = (int)h5::read_attr_i64(f.get(), "block_size");
    cfg.n_layer = (int)h5::read_attr_i64(f.get(), "n_layer");
    cfg.n_head = (int)h5::read_attr_i64(f.get(), "n_head");
    cfg.n_kv_head = (int)h5::read_attr_i64(f.get(), "n_kv_head");
    cfg.n_embd = (int)h5::read_attr_i64(f.get(), "n_embd");
    cfg.ffn_hidden = (int)h5::read_attr_i64(f.get(), "ffn_hidden");
    cfg.rope_theta = (float)h5::read_attr_f64(f.get(), "rope_theta");
    cfg.norm_eps = (float)h5::read_attr_f64(f.get(), "norm_eps");
    cfg.tie_embeddings = false;
    Llama m(cfg, (int)h5::read_attr_i64(f.get(), "batch"));
    check_against(f.get(), m);
}
