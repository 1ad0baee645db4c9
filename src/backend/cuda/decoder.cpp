// CudaDecoder: the GPU decoders' shared parts (decoder.h) and the factory by architecture.
// Not for: a model's layers (gpt_decoder.cpp, llama_decoder.cpp).
#include "dptrain/backend/cuda/decoder.h"

#include "check.h"
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/cuda/gpt_decoder.h"
#include "dptrain/backend/cuda/llama_decoder.h"
#include "dptrain/core/error.h"

#include <algorithm>
#include <stdexcept>

namespace dptrain {

namespace {
constexpr double kGiB = 1073741824.0;
}

CudaDecoder::CudaDecoder(const char* model, size_t P, size_t widest, int device, Precision weights, int T, int C,
                         int V)
    : device_(device), P_(P), ctx_(std::make_unique<cuda::Context>(device)), T_(T), C_(C), V_(V) {
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const double need = 4.0 * (double)P_;
    const std::string what = strfmt("%s on GPU %d needs %.2f GiB of device memory for its parameters, and %.2f GiB "
                                    "of %.2f GiB are free; decode on the CPU (--device cpu)",
                                    model, device, need / kGiB, (double)free_bytes / kGiB, (double)total_bytes / kGiB);
    if (need > (double)free_bytes) throw UserError(what);
    try {
        params_ = alloc(P_, allocs_, what);
        if (weights == Precision::bf16) {
            const std::string copy = strfmt("decoding with bf16 weights keeps a copy of them on the GPU (%.2f GiB), "
                                            "and an allocation failed; decode in fp32 (leave --precision out) or on "
                                            "the CPU",
                                            (double)P_ * sizeof(bf16) / kGiB);
            w16_ = reinterpret_cast<bf16*>(alloc((P_ + 1) / 2, allocs_, copy));
            wide_ = alloc(widest, allocs_, copy);
        }
    } catch (...) {
        for (void* p : allocs_) cudaFree(p);
        throw;
    }
}

CudaDecoder::~CudaDecoder() {
    cudaSetDevice(device_);
    free_cache();
    for (void* p : allocs_) cudaFree(p);
}

float* CudaDecoder::alloc(size_t n, std::vector<void*>& into, const std::string& need) {
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

void CudaDecoder::free_graphs() {
    for (cudaGraphExec_t& g : graphs_)
        if (g) cudaGraphExecDestroy(g), g = nullptr;
    graphs_.clear();
}

void CudaDecoder::free_cache() {
    free_graphs();  // they hold the buffers' addresses
    for (void* p : cache_) cudaFree(p);
    cache_.clear();
    logits_ = gather_ = nullptr;
    rows_dev_ = ids_dev_ = nullptr;
    draws_dev_ = nullptr;
    slots_ = rows_ = 0;
}

void CudaDecoder::begin_reserve(int slots, int max_rows, const std::string& need) {
    if (slots <= 0 || max_rows <= 0) throw std::invalid_argument("CudaDecoder::reserve: slots and rows must be positive");
    CUDA_CHECK(cudaSetDevice(device_));
    free_cache();
    const size_t R = max_rows;
    static_assert(sizeof(int) == sizeof(float) && sizeof(TokenDraw) % sizeof(float) == 0, "buffers counted in floats");
    try {
        logits_ = alloc(R * V_, cache_, need);
        gather_ = alloc(R * C_, cache_, need);
        rows_dev_ = reinterpret_cast<int*>(alloc(3 * R, cache_, need));
        ids_dev_ = reinterpret_cast<int*>(alloc(R, cache_, need));
        draws_dev_ = reinterpret_cast<TokenDraw*>(alloc(R * sizeof(TokenDraw) / sizeof(float), cache_, need));
    } catch (...) {
        free_cache();
        throw;
    }
}

void CudaDecoder::end_reserve(int slots, int max_rows) {
    ints_.assign(3 * (size_t)max_rows, 0);
    prompts_.reserve(max_rows / kDecodePromptRows + 1);
    host_row_.resize(V_);
    probs_.resize(V_);
    order_.resize(V_);
    graphs_.assign((size_t)slots + 1, nullptr);
    slots_ = slots;
    rows_ = max_rows;
}

void CudaDecoder::set_params(const float* params) {
    CUDA_CHECK(cudaSetDevice(device_));
    cudaStream_t s = ctx_->stream();  // a plain cudaMemcpy would not order against it
    CUDA_CHECK(cudaMemcpyAsync(params_, params, P_ * sizeof(float), cudaMemcpyHostToDevice, s));
    if (w16_) cuda::to_bf16(w16_, params_, P_, s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    params_set_ = true;
}

std::string CudaDecoder::where() const { return strfmt("GPU %d%s", device_, w16_ ? ", bf16 weights" : ""); }

bool CudaDecoder::begin_call(const int* tok, const int* slot, const int* pos, int n, const int* out_rows, int n_out) {
    const int V = V_, T = T_;
    if (!params_set_) throw std::logic_error("CudaDecoder::decode before set_params");
    if (n > rows_) throw std::invalid_argument("CudaDecoder::decode: more rows than reserve allowed");
    for (int i = 0; i < n; ++i) {  // the CPU decoders' checks and messages
        if (tok[i] < 0 || tok[i] >= V) throw UserError(strfmt("token %d outside the model's vocabulary of %d", tok[i], V));
        if (slot[i] < 0 || slot[i] >= slots_ || pos[i] < 0 || pos[i] >= T)
            throw std::invalid_argument("CudaDecoder::decode: slot or position out of range");
    }
    if (out_rows && (n_out < 0 || n_out > n)) throw std::invalid_argument("CudaDecoder::decode: n_out outside 0..n");
    for (int r = 0; out_rows && r < n_out; ++r)
        if (out_rows[r] < 0 || out_rows[r] >= n) throw std::invalid_argument("CudaDecoder::decode: out_rows out of range");
    if (n == 0) return false;
    CUDA_CHECK(cudaSetDevice(device_));
    std::copy(tok, tok + n, ints_.begin());
    std::copy(slot, slot + n, ints_.begin() + n);
    std::copy(pos, pos + n, ints_.begin() + 2 * n);
    CUDA_CHECK(cudaMemcpyAsync(rows_dev_, ints_.data(), 3 * (size_t)n * sizeof(int), cudaMemcpyHostToDevice,
                               ctx_->stream()));
    n_ = n;
    decode_prompt_runs(slot, n, prompts_);
    return true;
}

void CudaDecoder::product(float* out, const float* inp, size_t w, const float* bias, int n, int C, int OC) {
    cudaStream_t s = ctx_->stream();
    const float* weight = params_ + w;
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

const float* CudaDecoder::run_layers(int n) {
    // A prompt's products go through cuBLAS; a call of more rows than slots holds a short prompt (a
    // graph for each such count would be captured once and rarely replayed).
    if (!graphs_on_ || !prompts_.empty() || n > slots_) return layers(n);
    cudaStream_t s = ctx_->stream();
    cudaGraphExec_t& exec = graphs_[n];
    if (!exec) {
        // Thread-local capture: serving's HTTP threads make no CUDA calls that would join it.
        CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        cudaGraph_t graph = nullptr;
        try {
            normed_ = layers(n);
        } catch (...) {
            cudaStreamEndCapture(s, &graph);
            if (graph) cudaGraphDestroy(graph);
            throw;
        }
        CUDA_CHECK(cudaStreamEndCapture(s, &graph));
        const cudaError_t rc = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        if (rc != cudaSuccess) exec = nullptr;  // never launched
        CUDA_CHECK(rc);
        ++captured_;
    }
    CUDA_CHECK(cudaGraphLaunch(exec, s));
    return normed_;
}

int CudaDecoder::head(const float* normed, int n, const int* out_rows, int n_out) {
    cudaStream_t s = ctx_->stream();
    const float* rows = normed;
    int m = n;
    if (out_rows) {  // the rows whose logits are wanted, gathered as on the CPU
        for (int r = 0; r < n_out; ++r)
            CUDA_CHECK(cudaMemcpyAsync(gather_ + (size_t)r * C_, normed + (size_t)out_rows[r] * C_, C_ * sizeof(float),
                                       cudaMemcpyDeviceToDevice, s));
        rows = gather_;
        m = n_out;
    }
    if (w16_) cuda::matmul_forward_rows(logits_, rows, w16_ + head_at_, nullptr, m, C_, V_, s);
    else cuda::matmul_forward_rows(logits_, rows, params_ + head_at_, nullptr, m, C_, V_, s);
    return m;
}

void CudaDecoder::decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows,
                         int n_out) {
    if (!begin_call(tok, slot, pos, n, out_rows, n_out)) return;
    cudaStream_t s = ctx_->stream();
    const int m = head(run_layers(n), n, out_rows, n_out);
    CUDA_CHECK(cudaMemcpyAsync(logits, logits_, (size_t)m * V_ * sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}

void CudaDecoder::decode_pick(const int* tok, const int* slot, const int* pos, int n, const int* out_rows, int n_out,
                              const TokenDraw* draws, int* ids, float* logits) {
    if (!begin_call(tok, slot, pos, n, out_rows, n_out)) return;
    cudaStream_t s = ctx_->stream();
    const int m = head(run_layers(n), n, out_rows, n_out);
    CUDA_CHECK(cudaMemcpyAsync(draws_dev_, draws, (size_t)m * sizeof(TokenDraw), cudaMemcpyHostToDevice, s));
    cuda::pick_tokens(ids_dev_, logits_, m, V_, draws_dev_, s);
    CUDA_CHECK(cudaMemcpyAsync(ids, ids_dev_, (size_t)m * sizeof(int), cudaMemcpyDeviceToHost, s));
    if (logits)
        CUDA_CHECK(cudaMemcpyAsync(logits, logits_, (size_t)m * V_ * sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    for (int r = 0; r < m; ++r) {  // a cut wider than the device sorts: the CPU's, on this row alone
        if (ids[r] != cuda::kPickOnHost) continue;
        const float* z = logits ? logits + (size_t)r * V_ : host_row_.data();
        if (!logits) {
            CUDA_CHECK(cudaMemcpyAsync(host_row_.data(), logits_ + (size_t)r * V_, V_ * sizeof(float),
                                       cudaMemcpyDeviceToHost, s));
            CUDA_CHECK(cudaStreamSynchronize(s));
        }
        ids[r] = cpu::pick_token(z, draws[r], probs_.data(), order_.data());
    }
}

std::unique_ptr<Decoder> make_cuda_decoder(const GptConfig& cfg, int device, Precision weights) {
    if (cfg.arch == DecoderArch::llama) return std::make_unique<CudaLlamaDecoder>(cfg, device, weights);
    return std::make_unique<CudaGptDecoder>(cfg, device, weights);
}

} // namespace dptrain
