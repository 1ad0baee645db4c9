// Parameter layout (one flat buffer, named views) and the MLP classifier's forward/backward over
// the backend ops. The model does not own parameters or gradients: callers hand in the flat
// buffers, so they can live wherever communication wants them (host, shared window, device).
// Not for: talking to other ranks or reading data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dptrain {

struct ParamView {
    std::string name;        // "fc0.weight"
    std::vector<int> shape;  // (OC, C) or (OC)
    size_t offset = 0;       // in floats, into the flat buffer
    size_t size = 0;         // in floats
    bool decay = false;      // weight decay applies (matrices, not biases)
};

struct ParamLayout {
    std::vector<ParamView> views;
    size_t total = 0;
    void add(const std::string& name, std::vector<int> shape, bool decay);
    const ParamView& find(const std::string& name) const;
};

enum class Activation { relu, gelu };

// Told by backward as gradients become final: grads_ready_from(o) means every gradient at flat
// offset >= o is written for this step (backward runs last layer first, i.e. high offsets first).
// Gradient communication uses it to start early (gradsync.h).
struct GradHook {
    virtual ~GradHook() = default;
    virtual void grads_ready_from(size_t offset) = 0;
};

// MLP classifier: in -> hidden[0] -> ... -> hidden[n-1] -> classes, activation between layers,
// softmax cross-entropy at the end. Activations are allocated once for max_batch rows.
class Mlp {
  public:
    Mlp(int in, std::vector<int> hidden, int classes, Activation act, int max_batch);

    const ParamLayout& layout() const { return layout_; }
    size_t num_params() const { return layout_.total; }
    int in_dim() const { return dims_.front(); }
    int classes() const { return dims_.back(); }
    // "mlp in=64 hidden=256,256 classes=10 act=relu": checkpoints must match it.
    std::string signature() const;
    // FLOPs of forward + backward for one sample (2 per multiply-add; backward = 2x forward).
    double flops_per_sample() const;

    // He-normal weights (std sqrt(2/fan_in); the output layer sqrt(1/fan_in)), zero biases.
    // Each tensor has its own counter-based stream, so the result depends only on seed.
    void init(float* params, uint64_t seed) const;

    // Forward over B rows of x (B, in) with labels y (B). Returns the summed loss of the rows and
    // adds the number of correct argmax predictions to *correct (when not null).
    double forward(const float* params, const float* x, const int* y, int B, long* correct);
    // Backward of the last forward: grads += d(scale * summed loss) / d params. hook (optional)
    // hears of each layer's gradients as soon as they are written.
    void backward(float* grads, const float* params, const float* x, const int* y, int B, float scale,
                  GradHook* hook = nullptr);

  private:
    std::vector<int> dims_;  // in, hidden..., classes
    Activation act_;
    int max_batch_;
    ParamLayout layout_;
    // per layer l: pre_[l] = layer output before activation (max_batch, dims_[l+1]);
    // post_[l] = after activation (hidden layers only).
    std::vector<std::vector<float>> pre_, post_;
    std::vector<float> probs_, losses_, dbuf_a_, dbuf_b_;
};

} // namespace dptrain
