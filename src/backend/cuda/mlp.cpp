// CudaMlp: Mlp's forward and backward (src/model/model.cpp) with the ops' CUDA twins, in the same
// order on one stream. Not for: the optimizer step (device_step.cpp).
#include "dptrain/backend/cuda/mlp.h"

#include "check.h"
#include "operands.h"
#include "dptrain/core/error.h"

#include <algorithm>

namespace dptrain {

CudaMlp::CudaMlp(int in, std::vector<int> hidden, int classes, Activation act, int max_batch, int device)
    : host_(in, hidden, classes, act, max_batch), ctx_(std::make_unique<cuda::Context>(device)),
      mm_(std::make_unique<cuda::Matmuls>()), host_grads_(std::make_unique<cuda::HostGradients>()),
      ev_(std::make_unique<cuda::OpEvents>()), dims_(host_.dims()) {
    const size_t P = host_.num_params(), Bm = (size_t)max_batch;
    int L = (int)dims_.size() - 1;
    int widest = *std::max_element(dims_.begin(), dims_.end());
    try {  // no destructor runs for a partial object
        params_ = dev(P);
        grads_ = dev(P);
        for (int l = 0; l < L; ++l) {
            pre_.push_back(dev(Bm * dims_[l + 1]));
            post_.push_back(l + 1 < L ? dev(Bm * dims_[l + 1]) : nullptr);
        }
        ce_stats_ = dev(2 * Bm);
        argmax_ = reinterpret_cast<int*>(dev(Bm));
        losses_ = dev(Bm);
        dbuf_a_ = dev(Bm * widest);
        dbuf_b_ = dev(Bm * widest);
        const size_t widths[2] = {(size_t)in * sizeof(float), sizeof(int)};  // a row of features, a label
        input_ = std::make_unique<cuda::InputSlots>(widths, 2, max_batch);
    } catch (...) {
        for (void* p : allocs_) cudaFree(p);
        allocs_.clear();
        throw;
    }
    ctx_->reduction_scratch(cuda::column_sums_scratch((long)Bm, widest, 1));  // the widest bias gradient
    host_losses_.resize(Bm);
    host_argmax_.resize(Bm);
}

void CudaMlp::set_precision(Precision p) {
    size_t widest = (size_t)*std::max_element(dims_.begin(), dims_.end());
    mm_->set(p, host_.num_params(), (size_t)host_.max_batch() * widest, (size_t)host_.max_batch() * widest);
}

// Features (B, in) and labels (B), packed.
static void batch_parts(const ModelBatch& in, int features, cuda::InputSlots::Part* parts) {
    parts[0].src = in.x;
    parts[0].pitch = parts[0].width = (size_t)features * sizeof(float);
    parts[1].src = in.labels;
    parts[1].pitch = parts[1].width = sizeof(int);
}

void CudaMlp::stage(const ModelBatch& in) {
    if (in.B <= 0 || in.B > host_.max_batch()) return;  // forward refuses it (or has nothing to copy)
    cuda::InputSlots::Part parts[2];
    batch_parts(in, dims_[0], parts);
    input_->stage(parts, in.B);
}

long CudaMlp::staged_batches() const { return input_->staged_hits(); }

void CudaMlp::unstage() { input_->drain(); }

void CudaMlp::set_op_times(OpTimes* t) { ev_->set(t); }
void CudaMlp::finish() { CUDA_CHECK(cudaStreamSynchronize(ctx_->stream())); }

bf16* CudaMlp::rounded_params() { return mm_->weights(); }

void CudaMlp::set_rounded_current(bool current) { mm_->set_current(current); }

CudaMlp::~CudaMlp() {
    input_.reset();
    mm_.reset();
    for (void* p : allocs_) cudaFree(p);
}

float* CudaMlp::dev(size_t n) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)));
    allocs_.push_back(p);
    return static_cast<float*>(p);
}

double CudaMlp::forward(const float* params, const ModelBatch& in, long* correct) {
    const int B = in.B, L = (int)dims_.size() - 1, V = dims_.back();
    if (B > host_.max_batch()) throw std::invalid_argument("CudaMlp::forward: batch larger than max_batch");
    cudaStream_t s = ctx_->stream();
    const auto& views = host_.layout().views;
    if (!resident_) {
        ev_->timed(OpKind::copy, s, [&] {
            CUDA_CHECK(cudaMemcpyAsync(params_, params, host_.num_params() * sizeof(float), cudaMemcpyHostToDevice, s));
        });
        mm_->set_current(false);  // the host's parameters: rounded below, whatever an update wrote
    }
    // Staged during the last step, or copied now.
    cuda::InputSlots::Part parts[2];
    batch_parts(in, dims_[0], parts);
    void* const* batch = nullptr;
    ev_->timed(OpKind::copy, s, [&] { batch = input_->take(parts, B, s); });
    x_ = static_cast<const float*>(batch[0]);
    y_ = static_cast<const int*>(batch[1]);
    if (mm_->is_bf16()) ev_->timed(OpKind::matmul, s, [&] { mm_->begin(params_, s); });  // the weights' rounding
    const float* inp = x_;
    for (int l = 0; l < L; ++l) {
        ev_->timed(OpKind::matmul, s, [&] {
            mm_->forward(pre_[l], inp, params_, views[2 * l].offset, params_ + views[2 * l + 1].offset, B, dims_[l],
                         dims_[l + 1], *ctx_, s);
        });
        if (l + 1 < L) {
            long n = (long)B * dims_[l + 1];
            ev_->timed(OpKind::activation, s, [&] {
                if (host_.activation() == Activation::relu) cuda::relu_forward(post_[l], pre_[l], n, s);
                else cuda::gelu_forward(post_[l], pre_[l], n, s);
            });
            inp = post_[l];
        }
    }
    ev_->timed(OpKind::crossentropy, s, [&] {
        cuda::softmax_crossentropy_forward(losses_, ce_stats_, correct ? argmax_ : nullptr, pre_[L - 1], y_, B, V, s);
    });
    ev_->timed(OpKind::copy, s, [&] {
        CUDA_CHECK(cudaMemcpyAsync(host_losses_.data(), losses_, (size_t)B * sizeof(float), cudaMemcpyDeviceToHost, s));
        if (correct)
            CUDA_CHECK(
                cudaMemcpyAsync(host_argmax_.data(), argmax_, (size_t)B * sizeof(int), cudaMemcpyDeviceToHost, s));
    });
    CUDA_CHECK(cudaStreamSynchronize(s));
    double sum = 0.0;
    for (int b = 0; b < B; ++b) sum += host_losses_[b];
    if (correct)
        for (int b = 0; b < B; ++b) *correct += host_argmax_[b] == in.labels[b];
    return sum;
}

void CudaMlp::backward(float* grads, const float*, const ModelBatch& in, float scale, GradHook* hook) {
    const int B = in.B, L = (int)dims_.size() - 1;
    const size_t P = host_.num_params();
    cudaStream_t s = ctx_->stream();
    const auto& views = host_.layout().views;
    float* dout = dbuf_a_;
    float* dnext = dbuf_b_;
    const bool adds = backward_adds();  // a step's later micro-batch: add
    ev_->timed(OpKind::crossentropy, s, [&] {
        cuda::softmax_crossentropy_backward(dout, pre_[L - 1], ce_stats_, y_, scale, B, dims_.back(), s);
    });
    for (int l = L - 1; l >= 0; --l) {
        const float* inp = l == 0 ? x_ : post_[l - 1];
        float* dinp = l == 0 ? nullptr : dnext;
        ev_->timed(OpKind::matmul, s, [&] {
            // Each layer's weight and bias have no other writer: written, no zeroing pass first.
            mm_->backward(dinp, grads_ + views[2 * l].offset, grads_ + views[2 * l + 1].offset, dout, inp, params_,
                          views[2 * l].offset, B, dims_[l], dims_[l + 1], *ctx_, s, adds);
        });
        // Resident: layer l's gradients are queued; their sum may start.
        if (resident_ && hook) hook->grads_ready_from(views[2 * l].offset);
        if (l > 0) {
            long n = (long)B * dims_[l];
            ev_->timed(OpKind::activation, s, [&] {
                if (host_.activation() == Activation::relu) cuda::relu_backward(dnext, pre_[l - 1], dnext, n, s);
                else cuda::gelu_backward(dnext, pre_[l - 1], dnext, n, s);
            });
            std::swap(dout, dnext);
        }
    }
    if (resident_) return;  // the gradients stay on the device, queued on the stream
    ev_->timed(OpKind::copy, s, [&] { host_grads_->add_to(grads, grads_, P, s); });
    if (hook) hook->grads_ready_from(0);  // every layer's gradients at once
}

} // namespace dptrain
