// The bf16 operands and the MLP's forward/backward. Layer l maps dims_[l] -> dims_[l+1] with
// weight fc{l}.weight (OC, C) and bias fc{l}.bias (OC).
#include "dptrain/model/model.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/error.h"
#include "dptrain/core/parallel.h"
#include "dptrain/core/rng.h"

#include <algorithm>
#include <cmath>

namespace dptrain {

size_t Bf16Operands::bytes(size_t params, size_t activation, size_t gradient) {
    return (std::max<size_t>(params, 1) + std::max<size_t>(activation, 1) + std::max<size_t>(gradient, 1)) *
           sizeof(float);
}

void Bf16Operands::reserve(size_t params, size_t activation, size_t gradient) {
    w_.assign(std::max<size_t>(params, 1), 0.0f);
    a_.assign(std::max<size_t>(activation, 1), 0.0f);
    g_.assign(std::max<size_t>(gradient, 1), 0.0f);
}

void Bf16Operands::set(Precision p, size_t params, size_t activation, size_t gradient) {
    if (p == Precision::fp32) *this = Bf16Operands();
    else reserve(params, activation, gradient);
}

size_t Bf16Operands::bytes_for(Precision p, size_t params, size_t activation, size_t gradient) {
    return p == Precision::fp32 ? 0 : bytes(params, activation, gradient);
}

double lm_loss(OpTimes* ops, float* losses, float* stats, int* argmax, const float* logits, const int* targets,
               long BT, int V, long* correct) {
    timed(ops, OpKind::crossentropy, [&] {
        cpu::softmax_crossentropy_forward(losses, stats, correct ? argmax : nullptr, logits, targets, (int)BT, V);
    });
    double sum = 0.0;
    for (long i = 0; i < BT; ++i) sum += losses[i];
    if (correct)
        for (long i = 0; i < BT; ++i) *correct += argmax[i] == targets[i];
    return sum;
}

void Bf16Operands::round_weights(const float* params) { cpu::round_bf16(w_.data(), params, (long)w_.size()); }

const float* Bf16Operands::act(const float* x, long n) {
    if ((size_t)n > a_.size()) throw std::logic_error("Bf16Operands::act: scratch too small");
    cpu::round_bf16(a_.data(), x, n);
    return a_.data();
}

const float* Bf16Operands::grad(const float* d, long n) {
    if ((size_t)n > g_.size()) throw std::logic_error("Bf16Operands::grad: scratch too small");
    cpu::round_bf16(g_.data(), d, n);
    return g_.data();
}

void lm_targets(const ModelBatch& in, int T, int V, int* targets) {
    for (int b = 0; b < in.B; ++b)
        for (int t = 0; t <= T; ++t) {
            const int tok = in.tokens[(long)b * in.stride + t];
            if (tok < 0 || tok >= V) throw UserError(strfmt("token %d outside the model's vocabulary of %d", tok, V));
            if (t > 0) targets[(long)b * T + t - 1] = tok;
        }
}

void lm_matmul_forward(Bf16Operands& bf, OpTimes* ops, const float* params, float* out, const float* inp, size_t w,
                       const float* bias, int BT, int C, int OC, bool out16) {
    timed(ops, OpKind::matmul, [&] {
        if (!bf.on()) return cpu::matmul_forward(out, inp, params + w, bias, BT, C, OC);
        cpu::matmul_forward(out, bf.act(inp, (long)BT * C), bf.weights() + w, bias, BT, C, OC);
        if (out16) cpu::round_bf16(out, out, (long)BT * OC);
    });
}

void lm_matmul_backward(Bf16Operands& bf, OpTimes* ops, float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* params, size_t w, int BT, int C, int OC, bool dinp16) {
    timed(ops, OpKind::matmul, [&] {
        if (bf.on()) {  // the weights were rounded by the forward of these parameters
            cpu::matmul_backward(dinp, dweight, dbias, bf.grad(dout, (long)BT * OC), bf.act(inp, (long)BT * C),
                                 bf.weights() + w, BT, C, OC);
            if (dinp16) cpu::round_bf16(dinp, dinp, (long)BT * C);
        } else cpu::matmul_backward(dinp, dweight, dbias, dout, inp, params + w, BT, C, OC);
    });
}

Mlp::Mlp(int in, std::vector<int> hidden, int classes, Activation act, int max_batch)
    : act_(act), max_batch_(max_batch) {
    dims_.push_back(in);
    dims_.insert(dims_.end(), hidden.begin(), hidden.end());
    dims_.push_back(classes);
    int L = (int)dims_.size() - 1;
    int widest = *std::max_element(dims_.begin(), dims_.end());
    for (int l = 0; l < L; ++l) {
        layout_.add(strfmt("fc%d.weight", l), {dims_[l + 1], dims_[l]}, true);
        layout_.add(strfmt("fc%d.bias", l), {dims_[l + 1]}, false);
        pre_.emplace_back((size_t)max_batch * dims_[l + 1]);
        post_.emplace_back(l + 1 < L ? (size_t)max_batch * dims_[l + 1] : 0);
    }
    stats_.resize(2 * (size_t)max_batch);
    argmax_.resize(max_batch);
    losses_.resize(max_batch);
    dbuf_a_.resize((size_t)max_batch * widest);
    dbuf_b_.resize((size_t)max_batch * widest);
}

std::string Mlp::signature() const {
    std::string h;
    for (size_t i = 1; i + 1 < dims_.size(); ++i) h += (h.empty() ? "" : ",") + std::to_string(dims_[i]);
    return strfmt("mlp in=%d hidden=%s classes=%d act=%s", dims_.front(), h.c_str(), dims_.back(),
                  act_ == Activation::relu ? "relu" : "gelu");
}

// 2 d_l d_{l+1} per layer each for forward, weight and input gradients, but no data gradient.
double Mlp::flops_per_sample() const {
    double f = 0;
    for (size_t l = 0; l + 1 < dims_.size(); ++l) f += 2.0 * dims_[l] * dims_[l + 1];
    return 3.0 * f - 2.0 * dims_[0] * dims_[1];
}

void Mlp::init(float* params, uint64_t seed, bool (*stop)()) const {
    int L = (int)dims_.size() - 1;
    for (int l = 0; l < L; ++l) {
        const ParamView& w = layout_.views[2 * l];
        const ParamView& b = layout_.views[2 * l + 1];
        float sigma = std::sqrt((l + 1 < L ? 2.0f : 1.0f) / dims_[l]);
        if (!fill_normal(params + w.offset, w.size, sigma, stream_seed(seed, 1000 + l), stop)) return;
        std::fill(params + b.offset, params + b.offset + b.size, 0.0f);
    }
}

bool fill_normal(float* p, size_t n, float sigma, uint64_t seed, bool (*stop)()) {
    constexpr size_t kPiece = (size_t)1 << 22;  // about 0.1 s a thread: a stop waits no longer
    for (size_t begin = 0; begin < n; begin += kPiece) {
        if (stop && stop()) return false;
        const long count = (long)std::min(kPiece, n - begin);
        // Value k draws states seed + 2k and seed + 2k + 1 (Rng::normal takes two).
        parallel_for(count, 64, [&](long b, long e) {
            Rng rng(seed + 2 * (begin + (size_t)b));
            for (long k = b; k < e; ++k) p[begin + (size_t)k] = sigma * rng.normal();
        });
    }
    return true;
}

void Mlp::set_precision(Precision p) {
    if (p == Precision::fp32) {
        bf_ = Bf16Operands();
        return;
    }
    size_t widest = (size_t)*std::max_element(dims_.begin(), dims_.end());
    bf_.reserve(layout_.total, (size_t)max_batch_ * widest, (size_t)max_batch_ * widest);
}

size_t Mlp::operand_bytes(const std::vector<int>& dims, int max_batch, Precision p) {
    if (p == Precision::fp32) return 0;
    const size_t rows = (size_t)max_batch * (size_t)*std::max_element(dims.begin(), dims.end());
    return Bf16Operands::bytes(count_params(dims), rows, rows);
}

size_t Mlp::count_params(const std::vector<int>& dims) {
    size_t n = 0;
    for (size_t l = 0; l + 1 < dims.size(); ++l) n += (size_t)dims[l] * dims[l + 1] + dims[l + 1];
    return n;
}

size_t Mlp::activation_bytes() const {
    size_t floats = stats_.size() + losses_.size() + dbuf_a_.size() + dbuf_b_.size();
    for (size_t l = 0; l < pre_.size(); ++l) floats += pre_[l].size() + post_[l].size();
    return floats * sizeof(float) + argmax_.size() * sizeof(int);
}

size_t Mlp::activation_bytes(const std::vector<int>& dims, int max_batch) {
    const size_t B = (size_t)max_batch, L = dims.size() - 1;
    const size_t widest = (size_t)*std::max_element(dims.begin(), dims.end());
    // per layer: before and after the activation; the loss's stats, losses, two scratch, argmax.
    size_t floats = 2 * B + B + 2 * B * widest;
    for (size_t l = 0; l < L; ++l) floats += B * dims[l + 1] + (l + 1 < L ? B * dims[l + 1] : 0);
    return floats * sizeof(float) + B * sizeof(int);
}

double Mlp::forward(const float* params, const float* x, const int* y, int B, long* correct) {
    if (B > max_batch_) throw std::invalid_argument("Mlp::forward: batch larger than max_batch");
    int L = (int)dims_.size() - 1;
    const float* inp = x;
    if (bf_.on()) timed(ops_, OpKind::matmul, [&] { bf_.round_weights(params); });
    for (int l = 0; l < L; ++l) {
        const ParamView& w = layout_.views[2 * l];
        const ParamView& b = layout_.views[2 * l + 1];
        timed(ops_, OpKind::matmul, [&] {
            if (bf_.on())
                cpu::matmul_forward(pre_[l].data(), bf_.act(inp, (long)B * dims_[l]), bf_.weights() + w.offset,
                                    params + b.offset, B, dims_[l], dims_[l + 1]);
            else
                cpu::matmul_forward(pre_[l].data(), inp, params + w.offset, params + b.offset, B, dims_[l],
                                    dims_[l + 1]);
        });
        if (l + 1 < L) {
            long n = (long)B * dims_[l + 1];
            timed(ops_, OpKind::activation, [&] {
                if (act_ == Activation::relu) cpu::relu_forward(post_[l].data(), pre_[l].data(), n);
                else cpu::gelu_forward(post_[l].data(), pre_[l].data(), n);
            });
            inp = post_[l].data();
        }
    }
    int V = dims_.back();
    const float* logits = pre_[L - 1].data();
    timed(ops_, OpKind::crossentropy,
          [&] {
              cpu::softmax_crossentropy_forward(losses_.data(), stats_.data(), correct ? argmax_.data() : nullptr,
                                                logits, y, B, V);
          });
    double sum = 0.0;
    for (int b = 0; b < B; ++b) sum += losses_[b];
    if (correct)
        for (int b = 0; b < B; ++b) *correct += argmax_[b] == y[b];
    return sum;
}

void Mlp::backward(float* grads, const float* params, const float* x, const int* y, int B, float scale,
                   GradHook* hook) {
    int L = (int)dims_.size() - 1;
    float* dout = dbuf_a_.data();  // gradient w.r.t. the current layer's output
    float* dnext = dbuf_b_.data();
    timed(ops_, OpKind::crossentropy,
          [&] { cpu::softmax_crossentropy_backward(dout, pre_[L - 1].data(), stats_.data(), y, scale, B, dims_.back()); });
    for (int l = L - 1; l >= 0; --l) {
        const ParamView& w = layout_.views[2 * l];
        const ParamView& b = layout_.views[2 * l + 1];
        const float* inp = l == 0 ? x : post_[l - 1].data();
        float* dinp = l == 0 ? nullptr : dnext;
        timed(ops_, OpKind::matmul, [&] {
            if (bf_.on())  // the weights rounded by the forward of these parameters
                cpu::matmul_backward(dinp, grads + w.offset, grads + b.offset,
                                     bf_.grad(dout, (long)B * dims_[l + 1]), bf_.act(inp, (long)B * dims_[l]),
                                     bf_.weights() + w.offset, B, dims_[l], dims_[l + 1]);
            else
                cpu::matmul_backward(dinp, grads + w.offset, grads + b.offset, dout, inp, params + w.offset, B,
                                     dims_[l], dims_[l + 1]);
        });
        if (hook) hook->grads_ready_from(w.offset);  // layer l's weight and bias are final
        if (l > 0) {
            long n = (long)B * dims_[l];
            // d(pre) = f'(pre) * d(post), in place is fine: each element reads then writes itself.
            timed(ops_, OpKind::activation, [&] {
                if (act_ == Activation::relu) cpu::relu_backward(dnext, pre_[l - 1].data(), dnext, n);
                else cpu::gelu_backward(dnext, pre_[l - 1].data(), dnext, n);
            });
            std::swap(dout, dnext);
        }
    }
}

} // namespace dptrain
