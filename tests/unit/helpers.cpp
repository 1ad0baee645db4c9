#include "helpers.h"

#include "dptrain/error.h"
#include "dptrain/rng.h"

#include <catch2/catch.hpp>

#include <cmath>

#include <cstdlib>
#include <unistd.h>

namespace testing {

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

std::string temp_dir(const std::string& tag) {
    std::string tmpl = "/tmp/dptrain-" + tag + "-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    return buf.data();
}

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
