#include "helpers.h"
#include "../scratch_dir.h"

#include "dptrain/core/error.h"
#include "dptrain/model/optim.h"
#include "dptrain/core/rng.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include <cstdlib>
#include <unistd.h>

namespace testing {

std::vector<float> window_logits(dptrain::LanguageModel& m, const float* params, const std::vector<int>& tokens) {
    const int T = m.config().block_size, V = m.config().vocab_size;
    std::vector<int> w(T + 1, 0);
    std::copy(tokens.begin(), tokens.end(), w.begin());
    dptrain::ModelBatch in;
    in.B = 1;
    in.tokens = w.data();
    in.stride = T + 1;
    m.forward(params, in, nullptr);
    return std::vector<float>(m.logits(), m.logits() + tokens.size() * V);
}

double max_abs_diff(const float* a, const float* b, size_t n) {
    double most = 0;
    for (size_t i = 0; i < n; ++i) most = std::max(most, (double)std::fabs(a[i] - b[i]));
    return most;
}

void check_models_agree(dptrain::Model& a, dptrain::Model& b, int T, int V, int B, uint64_t seed, double first_tol,
                        double min_cosine, double curve_tol) {
    using namespace dptrain;
    REQUIRE(a.signature() == b.signature());  // one layout: checkpoints move between the two
    const size_t P = a.num_params();
    std::vector<float> pa(P), ga(P, 0.0f), gb(P, 0.0f);
    a.init(pa.data(), seed);
    std::vector<float> pb = pa;
    std::vector<int> tokens;
    const ModelBatch in = random_windows(tokens, B, T, V, seed + 1);
    const float scale = 1.0f / (B * T);
    const double la = a.forward(pa.data(), in, nullptr), lb = b.forward(pb.data(), in, nullptr);
    CHECK(la != lb);                              // another computation ...
    CHECK(lb == Approx(la).epsilon(first_tol));  // ... of the same loss
    a.backward(ga.data(), pa.data(), in, scale, nullptr);
    b.backward(gb.data(), pb.data(), in, scale, nullptr);
    for (const ParamView& v : a.layout().views) {
        double dot = 0, na = 0, nb = 0;
        for (size_t i = v.offset; i < v.offset + v.size; ++i) {
            dot += (double)ga[i] * gb[i];
            na += (double)ga[i] * ga[i];
            nb += (double)gb[i] * gb[i];
        }
        INFO(v.name);
        CHECK(dot / std::sqrt(na * nb + 1e-300) > min_cosine);
    }
    Optimizer oa(Optimizer::Kind::adamw, a.layout(), 0.9, 0.95, 1e-8, 0.0, 0.1);
    Optimizer ob(Optimizer::Kind::adamw, b.layout(), 0.9, 0.95, 1e-8, 0.0, 0.1);
    double last_a = 0, last_b = 0;
    for (int step = 0; step < 50; ++step) {
        std::fill(ga.begin(), ga.end(), 0.0f);
        std::fill(gb.begin(), gb.end(), 0.0f);
        last_a = a.forward(pa.data(), in, nullptr);
        last_b = b.forward(pb.data(), in, nullptr);
        INFO("step " << step);
        CHECK(last_b == Approx(last_a).epsilon(curve_tol));
        a.backward(ga.data(), pa.data(), in, scale, nullptr);
        b.backward(gb.data(), pb.data(), in, scale, nullptr);
        oa.step(pa.data(), ga.data(), 3e-3, step + 1);
        ob.step(pb.data(), gb.data(), 3e-3, step + 1);
    }
    CHECK(last_a < 0.7 * la);  // both learn the fixed batch, so the curves compared are not flat
    CHECK(last_b < 0.7 * la);
}

dptrain::ModelBatch random_windows(std::vector<int>& tokens, int B, int T, int V, uint64_t seed) {
    tokens.resize((size_t)B * (T + 1));
    dptrain::Rng r(seed);
    for (auto& t : tokens) t = (int)r.below((uint64_t)V);
    dptrain::ModelBatch in;
    in.B = B;
    in.tokens = tokens.data();
    in.stride = T + 1;
    return in;
}

std::vector<float> randn(size_t n, uint64_t seed, float scale) {
    dptrain::Rng r(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = scale * r.normal();
    return v;
}

int check_grad(std::vector<float>& x, const std::vector<float>& grad, const std::function<double()>& loss, float h,
               size_t stride) {
    int bad = 0;
    for (size_t i = 0; i < x.size(); i += stride) {
        float keep = x[i];
        x[i] = keep + h;
        double up = loss();
        x[i] = keep - h;
        double down = loss();
        x[i] = keep;
        double num = (up - down) / (2.0 * h);
        if (std::fabs(grad[i] - num) > 2e-3 + 2e-2 * std::fabs(num)) {
            if (++bad <= 5) WARN("element " << i << ": analytic " << grad[i] << " numeric " << num);
        }
    }
    return bad;
}

std::string temp_dir(const std::string& tag) { return dptrain_test::scratch_dir(tag); }

void write_shards(const std::string& dir, const std::string& split, const std::vector<long>& rows, int dim,
                  int classes) {
    using namespace dptrain;
    long first = 0;
    int S = (int)rows.size();
    for (int s = 0; s < S; ++s) {
        std::vector<float> x((size_t)rows[s] * dim);
        std::vector<int> y(rows[s]);
        for (long r = 0; r < rows[s]; ++r) {
            for (int d = 0; d < dim; ++d) x[(size_t)r * dim + d] = (float)(first + r) + 0.5f * d;
            y[r] = (int)((first + r) % classes);
        }
        std::lock_guard<std::mutex> g(h5::lock());
        h5::Hid f = h5::create_file(strfmt("%s/%s-%05d-of-%05d.h5", dir.c_str(), split.c_str(), s, S));
        h5::write_dataset(f.get(), "/features", h5::Kind::f32, {(hsize_t)rows[s], (hsize_t)dim}, x.data());
        h5::write_dataset(f.get(), "/labels", h5::Kind::i32, {(hsize_t)rows[s]}, y.data());
        h5::write_attr_i64(f.get(), "num_classes", classes);
        first += rows[s];
    }
}

} // namespace testing
