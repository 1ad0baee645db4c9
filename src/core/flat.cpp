// The flat buffer's views and shards (core/flat.h).
#include "dptrain/core/flat.h"

#include <algorithm>
#include <stdexcept>

namespace dptrain {

void ParamLayout::add(const std::string& name, std::vector<int> shape, bool decay) {
    ParamView v;
    v.name = name;
    v.shape = std::move(shape);
    v.offset = total;
    v.size = 1;
    for (int d : v.shape) v.size *= (size_t)d;
    v.decay = decay;
    total += v.size;
    views.push_back(v);
}

const ParamView& ParamLayout::find(const std::string& name) const {
    for (auto& v : views)
        if (v.name == name) return v;
    throw std::out_of_range("no parameter named " + name);
}

Span shard_span(size_t total, int rank, int ranks) {
    constexpr size_t kLine = 16;
    const size_t lines = (total + kLine - 1) / kLine, R = (size_t)ranks, r = (size_t)rank;
    // The first lines % R ranks take one line more.
    auto start = [&](size_t k) { return std::min(total, kLine * (k * (lines / R) + std::min(k, lines % R))); };
    return Span{start(r), start(r + 1)};
}

} // namespace dptrain
