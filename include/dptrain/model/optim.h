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

// sqrt(sum g^2), accumulated in double in a fixed order.
double global_norm(const float* g, size_t n);
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

class Optimizer {
  public:
    using Kind = OptimizerKind;
    Optimizer(Kind kind, const ParamLayout& layout, double beta1, double beta2, double eps, double momentum,
              double weight_decay);
    Optimizer(const OptimizerSettings& s, const ParamLayout& layout)
        : Optimizer(s.kind, layout, s.beta1, s.beta2, s.eps, s.momentum, s.weight_decay) {}
    // One step over every view at learning rate lr; t = number of steps taken so far + 1.
    void step(float* params, const float* grads, double lr, long t);

    Kind kind() const { return kind_; }
    // State for checkpoints: AdamW uses m and v; SGD uses m (momentum buffer) and leaves v empty.
    std::vector<float>& m() { return m_; }
    std::vector<float>& v() { return v_; }

  private:
    Kind kind_;
    const ParamLayout& layout_;
    double beta1_, beta2_, eps_, momentum_, wd_;
    std::vector<float> m_, v_;
};

} // namespace dptrain
