// CudaGptDecoder: GptDecoder's ops (src/model/gpt_decoder.cpp) in the same order on the device.
// Not for: training (gpt.cpp), or choosing which rows to decode.
#include "dptrain/backend/cuda/gpt_decoder.h"

#include "check.h"
#include "dptrain/core/error.h"

#include <algorithm>
#include <stdexcept>

namespace dptrain {

namespace {
constexpr double kGiB = 1073741824.0;
}

CudaGptDecoder::CudaGptDecoder(const GptConfig& cfg, int device, Precision weights)
    : cfg_(cfg), device_(device), ctx_(std::make_unique<cuda::Context>(device)) {
    cfg_.flash_attention = false;  // training's choices: decoding has its own attention
    cfg_.recompute = Recompute::none;
    const Gpt layout(cfg_, 0);
    P_ = layout.num_params();
    wte_ = layout.layout().find("wte").offset;
    wpe_ = layout.layout().find("wpe").offset;
    lnfw_ = layout.layout().find("lnf.weight").offset;
    lnfb_ = layout.layout().find("lnf.bias").offset;
    lv_ = layout.layer_views();
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const double need = 4.0 * (double)P_;
    const std::string what = strfmt("GPT on GPU %d needs %.2f GiB of device memory for its parameters, and %.2f GiB "
                                     "of %.2f GiB are free",
                                     device, need / kGiB, (double)free_bytes / kGiB, (double)total_bytes / kGiB);
    if (need > (double)free_bytes) throw UserError(what + "; decode on the CPU (--device cpu)");
    try {
        params_ = alloc(P_, allocs_, what + "; decode on the CPU (--device cpu)");
        if (weights == Precision::bf16) {
            const std::string copy = strfmt("decoding with bf16 weights keeps a copy of them on the GPU (%.2f GiB), "
                                            "and an allocation failed; decode in fp32 (leave --precision out) or on "
                                            "the CPU",
                                            (double)P_ * sizeof(bf16) / kGiB);
            w16_ = reinterpret_cast<bf16*>(alloc((P_ + 1) / 2, allocs_, copy));
            wide_ = alloc(4 * (size_t)cfg_.n_embd * cfg_.n_embd, allocs_, copy);
        }
    } catch (...) {
        for (void* p : allocs_) cudaFree(p);
        throw;
    }
}

CudaGptDecoder::~CudaGptDecoder() {
    cudaSetDevice(device_);
    free_cache();
    for (void* p : allocs_) cudaFree(p);
}

float* CudaGptDecoder::alloc(size_t n, std::vector<void*>& into, const std::string& need) {
    void* p = nullptr;
    const cudaError_t rc = cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float));
    if (rc == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // the user's to fix, not a broken device
        throw UserError(need);
    }
    CUDA_CHECK(rc);
    into.push_back(p);
    return static_cast<float*>(p);
}

void CudaGptDecoder::free_cache() {
    for (void* p : cache_) cudaFree(p);
    cache_.clear();
    k_ = v_ = x_ = ln_ = qkv_ = y_ = fc_ = mean_ = rstd_ = logits_ = nullptr;
    rows_dev_ = nullptr;
    slots_ = rows_ = 0;
}

void CudaGptDecoder::reserve(int slots, int max_rows) {
    if (slots <= 0 || max_rows <= 0)
        throw std::invalid_argument("CudaGptDecoder::reserve: slots and rows must be positive");
    CUDA_CHECK(cudaSetDevice(device_));
    free_cache();  // a reservation that fails half way leaves none
    const size_t T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, V = cfg_.vocab_size, R = max_rows;
    // The cache grows with the sequences served at once: a failed allocation names it.
    const std::string need = strfmt("decoding %d sequence%s at once on the GPU needs a key/value cache of %.2f GiB "
                                    "and room for %zu rows, and an allocation failed; decode on the CPU (--device "
                                    "cpu), or serve fewer sequences at once (serve's --max-batch)",
                                    slots, slots == 1 ? "" : "s", 8.0 * L * slots * T * C / kGiB, R);
    try {
        k_ = alloc(L * slots * T * C, cache_, need);
        v_ = alloc(L * slots * T * C, cache_, need);
        x_ = alloc(R * C, cache_, need);
        ln_ = alloc(R * C, cache_, need);
        qkv_ = alloc(R * 3 * C, cache_, need);
        y_ = alloc(R * C, cache_, need);
        fc_ = alloc(R * 4 * C, cache_, need);
        mean_ = alloc(R, cache_, need);
        rstd_ = alloc(R, cache_, need);
        logits_ = alloc(R * V, cache_, need);
        rows_dev_ = reinterpret_cast<int*>(alloc(3 * R, cache_, need));  // an int has a float's size
    } catch (...) {
        free_cache();
        throw;
    }
    // Zeroed as the CPU twin's, on the decoder's stream (it does not wait for the legacy default one).
    cudaStream_t s = ctx_->stream();
    CUDA_CHECK(cudaMemsetAsync(k_, 0, L * slots * T * C * sizeof(float), s));
    CUDA_CHECK(cudaMemsetAsync(v_, 0, L * slots * T * C * sizeof(float), s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    ints_.assign(3 * R, 0);
    prompts_.reserve(max_rows / kDecodePromptRows + 1);
    slots_ = slots;
    rows_ = max_rows;
}

void CudaGptDecoder::set_params(const float* params) {
    CUDA_CHECK(cudaSetDevice(device_));
    cudaStream_t s = ctx_->stream();  // a plain cudaMemcpy would not order against it
    CUDA_CHECK(cudaMemcpyAsync(params_, params, P_ * sizeof(float), cudaMemcpyHostToDevice, s));
    if (w16_) cuda::to_bf16(w16_, params_, P_, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
}

std::string CudaGptDecoder::where() const { return strfmt("GPU %d%s", device_, w16_ ? ", bf16 weights" : ""); }

// A prompt's run is one cuBLAS call of its own, other rows go through matmul_forward_rows: a row's
// bits stay its own. Why: docs/SERVING.md, "Note [decode products]".
void CudaGptDecoder::product(float* out, const float* inp, size_t w, size_t b, int n, int C, int OC) {
    cudaStream_t s = ctx_->stream();
    const float *weight = params_ + w, *bias = params_ + b;
    const bf16* w16 = w16_ ? w16_ + w : nullptr;
    if (w16 && !prompts_.empty()) {
        cuda::from_bf16(wide_, w16, (size_t)OC * C, s);
        weight = wide_;
    }
    auto rows = [&](int first, int count) {
        float* o = out + (size_t)first * OC;
        const float* x = inp + (size_t)first * C;
        if (w16) cuda::matmul_forward_rows(o, x, w16, bias, count, C, OC, s);
        else cuda::matmul_forward_rows(o, x, weight, bias, count, C, OC, s);
    };
    int done = 0;
    for (const auto& [begin, end] : prompts_) {
        rows(done, begin - done);
        cuda::matmul_forward(out + (size_t)begin * OC, inp + (size_t)begin * C, weight, bias, end - begin, C, OC, *ctx_,
                             s);
        done = end;
    }
    rows(done, n - done);
}

void CudaGptDecoder::decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows,
                            int n_out) {
    const int T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head, V = cfg_.vocab_size;
    if (n > rows_) throw std::invalid_argument("CudaGptDecoder::decode: more rows than reserve allowed");
    for (int i = 0; i < n; ++i) {  // GptDecoder::decode's checks and messages
        if (tok[i] < 0 || tok[i] >= V) throw UserError(strfmt("token %d outside the model's vocabulary of %d", tok[i], V));
        if (slot[i] < 0 || slot[i] >= slots_ || pos[i] < 0 || pos[i] >= T)
            throw std::invalid_argument("CudaGptDecoder::decode: slot or position out of range");
    }
    if (out_rows && (n_out < 0 || n_out > n)) throw std::invalid_argument("CudaGptDecoder::decode: n_out outside 0..n");
    for (int r = 0; out_rows && r < n_out; ++r)
        if (out_rows[r] < 0 || out_rows[r] >= n)
            throw std::invalid_argument("CudaGptDecoder::decode: out_rows out of range");
    if (n == 0) return;
    CUDA_CHECK(cudaSetDevice(device_));
    cudaStream_t s = ctx_->stream();
    std::copy(tok, tok + n, ints_.begin());
    std::copy(slot, slot + n, ints_.begin() + n);
    std::copy(pos, pos + n, ints_.begin() + 2 * n);
    CUDA_CHECK(cudaMemcpyAsync(rows_dev_, ints_.data(), 3 * (size_t)n * sizeof(int), cudaMemcpyHostToDevice, s));
    decode_prompt_runs(slot, n, prompts_);
    const int *d_tok = rows_dev_, *d_slot = rows_dev_ + n, *d_pos = rows_dev_ + 2 * n;
    const float* P = params_;
    float *x = x_, *ln = ln_, *y = y_, *fc = fc_, *qkv = qkv_;
    const long nC = (long)n * C;
    cuda::encoder_decode(x, d_tok, d_pos, P + wte_, P + wpe_, n, C, s);
    const size_t layer_cache = (size_t)slots_ * T * C;
    for (int l = 0; l < L; ++l) {
        const Gpt::LayerViews& v = lv_[l];
        cuda::layernorm_forward(ln, mean_, rstd_, x, P + v.ln1w, P + v.ln1b, n, C, s);
        product(qkv, ln, v.qkvw, v.qkvb, n, C, 3 * C);
        cuda::attention_decode(y, k_ + l * layer_cache, v_ + l * layer_cache, qkv, d_slot, d_pos, n, T, C, NH, s);
        product(ln, y, v.attprojw, v.attprojb, n, C, C);
        cuda::residual_forward(x, x, ln, nC, s);
        cuda::layernorm_forward(ln, mean_, rstd_, x, P + v.ln2w, P + v.ln2b, n, C, s);
        product(fc, ln, v.fcw, v.fcb, n, C, 4 * C);
        cuda::gelu_forward(fc, fc, 4 * nC, s);
        product(ln, fc, v.fcprojw, v.fcprojb, n, 4 * C, C);
        cuda::residual_forward(x, x, ln, nC, s);
    }
    cuda::layernorm_forward(ln, mean_, rstd_, x, P + lnfw_, P + lnfb_, n, C, s);
    // The rows whose logits are wanted, gathered into y as on the CPU.
    const float* rows = ln;
    int m = n;
    if (out_rows) {
        for (int r = 0; r < n_out; ++r)
            CUDA_CHECK(cudaMemcpyAsync(y + (size_t)r * C, ln + (size_t)out_rows[r] * C, C * sizeof(float),
                                       cudaMemcpyDeviceToDevice, s));
        rows = y;
        m = n_out;
    }
    // Row by row, so that asking for fewer rows' logits does not change theirs.
    if (w16_) cuda::matmul_forward_rows(logits_, rows, w16_ + wte_, nullptr, m, C, V, s);
    else cuda::matmul_forward_rows(logits_, rows, P + wte_, nullptr, m, C, V, s);
    CUDA_CHECK(cudaMemcpyAsync(logits, logits_, (size_t)m * V * sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}

std::unique_ptr<Decoder> make_cuda_decoder(const GptConfig& cfg, int device, Precision weights) {
    return std::make_unique<CudaGptDecoder>(cfg, device, weights);
}

} // namespace dptrain
