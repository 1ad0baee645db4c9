// CudaGpt's incremental decoding (generate, serve), the twin of Gpt::reserve_decode and
// Gpt::decode: the same ops in the same order on n rows, with the key/value cache on the device.
// Not for: training (gpt.cpp), or choosing which rows to decode (app/completions.cpp).
#include "dptrain/backend/cuda/gpt.h"

#include "check.h"
#include "dptrain/core/error.h"

#include <algorithm>
#include <stdexcept>

namespace dptrain {

void CudaGpt::reserve_decode(int slots, int max_rows) {
    if (slots <= 0 || max_rows <= 0)
        throw std::invalid_argument("CudaGpt::reserve_decode: slots and rows must be positive");
    // A reservation that fails half way leaves none: nothing points at freed or missing memory.
    for (void* p : dec_allocs_) cudaFree(p);
    dec_allocs_.clear();
    dec_k_ = dec_v_ = dec_x_ = dec_ln_ = dec_qkv_ = dec_y_ = dec_fc_ = dec_mean_ = dec_rstd_ = dec_logits_ = nullptr;
    dec_rows_dev_ = nullptr;
    dec_slots_ = dec_rows_ = 0;
    const size_t T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, V = cfg_.vocab_size, R = max_rows;
    // The cache is what grows with the sequences served at once: a failed allocation names it.
    auto alloc = [&](size_t n) {
        void* p = nullptr;
        const cudaError_t rc = cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float));
        if (rc == cudaErrorMemoryAllocation) {
            cudaGetLastError();  // the user's to fix, not a broken device
            throw UserError(strfmt("decoding %d sequence%s at once on the GPU needs a key/value cache of %.2f GiB "
                                   "and room for %zu rows, and an allocation failed; decode on the CPU (--device "
                                   "cpu), or serve fewer sequences at once (serve's --max-batch)",
                                   slots, slots == 1 ? "" : "s", 8.0 * L * slots * T * C / 1073741824.0, R));
        }
        CUDA_CHECK(rc);
        dec_allocs_.push_back(p);
        return static_cast<float*>(p);
    };
    dec_k_ = alloc(L * slots * T * C);
    dec_v_ = alloc(L * slots * T * C);
    dec_x_ = alloc(R * C);
    dec_ln_ = alloc(R * C);
    dec_qkv_ = alloc(R * 3 * C);
    dec_y_ = alloc(R * C);
    dec_fc_ = alloc(R * 4 * C);
    dec_mean_ = alloc(R);
    dec_rstd_ = alloc(R);
    dec_logits_ = alloc(R * V);
    dec_rows_dev_ = reinterpret_cast<int*>(alloc(3 * R));  // an int has a float's size
    // The caches start at zero, as the CPU twin's (a slot's positions are written before read). On
    // the model's stream, which does not wait for the legacy default stream's work, and finished
    // before returning.
    cudaStream_t s = ctx_->stream();
    CUDA_CHECK(cudaMemsetAsync(dec_k_, 0, L * slots * T * C * sizeof(float), s));
    CUDA_CHECK(cudaMemsetAsync(dec_v_, 0, L * slots * T * C * sizeof(float), s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    dec_ints_.assign(3 * R, 0);
    dec_prompts_.reserve(max_rows / Gpt::kDecodePromptRows + 1);
    dec_slots_ = slots;
    dec_rows_ = max_rows;
}

// On the model's stream (a plain cudaMemcpy would not order against it), done before returning:
// the caller may free or refill `params` at once.
void CudaGpt::upload_params(const float* params) {
    cudaStream_t s = ctx_->stream();
    const size_t n = host_.num_params();
    CUDA_CHECK(cudaMemcpyAsync(params_, params, n * sizeof(float), cudaMemcpyHostToDevice, s));
    if (dec_w16_) cuda::to_bf16(dec_w16_, params_, n, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
}

void CudaGpt::set_decode_weights(Precision weights) {
    if (weights != Precision::bf16 || dec_w16_) return;
    const size_t n = host_.num_params(), C = cfg_.n_embd;
    for (size_t bytes : {n * sizeof(bf16), 4 * C * C * sizeof(float)}) {
        void* p = nullptr;
        const cudaError_t rc = cudaMalloc(&p, bytes);
        if (rc == cudaErrorMemoryAllocation) {
            cudaGetLastError();  // the user's to fix, not a broken device
            throw UserError(strfmt("decoding with bf16 weights keeps a copy of them on the GPU (%.2f GiB), and an "
                                   "allocation failed; decode in fp32 (leave --precision out) or on the CPU",
                                   (double)n * sizeof(bf16) / 1073741824.0));
        }
        CUDA_CHECK(rc);
        w16_allocs_.push_back(p);
    }
    dec_w16_ = static_cast<bf16*>(w16_allocs_[0]);
    dec_wide_ = static_cast<float*>(w16_allocs_[1]);
}

// Gpt::decode_product's rule and reasons on the device: cuBLAS's bits for a row depend on its
// call's row count (its kernel and split of the sum are chosen by the shape), so a prompt's run is
// one sgemm of its own (the same call alone or batched) and every other row goes through
// matmul_forward_rows, whose order is fixed by C alone. The run's rows start begin * C floats into
// the buffers: 16-byte aligned alike alone and batched when C is a multiple of 4.
// With bf16 weights, as on the CPU: rows on the bf16 copy, a prompt's call on the matrix widened.
void CudaGpt::decode_product(float* out, const float* inp, size_t w, size_t b, int n, int C, int OC) {
    cudaStream_t s = ctx_->stream();
    const float *weight = params_ + w, *bias = params_ + b;
    const bf16* w16 = dec_w16_ ? dec_w16_ + w : nullptr;
    if (w16 && !dec_prompts_.empty()) {
        cuda::from_bf16(dec_wide_, w16, (size_t)OC * C, s);
        weight = dec_wide_;
    }
    auto rows = [&](int first, int count) {
        float* o = out + (size_t)first * OC;
        const float* x = inp + (size_t)first * C;
        if (w16) cuda::matmul_forward_rows(o, x, w16, bias, count, C, OC, s);
        else cuda::matmul_forward_rows(o, x, weight, bias, count, C, OC, s);
    };
    int done = 0;
    for (const auto& [begin, end] : dec_prompts_) {
        rows(done, begin - done);
        cuda::matmul_forward(out + (size_t)begin * OC, inp + (size_t)begin * C, weight, bias, end - begin, C, OC, *ctx_,
                             s);
        done = end;
    }
    rows(done, n - done);
}

void CudaGpt::decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows,
                     int n_out) {
    const int T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head, V = cfg_.vocab_size;
    if (n > dec_rows_) throw std::invalid_argument("CudaGpt::decode: more rows than reserve_decode allowed");
    for (int i = 0; i < n; ++i) {  // Gpt::decode's checks and messages
        if (tok[i] < 0 || tok[i] >= V) throw UserError(strfmt("token %d outside the model's vocabulary of %d", tok[i], V));
        if (slot[i] < 0 || slot[i] >= dec_slots_ || pos[i] < 0 || pos[i] >= T)
            throw std::invalid_argument("CudaGpt::decode: slot or position out of range");
    }
    if (out_rows && (n_out < 0 || n_out > n))
        throw std::invalid_argument("CudaGpt::decode: n_out outside 0..n");
    for (int r = 0; out_rows && r < n_out; ++r)
        if (out_rows[r] < 0 || out_rows[r] >= n) throw std::invalid_argument("CudaGpt::decode: out_rows out of range");
    if (n == 0) return;
    cudaStream_t s = ctx_->stream();
    std::copy(tok, tok + n, dec_ints_.begin());
    std::copy(slot, slot + n, dec_ints_.begin() + n);
    std::copy(pos, pos + n, dec_ints_.begin() + 2 * n);
    CUDA_CHECK(cudaMemcpyAsync(dec_rows_dev_, dec_ints_.data(), 3 * (size_t)n * sizeof(int), cudaMemcpyHostToDevice, s));
    Gpt::prompt_runs(slot, n, dec_prompts_);
    const int *d_tok = dec_rows_dev_, *d_slot = dec_rows_dev_ + n, *d_pos = dec_rows_dev_ + 2 * n;
    const float* P = params_;
    float *x = dec_x_, *ln = dec_ln_, *y = dec_y_, *fc = dec_fc_, *qkv = dec_qkv_;
    const long nC = (long)n * C;
    cuda::encoder_decode(x, d_tok, d_pos, P + wte_, P + wpe_, n, C, s);
    const size_t layer_cache = (size_t)dec_slots_ * T * C;
    for (int l = 0; l < L; ++l) {
        const LayerViews& v = lv_[l];
        cuda::layernorm_forward(ln, dec_mean_, dec_rstd_, x, P + v.ln1w, P + v.ln1b, n, C, s);
        decode_product(qkv, ln, v.qkvw, v.qkvb, n, C, 3 * C);
        cuda::attention_decode(y, dec_k_ + l * layer_cache, dec_v_ + l * layer_cache, qkv, d_slot, d_pos, n, T, C, NH,
                               s);
        decode_product(ln, y, v.attprojw, v.attprojb, n, C, C);
        cuda::residual_forward(x, x, ln, nC, s);
        cuda::layernorm_forward(ln, dec_mean_, dec_rstd_, x, P + v.ln2w, P + v.ln2b, n, C, s);
        decode_product(fc, ln, v.fcw, v.fcb, n, C, 4 * C);
        cuda::gelu_forward(fc, fc, 4 * nC, s);
        decode_product(ln, fc, v.fcprojw, v.fcprojb, n, 4 * C, C);
        cuda::residual_forward(x, x, ln, nC, s);
    }
    cuda::layernorm_forward(ln, dec_mean_, dec_rstd_, x, P + lnfw_, P + lnfb_, n, C, s);
    // The rows whose logits are wanted (a prompt needs its last), gathered into y as on the CPU.
    const float* rows = ln;
    int m = n;
    if (out_rows) {
        for (int r = 0; r < n_out; ++r)
            CUDA_CHECK(cudaMemcpyAsync(y + (size_t)r * C, ln + (size_t)out_rows[r] * C, C * sizeof(float),
                                       cudaMemcpyDeviceToDevice, s));
        rows = y;
        m = n_out;
    }
    // Row by row, as on the CPU: mostly a sequence's last row alone, and so that asking for fewer
    // rows' logits does not change theirs.
    if (dec_w16_) cuda::matmul_forward_rows(dec_logits_, rows, dec_w16_ + wte_, nullptr, m, C, V, s);
    else cuda::matmul_forward_rows(dec_logits_, rows, P + wte_, nullptr, m, C, V, s);
    CUDA_CHECK(cudaMemcpyAsync(logits, dec_logits_, (size_t)m * V * sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}

namespace {

// CudaGpt made for decoding alone (max_batch 0: the parameters on the device, no gradients and no
// activations of training), fp32 or from a bf16 copy of the weights. Each call makes its device
// current first: serve decodes on a
// thread of its own, whose current device is not the one the model was made on.
class CudaDecoder : public Decoder {
  public:
    CudaDecoder(const GptConfig& cfg, int device, Precision weights)
        : gpt_(cfg, 0, device), device_(device), bf16_(weights == Precision::bf16) {
        gpt_.set_decode_weights(weights);
    }
    void reserve(int slots, int max_rows) override {
        CUDA_CHECK(cudaSetDevice(device_));
        gpt_.reserve_decode(slots, max_rows);
    }
    void set_params(const float* params) override {
        CUDA_CHECK(cudaSetDevice(device_));
        gpt_.upload_params(params);
    }
    void decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows,
                int n_out) override {
        CUDA_CHECK(cudaSetDevice(device_));
        gpt_.decode(tok, slot, pos, n, logits, out_rows, n_out);
    }
    std::string where() const override { return strfmt("GPU %d%s", device_, bf16_ ? ", bf16 weights" : ""); }

  private:
    CudaGpt gpt_;
    int device_;
    bool bf16_;
};

} // namespace

std::unique_ptr<Decoder> make_cuda_decoder(const GptConfig& cfg, int device, Precision weights) {
    return std::make_unique<CudaDecoder>(cfg, device, weights);
}

} // namespace dptrain
