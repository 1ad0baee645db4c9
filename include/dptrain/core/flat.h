// The flat parameter buffer's views, spans and shards, and the hook backward calls as gradients
// become final. Not for: what a model computes (model/) or how ranks sum (comm/).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace dptrain {

struct ParamView {
    std::string name;        // "fc0.weight"
    std::vector<int> shape;  // (OC, C) or (OC)
    size_t offset = 0;       // floats
    size_t size = 0;         // floats
    bool decay = false;      // matrices, not biases
};

struct ParamLayout {
    std::vector<ParamView> views;
    size_t total = 0;
    void add(const std::string& name, std::vector<int> shape, bool decay);
    const ParamView& find(const std::string& name) const;
};

struct Span {  // floats
    size_t begin = 0, end = 0;
    size_t size() const { return end - begin; }
};

// Contiguous, in rank order, cut at 16-float (cache-line) multiples so ranks never share a line;
// sizes differ by under 32 floats; may be empty.
Span shard_span(size_t total, int rank, int ranks);

// grads_ready_from(o): every gradient at offset >= o is final (backward goes high offsets first).
struct GradHook {
    virtual ~GradHook() = default;
    virtual void grads_ready_from(size_t offset) = 0;
};

} // namespace dptrain
