// CudaLlamaDecoder: LlamaDecoder's ops (src/model/llama_decoder.cpp) in the same order on the device.
// Not for: training (llama.cpp), the parts every GPU decoder shares (decoder.cpp).
#include "dptrain/backend/cuda/llama_decoder.h"

#include "check.h"
#include "dptrain/core/error.h"

#include <algorithm>

namespace dptrain {

namespace {
constexpr double kGiB = 1073741824.0;

// Checked (Llama's own messages) before anything is allocated.
GptConfig decoding(const GptConfig& cfg) {
    GptConfig c = llama_resolved(cfg);
    c.flash_attention = false;  // training's choices: decoding has its own attention
    c.recompute = Recompute::none;
    (void)Llama(c, 0);
    return c;
}
}

CudaLlamaDecoder::CudaLlamaDecoder(const GptConfig& cfg, int device, Precision weights)
    : CudaDecoder("Llama", Llama::count_params(cfg), llama_widest_matrix(decoding(cfg)), device, weights,
                  cfg.block_size, cfg.n_embd, cfg.vocab_size),
      cfg_(decoding(cfg)) {
    const Llama layout(cfg_, 0);
    hs_ = cfg_.n_embd / cfg_.n_head;
    qkv_w_ = (cfg_.n_head + 2 * cfg_.n_kv_head) * hs_;
    wte_ = layout.wte();
    lnfw_ = layout.lnf();
    set_head(layout.head());
    lv_ = layout.layer_views();
    const size_t half = (size_t)cfg_.block_size * hs_ / 2;
    std::vector<float> cos(half), sin(half);
    llama_rope_table(cfg_, cos.data(), sin.data());
    const std::string need = "the Llama's rotation table did not fit on the GPU; decode on the CPU (--device cpu)";
    try {  // kept across reservations, in fixed_ (this destructor's)
        cos_ = alloc(half, fixed_, need);
        sin_ = alloc(half, fixed_, need);
        cudaStream_t s = ctx_->stream();  // decoding's stream does not wait for the legacy default one
        CUDA_CHECK(cudaMemcpyAsync(cos_, cos.data(), half * sizeof(float), cudaMemcpyHostToDevice, s));
        CUDA_CHECK(cudaMemcpyAsync(sin_, sin.data(), half * sizeof(float), cudaMemcpyHostToDevice, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
    } catch (...) {
        for (void* p : fixed_) cudaFree(p);  // no destructor runs for an object whose constructor threw
        throw;
    }
}

CudaLlamaDecoder::~CudaLlamaDecoder() {
    cudaSetDevice(device_);
    for (void* p : fixed_) cudaFree(p);
}

void CudaLlamaDecoder::reserve(int slots, int max_rows) {
    const size_t T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, R = max_rows, F = cfg_.ffn_hidden;
    const size_t KVC = (size_t)cfg_.n_kv_head * hs_, cache = L * slots * T * KVC;
    const std::string need = strfmt("decoding %d sequence%s at once on the GPU needs a key/value cache of %.2f GiB "
                                    "and room for %zu rows, and an allocation failed; decode on the CPU (--device "
                                    "cpu), or serve fewer sequences at once (serve's --max-batch)",
                                    slots, slots == 1 ? "" : "s", 8.0 * (double)cache / kGiB, R);
    begin_reserve(slots, max_rows, need);
    try {
        k_ = alloc(cache, cache_, need);
        v_ = alloc(cache, cache_, need);
        x_ = alloc(R * C, cache_, need);
        ln_ = alloc(R * C, cache_, need);
        y_ = alloc(R * C, cache_, need);
        qkv_ = alloc(R * qkv_w_, cache_, need);
        gu_ = alloc(R * 2 * F, cache_, need);
        swi_ = alloc(R * F, cache_, need);
        rstd_ = alloc(R, cache_, need);
    } catch (...) {
        free_cache();
        throw;
    }
    cudaStream_t s = ctx_->stream();  // zeroed as the CPU twin's
    CUDA_CHECK(cudaMemsetAsync(k_, 0, cache * sizeof(float), s));
    CUDA_CHECK(cudaMemsetAsync(v_, 0, cache * sizeof(float), s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    end_reserve(slots, max_rows);
}

const float* CudaLlamaDecoder::layers(int n) {
    const int T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head, KV = cfg_.n_kv_head;
    const int F = cfg_.ffn_hidden;
    const float eps = cfg_.norm_eps;
    cudaStream_t s = ctx_->stream();
    const float* P = params_;
    float *x = x_, *ln = ln_, *y = y_, *qkv = qkv_;
    const long nC = (long)n * C;
    cuda::encoder_decode(x, d_tok(), d_pos(), P + wte_, nullptr, n, C, s);
    const size_t layer_cache = (size_t)slots_ * T * KV * hs_;
    for (int l = 0; l < L; ++l) {
        const Llama::LayerViews& v = lv_[l];
        cuda::rmsnorm_forward(ln, rstd_, x, P + v.ln1w, n, C, eps, s);
        product(qkv, ln, v.qkvw, nullptr, n, C, qkv_w_);
        cuda::rope_decode(qkv, d_pos(), cos_, sin_, n, NH, KV, hs_, s);
        cuda::attention_decode_grouped(y, k_ + l * layer_cache, v_ + l * layer_cache, qkv, d_slot(), d_pos(), n, T, NH,
                                       KV, hs_, s);
        product(ln, y, v.attprojw, nullptr, n, C, C);
        cuda::residual_forward(x, x, ln, nC, s);
        cuda::rmsnorm_forward(ln, rstd_, x, P + v.ln2w, n, C, eps, s);
        product(gu_, ln, v.gateupw, nullptr, n, C, 2 * F);
        cuda::swiglu_forward(swi_, gu_, n, F, s);
        product(ln, swi_, v.fcprojw, nullptr, n, F, C);
        cuda::residual_forward(x, x, ln, nC, s);
    }
    cuda::rmsnorm_forward(ln, rstd_, x, P + lnfw_, n, C, eps, s);
    return ln;
}

} // namespace dptrain
