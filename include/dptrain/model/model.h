// The Model interface and the MLP classifier. Models own no parameters or gradients: callers hand
// in flat buffers (core/flat.h), wherever communication wants them.
// Not for: talking to other ranks or reading data.
#pragma once

#include "dptrain/core/flat.h"
#include "dptrain/model/op_times.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dptrain {

enum class Activation { relu, gelu };

// How matmuls compute (--precision). bf16: operands rounded to bf16, fp32 sums, attention's products
// on TF32; the CPU emulates the rounding (docs/GPU.md, "Mixed precision").
enum class Precision { fp32, bf16 };

// The CPU models' bf16 operands: weights rounded once per forward, scratch for one matmul's
// activation and output gradient, allocated once by reserve().
class Bf16Operands {
  public:
    void reserve(size_t params, size_t activation, size_t gradient);
    static size_t bytes(size_t params, size_t activation, size_t gradient);
    // A model's set_precision: fp32 releases them, bf16 reserves; bytes_for is 0 in fp32.
    void set(Precision p, size_t params, size_t activation, size_t gradient);
    static size_t bytes_for(Precision p, size_t params, size_t activation, size_t gradient);
    size_t bytes() const { return (w_.size() + a_.size() + g_.size()) * sizeof(float); }
    bool on() const { return !w_.empty(); }
    void round_weights(const float* params);     // biases too: unused, but cheap
    const float* weights() const { return w_.data(); }
    const float* act(const float* x, long n);    // x rounded, in the activation scratch
    const float* grad(const float* d, long n);   // d rounded, in the gradient scratch

  private:
    std::vector<float> w_, a_, g_;
};

// A language model's matmul (OpKind::matmul in *ops): out (BT, OC) = inp (BT, C) @ params[w] (OC, C)^T
// + bias; with bf.on(), on its bf16 operands (weights rounded by the forward: round_weights), and
// out16: the output rounded as bf16 stores it. Attention rounds to TF32 itself.
void lm_matmul_forward(Bf16Operands& bf, OpTimes* ops, const float* params, float* out, const float* inp, size_t w,
                       const float* bias, int BT, int C, int OC, bool out16 = false);
// A language model's loss over the logits of BT positions (V each) against targets: the summed
// loss, correct argmax predictions added to *correct (null: none, no argmax kept). losses, stats,
// argmax: scratch of BT, 2 BT and BT values. Timed as OpKind::crossentropy.
double lm_loss(OpTimes* ops, float* losses, float* stats, int* argmax, const float* logits, const int* targets,
               long BT, int V, long* correct);
// Its backward (dbias null: none); dinp16: in bf16 dinp rounded too, for a norm's or flash attention's backward.
void lm_matmul_backward(Bf16Operands& bf, OpTimes* ops, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* params, size_t w, int BT, int C, int OC, bool dinp16 = false);

struct ModelBatch {
    int B = 0;                    // samples (rows or windows)
    const float* x = nullptr;     // (B, in) features (MLP)
    const int* labels = nullptr;  // (B) class labels (MLP)
    const int* tokens = nullptr;  // (B, stride) token windows: inputs [0, T), targets [1, T] (GPT)
    int stride = 0;
};

// A language model's windows (in.B rows of T + 1 tokens, in.stride apart) against its vocabulary of
// V (UserError naming the first token outside it, row by row), and each row's last T tokens packed
// into targets (B*T).
void lm_targets(const ModelBatch& in, int T, int V, int* targets);

// p[k] = sigma * the k-th normal of Rng(seed), for k < n: the values of drawing them in order (each
// is a pure function of k), in pieces over the OpenMP threads. False when stop() said to stop
// between pieces (the rest left as it was).
bool fill_normal(float* p, size_t n, float sigma, uint64_t seed, bool (*stop)() = nullptr);

class Model {
  public:
    virtual ~Model() = default;
    virtual const ParamLayout& layout() const = 0;
    size_t num_params() const { return layout().total; }
    // Kind and every shape-determining setting: checkpoints must match it.
    virtual std::string signature() const = 0;
    // Loss terms per sample: 1 for a classifier, T for a language model window.
    virtual int terms_per_sample() const = 0;
    // Training FLOPs (forward + backward) per sample, for MFU.
    virtual double flops_per_sample() const = 0;
    // stop (optional) is asked between pieces of the work; true leaves the rest undone (a stop
    // signal in set-up, which then ends the run).
    virtual void init(float* params, uint64_t seed, bool (*stop)() = nullptr) const = 0;
    // Summed loss; adds correct argmax predictions to *correct.
    virtual double forward(const float* params, const ModelBatch& in, long* correct) = 0;
    // grads += d(scale * summed loss) / d params, for the last forward; hook hears of finished layers.
    virtual void backward(float* grads, const float* params, const ModelBatch& in, float scale, GradHook* hook) = 0;
    // Matmul precision from now on; allocates what it needs. A backward must follow a forward made after it.
    virtual void set_precision(Precision p) = 0;
    // The next forward's batch, known early: a GPU model copies it under the current step's work.
    // Its host memory must stay unchanged until that forward; a forward in between is still correct.
    virtual void stage(const ModelBatch& next) { (void)next; }
    // Waits for a staged copy and forgets it: before the staged batch's host memory is freed.
    virtual void unstage() {}
    // Forwards so far whose batch was staged; -1 for models that never stage.
    virtual long staged_batches() const { return -1; }
    // From the next forward on, each op's time goes into *t by kind (--profile-ops); null stops,
    // once the timed work is counted.
    virtual void set_op_times(OpTimes* t) = 0;
    // Returns once the calls so far are done (a GPU model waits for its stream). Without it a GPU
    // micro-batch's backward is timed as the next one's forward.
    virtual void finish() {}
    // Bytes of activations kept for backward (0: not reported).
    virtual size_t activation_bytes() const { return 0; }
    // Bytes of the bf16 operands (rounded weights and matmul scratch); 0 in fp32.
    virtual size_t operand_bytes() const { return 0; }
};

// MLP classifier: in -> hidden... -> classes, softmax cross-entropy; activations for max_batch rows.
class Mlp : public Model {
  public:
    Mlp(int in, std::vector<int> hidden, int classes, Activation act, int max_batch);

    const ParamLayout& layout() const override { return layout_; }
    int in_dim() const { return dims_.front(); }
    const std::vector<int>& dims() const { return dims_; }  // in, hidden..., classes
    Activation activation() const { return act_; }
    int max_batch() const { return max_batch_; }
    int classes() const { return dims_.back(); }
    // "mlp in=64 hidden=256,256 classes=10 act=relu": checkpoints must match it.
    std::string signature() const override;
    int terms_per_sample() const override { return 1; }
    // 2 per multiply-add; backward = 2x forward.
    double flops_per_sample() const override;

    // He-normal weights (output layer sqrt(1/fan_in)); a counter-based stream per tensor.
    void init(float* params, uint64_t seed, bool (*stop)() = nullptr) const override;

    // x (B, in), y (B); the summed loss, correct argmax predictions added to *correct (if set).
    double forward(const float* params, const float* x, const int* y, int B, long* correct);
    // grads += d(scale * summed loss) / d params of the last forward; hook hears of each layer.
    void backward(float* grads, const float* params, const float* x, const int* y, int B, float scale,
                  GradHook* hook = nullptr);

    double forward(const float* params, const ModelBatch& in, long* correct) override {
        return forward(params, in.x, in.labels, in.B, correct);
    }
    void backward(float* grads, const float* params, const ModelBatch& in, float scale, GradHook* hook) override {
        backward(grads, params, in.x, in.labels, in.B, scale, hook);
    }
    void set_precision(Precision p) override;
    void set_op_times(OpTimes* t) override { ops_ = t; }
    // As allocated for max_batch rows; the static forms without building one (the same sums: tested).
    size_t activation_bytes() const override;
    static size_t activation_bytes(const std::vector<int>& dims, int max_batch);
    size_t operand_bytes() const override { return bf_.bytes(); }
    static size_t operand_bytes(const std::vector<int>& dims, int max_batch, Precision p);
    static size_t count_params(const std::vector<int>& dims);

  private:
    std::vector<int> dims_;  // in, hidden..., classes
    Activation act_;
    int max_batch_;
    ParamLayout layout_;
    // per layer l: (max_batch, dims_[l+1]) before the activation, and after it (hidden layers).
    std::vector<std::vector<float>> pre_, post_;
    std::vector<float> stats_, losses_, dbuf_a_, dbuf_b_;  // stats_: the loss's max and 1 / sum per row
    std::vector<int> argmax_;
    Bf16Operands bf_;  // --precision bf16
    OpTimes* ops_ = nullptr;  // --profile-ops
};

} // namespace dptrain
