// Optimizers (SGD with momentum, AdamW), the learning-rate schedule and gradient clipping, over
// ranges of the flat parameter buffer. Not for: deciding when to step, or averaging gradients.
#pragma once

#include "dptrain/model/model.h"

#include <string>
#include <vector>

namespace dptrain {

// Linear warmup to lr over `warmup` steps, cosine decay to lr * min_ratio at `total`; step from 0.
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

// sum g^2 in double, in an order fixed by n alone (not the threads): every rank clips alike.
double sum_squares(const float* g, size_t n);
double global_norm(const float* g, size_t n);
// g *= max_norm / norm when norm > max_norm > 0; norm is the whole gradient's (g may be a shard).
void clip_to_norm(float* g, size_t n, double norm, double max_norm);
// Scales g to a norm of at most max_norm (if > 0); returns the norm before.
double clip_grad_norm(float* g, size_t n, double max_norm);

enum class OptimizerKind { adamw, sgd };

// What shapes an update, on the host (Optimizer) or the GPU (DeviceStep).
struct OptimizerSettings {
    OptimizerKind kind = OptimizerKind::adamw;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW
    double momentum = 0.9;                          // SGD
    double weight_decay = 0.0;                      // decoupled for AdamW, L2 through the momentum for SGD
};

// The optimizer state of the whole flat buffer, or of this rank's shard (--shard-optimizer, ZeRO-1).
class Optimizer {
  public:
    using Kind = OptimizerKind;
    Optimizer(Kind kind, const ParamLayout& layout, double beta1, double beta2, double eps, double momentum,
              double weight_decay);
    Optimizer(const OptimizerSettings& s, const ParamLayout& layout) : Optimizer(s, layout, Span{0, layout.total}) {}
    Optimizer(const OptimizerSettings& s, const ParamLayout& layout, Span shard);
    // One step over the shard; t = steps so far + 1. params and grads point at the shard's start.
    void step(float* params, const float* grads, double lr, long t);

    Kind kind() const { return kind_; }
    Span shard() const { return shard_; }
    // Floats of each moment over the whole buffer (a checkpoint's); 0 for SGD's v.
    size_t full_m() const { return layout_.total; }
    size_t full_v() const { return kind_ == Kind::adamw ? layout_.total : 0; }
    // The shard's state: AdamW's m and v, or SGD's momentum in m (v empty).
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
