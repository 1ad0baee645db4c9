// The Model interface and the MLP classifier's forward/backward over the backend ops (the flat
// buffer's layout is core/flat.h). The model does not own parameters or gradients: callers hand in the flat
// buffers, so they can live wherever communication wants them (host, shared window, device).
// Not for: talking to other ranks or reading data.
#pragma once

#include "dptrain/core/flat.h"
#include "dptrain/model/op_times.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dptrain {

enum class Activation { relu, gelu };

// How matmuls compute (--precision). bf16: mixed precision as GPUs train, every matmul of the
// model (forward and backward) takes its operands rounded to bf16 (weights, activations, output
// gradients) and sums in fp32 into fp32 results (the GPT's fc output, GELU's input, and its logits
// kept rounded to bf16), and attention's own products take TF32 operands (10 mantissa bits) with fp32
// sums; parameters, gradients, optimizer state and every other op stay fp32. On the CPU the
// rounding is emulated (cpu::round_bf16 / round_tf32, then sgemm): the same numbers at fp32 speed
// (bf16 bit for bit; TF32 to within the GPU's own conversion).
enum class Precision { fp32, bf16 };

// The CPU models' bf16 operands: the weights rounded once per forward, and scratch for one
// matmul's rounded activation and output gradient. Allocated by reserve(), once.
class Bf16Operands {
  public:
    void reserve(size_t params, size_t activation, size_t gradient);
    // What reserve(params, activation, gradient) allocates, in bytes.
    static size_t bytes(size_t params, size_t activation, size_t gradient);
    size_t bytes() const { return (w_.size() + a_.size() + g_.size()) * sizeof(float); }
    bool on() const { return !w_.empty(); }
    void round_weights(const float* params);     // every parameter (biases unused, but cheap)
    const float* weights() const { return w_.data(); }
    const float* act(const float* x, long n);    // x rounded, in the activation scratch
    const float* grad(const float* d, long n);   // d rounded, in the gradient scratch

  private:
    std::vector<float> w_, a_, g_;
};

// What a model reads from a batch: MLP features and labels, or GPT token windows.
struct ModelBatch {
    int B = 0;                    // samples (rows or windows)
    const float* x = nullptr;     // (B, in) features (MLP)
    const int* labels = nullptr;  // (B) class labels (MLP)
    const int* tokens = nullptr;  // (B, stride) token windows: inputs [0, T), targets [1, T] (GPT)
    int stride = 0;
};

// The interface the trainer uses; Mlp and Gpt implement it.
class Model {
  public:
    virtual ~Model() = default;
    virtual const ParamLayout& layout() const = 0;
    size_t num_params() const { return layout().total; }
    // Checkpoints must match it: kind and every shape-determining setting.
    virtual std::string signature() const = 0;
    // Loss terms per sample: 1 for a classifier, T for a language model window.
    virtual int terms_per_sample() const = 0;
    // Training FLOPs (forward + backward) per sample, for throughput and MFU.
    virtual double flops_per_sample() const = 0;
    virtual void init(float* params, uint64_t seed) const = 0;
    // Summed loss over the batch's loss terms; adds correct argmax predictions to *correct.
    virtual double forward(const float* params, const ModelBatch& in, long* correct) = 0;
    // grads += d(scale * summed loss) / d params, for the last forward; hook hears of finished layers.
    virtual void backward(float* grads, const float* params, const ModelBatch& in, float scale, GradHook* hook) = 0;
    // Matmul precision from now on (fp32 at construction unless a model's constructor takes it);
    // allocates what the precision needs (CudaGpt reallocates activations, and nothing when the
    // precision is unchanged). A backward must follow a forward made after it.
    virtual void set_precision(Precision p) = 0;
    // The batch the next forward will be given, known early: a GPU model starts copying it to the
    // device on a stream of its own, under the current step's work; that forward then waits for
    // the copy instead of making it. in's host memory must stay unchanged until that forward.
    // Any other forward in between (evaluation) is still correct. The CPU models need nothing.
    virtual void stage(const ModelBatch& next) { (void)next; }
    // Waits for a staged copy and forgets it: before the staged batch's host memory is freed.
    virtual void unstage() {}
    // Forwards so far whose batch came through stage(); -1 for models that never stage.
    virtual long staged_batches() const { return -1; }
    // From the next forward on, each op's time goes into *t by kind (--profile-ops, op_times.h);
    // null stops it once the timed work is done and counted (a GPU model waits for its stream).
    virtual void set_op_times(OpTimes* t) = 0;
    // Returns once the work of the calls so far is done (a GPU model waits for its stream; the CPU
    // models are done when a call returns). The trainer's phase times are the host's: a micro-batch's
    // backward that was still running on the GPU was timed as the next micro-batch's forward.
    virtual void finish() {}
    // Bytes of activations kept for backward, where the model knows them (0: not reported).
    virtual size_t activation_bytes() const { return 0; }
    // Bytes of the bf16 operands (--precision bf16: the rounded weights and matmul scratch); 0 in fp32.
    virtual size_t operand_bytes() const { return 0; }
};

// MLP classifier: in -> hidden[0] -> ... -> hidden[n-1] -> classes, activation between layers,
// softmax cross-entropy at the end. Activations are allocated once for max_batch rows.
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
    // FLOPs of forward + backward for one sample (2 per multiply-add; backward = 2x forward).
    double flops_per_sample() const override;

    // He-normal weights (std sqrt(2/fan_in); the output layer sqrt(1/fan_in)), zero biases.
    // Each tensor has its own counter-based stream, so the result depends only on seed.
    void init(float* params, uint64_t seed) const override;

    // Forward over B rows of x (B, in) with labels y (B). Returns the summed loss of the rows and
    // adds the number of correct argmax predictions to *correct (when not null).
    double forward(const float* params, const float* x, const int* y, int B, long* correct);
    // Backward of the last forward: grads += d(scale * summed loss) / d params. hook (optional)
    // hears of each layer's gradients as soon as they are written.
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
    // Bytes of activations and backward's scratch, as allocated for max_batch rows; of dims' (in,
    // hidden..., classes), without building one (the same sum: tested). The bf16 operands likewise.
    size_t activation_bytes() const override;
    static size_t activation_bytes(const std::vector<int>& dims, int max_batch);
    size_t operand_bytes() const override { return bf_.bytes(); }
    static size_t operand_bytes(const std::vector<int>& dims, int max_batch, Precision p);
    // Parameters of an MLP of dims, without building one.
    static size_t count_params(const std::vector<int>& dims);

  private:
    std::vector<int> dims_;  // in, hidden..., classes
    Activation act_;
    int max_batch_;
    ParamLayout layout_;
    // per layer l: pre_[l] = layer output before activation (max_batch, dims_[l+1]);
    // post_[l] = after activation (hidden layers only).
    std::vector<std::vector<float>> pre_, post_;
    std::vector<float> stats_, losses_, dbuf_a_, dbuf_b_;  // stats_: the loss's max and 1 / sum per row
    std::vector<int> argmax_;
    Bf16Operands bf_;  // --precision bf16
    OpTimes* ops_ = nullptr;  // --profile-ops
};

} // namespace dptrain
