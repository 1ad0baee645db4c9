// AdamW, SGD with momentum, LR schedule and clipping on the host, in OpenMP loops. Not for: the
// GPU's updates (backend/cuda/optim.cu).
#include "dptrain/model/optim.h"

#include "dptrain/core/parallel.h"

#include <algorithm>
#include <cmath>

namespace dptrain {

double LrSchedule::at(long step) const {
    if (warmup > 0 && step < warmup) return lr * (double)(step + 1) / (double)warmup;
    long span = total - warmup;
    if (span <= 0) return lr;
    double progress = (double)(step - warmup) / (double)span;
    if (progress > 1.0) progress = 1.0;
    double min_lr = lr * min_ratio;
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

// Over [begin, end), for parallel_for.
static void adamw_range(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                        long begin, long end, float lr, float beta1, float beta2, float eps, float decay,
                        float inv_c1, float inv_c2) {
#pragma omp simd
    for (long i = begin; i < end; ++i) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = decay * p[i] - lr * (mi * inv_c1) / (std::sqrt(vi * inv_c2) + eps);
    }
}

static void sgd_momentum_range(float* __restrict p, const float* __restrict g, float* __restrict buf, long begin,
                               long end, float lr, float momentum, float wd) {
#pragma omp simd
    for (long i = begin; i < end; ++i) {
        float b = momentum * buf[i] + g[i] + wd * p[i];
        buf[i] = b;
        p[i] -= lr * b;
    }
}

static void scale_range(float* g, float s, long begin, long end) {
#pragma omp simd
    for (long i = begin; i < end; ++i) g[i] *= s;
}

// Blocks [first, last) of sum_squares: each block of `per` values (a multiple of kLanes) summed
// in kLanes interleaved lanes.
static constexpr size_t kLanes = 8;
static void block_squares(double* part, const float* g, size_t n, size_t per, long first, long last) {
    for (long b = first; b < last; ++b) {
        double lane[kLanes] = {0};
        size_t begin = std::min(n, b * per), end = std::min(n, (b + 1) * per), i = begin;
        for (; i + kLanes <= end; i += kLanes)
            for (size_t k = 0; k < kLanes; ++k) lane[k] += (double)g[i + k] * g[i + k];
        for (; i < end; ++i) lane[0] += (double)g[i] * g[i];
        double s = 0.0;
        for (size_t k = 0; k < kLanes; ++k) s += lane[k];
        part[b] = s;
    }
}

void adamw_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float wd, long t) {
    // Bias corrections folded into two scalars; restrict in adamw_range lets its loop vectorize.
    const float inv_c1 = 1.0f / (1.0f - std::pow(beta1, (float)t));
    const float inv_c2 = 1.0f / (1.0f - std::pow(beta2, (float)t));
    const float decay = 1.0f - lr * wd;
    parallel_for((long)n, 8, [=](long b, long e) {
        adamw_range(p, g, m, v, b, e, lr, beta1, beta2, eps, decay, inv_c1, inv_c2);
    });
}

void sgd_momentum_update(float* p, const float* g, float* buf, size_t n, float lr, float momentum, float wd) {
    parallel_for((long)n, 3, [=](long b, long e) { sgd_momentum_range(p, g, buf, b, e, lr, momentum, wd); });
}

double sum_squares(const float* g, size_t n) {
    // Blocks fixed by n alone, not the thread count: every rank clips identically.
    constexpr size_t kBlocks = 64;
    double part[kBlocks];
    size_t per = (n + kBlocks - 1) / kBlocks;
    per = (per + kLanes - 1) / kLanes * kLanes;
    parallel_for((long)kBlocks, 2 * (long)per,
                 [&](long first, long last) { block_squares(part, g, n, per, first, last); });
    double s = 0.0;
    for (size_t b = 0; b < kBlocks; ++b) s += part[b];
    return s;
}

double global_norm(const float* g, size_t n) { return std::sqrt(sum_squares(g, n)); }

void clip_to_norm(float* g, size_t n, double norm, double max_norm) {
    if (!(max_norm > 0 && norm > max_norm)) return;
    const float s = (float)(max_norm / (norm + 1e-6));
    parallel_for((long)n, 1, [=](long b, long e) { scale_range(g, s, b, e); });
}

double clip_grad_norm(float* g, size_t n, double max_norm) {
    const double norm = global_norm(g, n);
    clip_to_norm(g, n, norm, max_norm);
    return norm;
}

Optimizer::Optimizer(Kind kind, const ParamLayout& layout, double beta1, double beta2, double eps,
                     double momentum, double weight_decay)
    : Optimizer(OptimizerSettings{kind, beta1, beta2, eps, momentum, weight_decay}, layout) {}

Optimizer::Optimizer(const OptimizerSettings& s, const ParamLayout& layout, Span shard)
    : kind_(s.kind), layout_(layout), shard_(shard), beta1_(s.beta1), beta2_(s.beta2), eps_(s.eps),
      momentum_(s.momentum), wd_(s.weight_decay), m_(shard.size(), 0.0f),
      v_(s.kind == Kind::adamw ? shard.size() : 0, 0.0f) {}

void Optimizer::step(float* params, const float* grads, double lr, long t) {
    // A shard may begin or end inside a view; the weight decay stays the view's.
    for (const ParamView& pv : layout_.views) {
        const size_t begin = std::max(pv.offset, shard_.begin), end = std::min(pv.offset + pv.size, shard_.end);
        if (begin >= end) continue;
        const float wd = pv.decay ? (float)wd_ : 0.0f;
        const size_t o = begin - shard_.begin, n = end - begin;
        if (kind_ == Kind::adamw)
            adamw_update(params + o, grads + o, m_.data() + o, v_.data() + o, n, (float)lr, (float)beta1_,
                         (float)beta2_, (float)eps_, wd, t);
        else
            sgd_momentum_update(params + o, grads + o, m_.data() + o, n, (float)lr, (float)momentum_, wd);
    }
}

} // namespace dptrain
