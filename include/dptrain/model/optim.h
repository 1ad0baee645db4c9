// Optimizers (SGD with momentum, AdamW), the learning-rate schedule and gradient clipping, over
// ranges of the flat parameter buffer. Not for: deciding when to step, or averaging gradients.
#pragma once

#include "dptrain/model/model.h"

#include <string>
#include <vector>

namespace dptrain {

// Linear warmup from lr/warmup to lr over `warmup` steps, then cosine decay to lr * min_ratio at
// step `total`. step counts from 0.
struct LrSchedule {
    double lr = 1e-3, min_ratio = 0.1;
    long warmup = 0, total = 1;
    double at(long step) const;
};

// p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p), with bias-corrected moments; t counts from 1.
void adamw_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float wd, long t);
// buf = momentum * buf + g + wd * p;  p -= lr * buf.
void sgd_momentum_update(float* p, const float* g, float* buf, size_t n, float lr, float momentum, float wd);

// sum g^2, accumulated in double in a fixed order (depending on n alone, not on the threads).
double sum_squares(const float* g, size_t n);
// sqrt(sum_squares(g, n)).
double global_norm(const float* g, size_t n);
// Scales g by max_norm / norm when norm exceeds max_norm (no-op when max_norm <= 0): norm is the
// norm of the whole gradient, of which g may be one rank's shard.
void clip_to_norm(float* g, size_t n, double norm, double max_norm);
// Scales g so its norm is at most max_norm (no-op when max_norm <= 0); returns the norm before.
double clip_grad_norm(float* g, size_t n, double max_norm);

enum class OptimizerKind { adamw, sgd };

// What shapes an optimizer's update, wherever it runs (Optimizer on the host, the GPU's update
// kernels through DeviceStep).
struct OptimizerSettings {
    OptimizerKind kind = OptimizerKind::adamw;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW
    double momentum = 0.9;                          // SGD
    double weight_decay = 0.0;                      // decoupled for AdamW, L2 through the momentum for SGD
};

// The optimizer state of one range of the flat buffer: all of it (every rank keeps the whole
// state), or this rank's shard of it (--shard-optimizer, ZeRO stage 1: each rank keeps and updates
// 1/W of the state; the gradient path sums gradients into the shard and gathers the parameters).
class Optimizer {
  public:
    using Kind = OptimizerKind;
    Optimizer(Kind kind, const ParamLayout& layout, double beta1, double beta2, double eps, double momentum,
              double weight_decay);
    Optimizer(const OptimizerSettings& s, const ParamLayout& layout) : Optimizer(s, layout, Span{0, layout.total}) {}
    Optimizer(const OptimizerSettings& s, const ParamLayout& layout, Span shard);
    // One step over the shard at learning rate lr; t = number of steps taken so far + 1. params and
    // grads point at the shard's first float (a whole buffer's start plus shard().begin).
    void step(float* params, const float* grads, double lr, long t);

    Kind kind() const { return kind_; }
    // The range whose state this optimizer holds and whose parameters step() updates.
    Span shard() const { return shard_; }
    // Floats of each moment over the whole buffer (what a checkpoint holds): the layout's total,
    // and 0 for SGD's v.
    size_t full_m() const { return layout_.total; }
    size_t full_v() const { return kind_ == Kind::adamw ? layout_.total : 0; }
    // The state of the shard, for checkpoints: AdamW uses m and v; SGD uses m (momentum buffer)
    // and leaves v empty.
    std::vector<float>& m() { return m_; }
    std::vector<float>& v() { return v_; }

  private:
    Kind kind_;
    const ParamLayout& layout_;
    Span shard_;
    double beta1_, beta2_, eps_, momentum_, wd_;
    std::vector<float> m_, v_;
};

} // namespace dptrain
