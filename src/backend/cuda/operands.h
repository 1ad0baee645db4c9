// Private to src/backend/cuda: what CudaMlp and CudaGpt share around their ops (matmuls in either
// precision, gradients' way back, batches' way in, op timing). Not for: attention's own products.
#pragma once

#include "check.h"
#include "dptrain/backend/cuda/ops.h"
#include "dptrain/model/model.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dptrain::cuda {

// A float buffer holding bf16 values (an activation kept rounded, in half the bytes).
inline bf16* as_bf16(float* p) { return reinterpret_cast<bf16*>(p); }
inline const bf16* as_bf16(const float* p) { return reinterpret_cast<const bf16*>(p); }

// n floats cudaMalloc'd and remembered in `into`; out of memory is the user's to fix: UserError with
// `what` (the whole need) and the advice to lower --batch-size.
float* alloc_floats(size_t n, const std::string& what, std::vector<void*>& into);

// --attention flash at this head size fits GPU `device`'s shared memory per block, or UserError.
void require_flash_fits(int C, int NH, int device);

// bf16: weights rounded once per forward, activations and output gradients just before their GEMM
// unless kept rounded (CPU twin: Bf16Operands). docs/GPU.md, "Mixed precision".
class Matmuls {
  public:
    Matmuls() = default;
    ~Matmuls() { release(); }
    Matmuls(const Matmuls&) = delete;
    Matmuls& operator=(const Matmuls&) = delete;

    static size_t bytes(size_t params, size_t activation, size_t gradient) {
        return (params + activation + gradient) * sizeof(bf16);
    }
    // bf16: room (values) for every parameter, the widest activation and gradient.
    void set(Precision p, size_t params, size_t activation, size_t gradient) {
        release();
        if (p == Precision::fp32) return;
        w_ = alloc(params);
        a_ = alloc(activation);
        g_ = alloc(gradient);
        a_n_ = activation;
        g_n_ = gradient;
        w_n_ = params;
    }
    bool is_bf16() const { return w_ != nullptr; }
    // At each forward's start: rounds the parameters unless set_current(true) came since.
    void begin(const float* params, cudaStream_t s) {
        if (is_bf16() && !current_) to_bf16(w_, params, w_n_, s);
        current_ = false;
    }
    bf16* weights() { return w_; }
    // true: an update already wrote weights() with the parameters.
    void set_current(bool current) { current_ = current && is_bf16(); }
    // keep (or null): the rounded input, kept for this matmul's backward.
    void forward(float* out, const float* inp, const float* params, size_t w, const float* bias, int B, int C, int OC,
                 Context& ctx, cudaStream_t s, bf16* keep = nullptr) {
        if (!is_bf16()) return matmul_forward(out, inp, params + w, bias, B, C, OC, ctx, s);
        CUDA_REQUIRE(keep || (size_t)B * C <= a_n_);
        bf16* a = keep ? keep : a_;
        to_bf16(a, inp, (size_t)B * C, s);
        matmul_forward_bf16(out, a, w_ + w, bias, B, C, OC, ctx, s);
    }
    // bf16 only, from an input an op already wrote as bf16.
    void forward_rounded(float* out, const bf16* inp, size_t w, const float* bias, int B, int C, int OC, Context& ctx,
                         cudaStream_t s) {
        CUDA_REQUIRE(is_bf16());
        matmul_forward_bf16(out, inp, w_ + w, bias, B, C, OC, ctx, s);
    }
    // staging: out's size in floats, where cuBLASLt has no algorithm; ld: out's row stride.
    void forward_rounded_out16(bf16* out, const bf16* inp, size_t w, const float* bias, int B, int C, int OC,
                               float* staging, Context& ctx, cudaStream_t s, int ld = 0) {
        CUDA_REQUIRE(is_bf16());
        matmul_forward_bf16_out(out, inp, w_ + w, bias, B, C, OC, staging, ctx, s, ld);
    }
    void forward_rounded_gelu(bf16* pre, bf16* out, const bf16* inp, size_t w, const float* bias, int B, int C, int OC,
                              float* staging, Context& ctx, cudaStream_t s) {
        CUDA_REQUIRE(is_bf16());
        matmul_forward_bf16_gelu(pre, out, inp, w_ + w, bias, B, C, OC, staging, ctx, s);
    }
    // In bf16, dout and inp are rounded into scratch first.
    void backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* params,
                  size_t w, int B, int C, int OC, Context& ctx, cudaStream_t s, bool accumulate = true) {
        if (!is_bf16())
            return matmul_backward(dinp, dweight, dbias, dout, inp, params + w, B, C, OC, ctx, s, accumulate);
        CUDA_REQUIRE((size_t)B * OC <= g_n_ && (size_t)B * C <= a_n_);
        to_bf16(g_, dout, (size_t)B * OC, s);
        to_bf16(a_, inp, (size_t)B * C, s);
        matmul_backward_bf16(dinp, dweight, dbias, g_, a_, w_ + w, B, C, OC, ctx, s, 0, accumulate);
    }

    // bf16: an output gradient an op writes as bf16 for backward_rounded*. One buffer, also
    // backward()'s rounding: each value consumed before the next write (queue order).
    bf16* grad_scratch(size_t n) {
        CUDA_REQUIRE(is_bf16() && n <= g_n_);
        return g_;
    }
    void backward_rounded(float* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp, size_t w, int B,
                          int C, int OC, Context& ctx, cudaStream_t s, int ld = 0, bool accumulate = true) {
        CUDA_REQUIRE(is_bf16());
        matmul_backward_bf16(dinp, dweight, dbias, dout, inp, w_ + w, B, C, OC, ctx, s, ld, accumulate);
    }
    void backward_rounded_out16(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp, size_t w,
                                int B, int C, int OC, Context& ctx, cudaStream_t s, int ld = 0,
                                bool accumulate = true) {
        CUDA_REQUIRE(is_bf16());
        matmul_backward_bf16_out(dinp, dweight, dbias, dout, inp, w_ + w, B, C, OC, ctx, s, ld, accumulate);
    }
    void backward_rounded_gelu(bf16* dpre, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                               const bf16* pre, size_t w, int B, int C, int OC, float* staging, Context& ctx,
                               cudaStream_t s, bool accumulate = true) {
        CUDA_REQUIRE(is_bf16());
        matmul_backward_bf16_gelu(dpre, dweight, dbias, dout, inp, w_ + w, pre, B, C, OC, staging, ctx, s, accumulate);
    }

  private:
    static bf16* alloc(size_t n) {
        void* p = nullptr;
        CUDA_CHECK(cudaMalloc(&p, (n ? n : 1) * sizeof(bf16)));
        return static_cast<bf16*>(p);
    }
    void release() {
        for (bf16* p : {w_, a_, g_})
            if (p) cudaFree(p);
        w_ = a_ = g_ = nullptr;
        current_ = false;
    }
    bf16 *w_ = nullptr, *a_ = nullptr, *g_ = nullptr;
    bool current_ = false;
    size_t w_n_ = 0, a_n_ = 0, g_n_ = 0;
};

// A language model's loss read back: each row's loss (and, when counting, its argmax) copied to the
// host after the work queued on s, summed there in row order; argmax equal to the host's target
// counted into *correct. Allocated once (reserve).
class LossReadback {
  public:
    void reserve(size_t rows) {
        losses_.resize(rows);
        argmax_.resize(rows);
    }
    template <class Events>
    double read(const float* losses, const int* argmax, const int* host_targets, long rows, long* correct,
                cudaStream_t s, Events& ev) {
        ev.timed(OpKind::copy, s, [&] {
            CUDA_CHECK(cudaMemcpyAsync(losses_.data(), losses, (size_t)rows * sizeof(float), cudaMemcpyDeviceToHost, s));
            if (correct)  // 4 bytes a row instead of the logits
                CUDA_CHECK(cudaMemcpyAsync(argmax_.data(), argmax, (size_t)rows * sizeof(int), cudaMemcpyDeviceToHost, s));
        });
        CUDA_CHECK(cudaStreamSynchronize(s));
        double sum = 0.0;
        for (long i = 0; i < rows; ++i) sum += losses_[(size_t)i];
        if (correct)
            for (long i = 0; i < rows; ++i) *correct += argmax_[(size_t)i] == host_targets[i];
        return sum;
    }

  private:
    std::vector<float> losses_;
    std::vector<int> argmax_;
};

// --gpu-state host: the device's gradients added onto the host buffer (backward adds: the trainer's
// contract), through page-locked staging.
class HostGradients {
  public:
    // host[i] += device[i]; blocks until the work queued on s is done.
    void add_to(float* host, const float* device, size_t n, cudaStream_t s) {
        if (staging_.size() != n) {
            pin_.reset();
            staging_.assign(n, 0.0f);
            pin_ = std::make_unique<PinnedHost>(staging_.data(), n * sizeof(float));
        }
        CUDA_CHECK(cudaMemcpyAsync(staging_.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
#pragma omp parallel for schedule(static)
        for (long i = 0; i < (long)n; ++i) host[i] += staging_[i];
    }

  private:
    std::vector<float> staging_;
    std::unique_ptr<PinnedHost> pin_;  // released before staging_ (declared after it)
};

// The batches' way in (Model::stage; docs/GPU.md, "The batches' way in"). Two slots:
// 1. stage() copies into the slot not in use, on the copy stream after that slot's `released_`
//    (the compute stream's last use), and records `copied_`.
// 2. take() makes the compute stream wait for `copied_`, records `released_` for the slot it
//    leaves, and switches.
// 3. An unstaged batch is copied on the compute stream into the current slot (stream order covers
//    its earlier uses); a staged batch stays staged across it.
class InputSlots {
  public:
    static constexpr int kMaxParts = 2;
    struct Part {  // host rows of `width` bytes, `pitch` apart; packed on the device
        const void* src = nullptr;
        size_t pitch = 0, width = 0;
    };
    InputSlots(const size_t* widths, int parts, int max_rows);
    ~InputSlots();
    InputSlots(const InputSlots&) = delete;
    InputSlots& operator=(const InputSlots&) = delete;

    // The host rows must stay as they are until the forward that takes them.
    void stage(const Part* parts, int rows);
    // Device pointers, one per part, ready for work queued on `compute` after this.
    void* const* take(const Part* parts, int rows, cudaStream_t compute);
    // Waits for a staged copy and forgets it: before the staged batch's host memory goes away.
    void drain();
    long staged_hits() const { return staged_hits_; }

  private:
    void copy(int s, const Part* parts, int rows, cudaStream_t stream);
    int parts_, max_rows_;
    size_t width_[kMaxParts] = {};
    void* dev_[2][kMaxParts] = {};
    cudaEvent_t copied_[2] = {}, released_[2] = {};
    cudaStream_t copy_ = nullptr;
    int cur_ = 0;  // the last forward's slot
    int staged_ = -1;  // staged and not yet taken, or -1
    int staged_rows_ = 0;
    Part staged_parts_[kMaxParts];
    long staged_hits_ = 0;
};

// A language model's windows as InputSlots' one part: B host rows of T + 1 tokens, in.stride apart.
inline InputSlots::Part token_rows(const ModelBatch& in, int T) {
    InputSlots::Part p;
    p.src = in.tokens;
    p.pitch = (size_t)in.stride * sizeof(int);
    p.width = (size_t)(T + 1) * sizeof(int);
    return p;
}

// The forward's windows on the device, staged during the last step or copied now (InputSlots::take),
// and their targets, each row's last T tokens, packed into `targets` (B*T) on s. Returns the windows.
inline int* take_windows(InputSlots& input, const ModelBatch& in, int T, int* targets, cudaStream_t s) {
    const InputSlots::Part rows = token_rows(in, T);
    int* tokens = static_cast<int*>(input.take(&rows, in.B, s)[0]);
    CUDA_CHECK(cudaMemcpy2DAsync(targets, (size_t)T * sizeof(int), tokens + 1, (size_t)(T + 1) * sizeof(int),
                                 (size_t)T * sizeof(int), (size_t)in.B, cudaMemcpyDeviceToDevice, s));
    return tokens;
}

// --profile-ops on a GPU: events around each op; stop() waits and adds the times by kind.
class OpEvents {
  public:
    OpEvents() = default;
    ~OpEvents() {
        for (auto& e : events_) {
            cudaEventDestroy(e.first);
            cudaEventDestroy(e.second);
        }
    }
    OpEvents(const OpEvents&) = delete;
    OpEvents& operator=(const OpEvents&) = delete;

    // Starts timing into t; null stops.
    void set(OpTimes* t) {
        stop();
        times_ = t;
    }
    template <class Op>
    void timed(OpKind k, cudaStream_t s, Op&& op) {
        if (!times_) return op();
        if (used_ == events_.size()) {
            cudaEvent_t a = nullptr, b = nullptr;
            CUDA_CHECK(cudaEventCreate(&a));
            CUDA_CHECK(cudaEventCreate(&b));
            events_.emplace_back(a, b);
            kinds_.push_back(k);
        }
        CUDA_CHECK(cudaEventRecord(events_[used_].first, s));
        op();
        CUDA_CHECK(cudaEventRecord(events_[used_].second, s));
        kinds_[used_++] = k;
    }
    void stop() {
        if (!times_) return;
        for (size_t i = 0; i < used_; ++i) {
            CUDA_CHECK(cudaEventSynchronize(events_[i].second));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i].first, events_[i].second));
            times_->add(kinds_[i], ms / 1e3);
        }
        times_ = nullptr;
        used_ = 0;
    }

  private:
    OpTimes* times_ = nullptr;
    std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events_;
    std::vector<OpKind> kinds_;
    size_t used_ = 0;
};

} // namespace dptrain::cuda
