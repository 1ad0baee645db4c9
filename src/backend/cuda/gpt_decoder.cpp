// CudaGptDecoder: GptDecoder's ops (src/model/gpt_decoder.cpp) in the same order on the device.
// Not for: training (gpt.cpp), the parts every GPU decoder shares (decoder.cpp).
#include "dptrain/backend/cuda/gpt_decoder.h"

#include "check.h"
#include "dptrain/core/error.h"

namespace dptrain {

namespace {
constexpr double kGiB = 1073741824.0;

// GptConfig with training's choices cleared (decoding has its own attention), checked (Gpt's own
// messages) before anything is allocated.
GptConfig decoding(GptConfig cfg) {
    cfg.flash_attention = false;
    cfg.recompute = Recompute::none;
    (void)Gpt(cfg, 0);
    return cfg;
}
}

CudaGptDecoder::CudaGptDecoder(const GptConfig& cfg, int device, Precision weights)
    : CudaDecoder("GPT", Gpt::count_params(decoding(cfg)), 4 * (size_t)cfg.n_embd * cfg.n_embd, device, weights,
                  cfg.block_size, cfg.n_embd, cfg.vocab_size),
      cfg_(decoding(cfg)) {
    const Gpt layout(cfg_, 0);
    wte_ = layout.layout().find("wte").offset;
    wpe_ = layout.layout().find("wpe").offset;
    lnfw_ = layout.layout().find("lnf.weight").offset;
    lnfb_ = layout.layout().find("lnf.bias").offset;
    lv_ = layout.layer_views();
    set_head(wte_);  // tied
}

void CudaGptDecoder::reserve(int slots, int max_rows) {
    const size_t T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, R = max_rows;
    // The cache grows with the sequences served at once: a failed allocation names it.
    const std::string need = strfmt("decoding %d sequence%s at once on the GPU needs a key/value cache of %.2f GiB "
                                    "and room for %zu rows, and an allocation failed; decode on the CPU (--device "
                                    "cpu), or serve fewer sequences at once (serve's --max-batch)",
                                    slots, slots == 1 ? "" : "s", 8.0 * L * slots * T * C / kGiB, R);
    begin_reserve(slots, max_rows, need);
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
    } catch (...) {
        free_cache();
        throw;
    }
    // Zeroed as the CPU twin's, on the decoder's stream (it does not wait for the legacy default one).
    cudaStream_t s = ctx_->stream();
    CUDA_CHECK(cudaMemsetAsync(k_, 0, L * slots * T * C * sizeof(float), s));
    CUDA_CHECK(cudaMemsetAsync(v_, 0, L * slots * T * C * sizeof(float), s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    end_reserve(slots, max_rows);
}

const float* CudaGptDecoder::layers(int n) {
    const int T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head;
    cudaStream_t s = ctx_->stream();
    const float* P = params_;
    float *x = x_, *ln = ln_, *y = y_, *fc = fc_, *qkv = qkv_;
    const long nC = (long)n * C;
    cuda::encoder_decode(x, d_tok(), d_pos(), P + wte_, P + wpe_, n, C, s);
    const size_t layer_cache = (size_t)slots_ * T * C;
    for (int l = 0; l < L; ++l) {
        const Gpt::LayerViews& v = lv_[l];
        cuda::layernorm_forward(ln, mean_, rstd_, x, P + v.ln1w, P + v.ln1b, n, C, s);
        product(qkv, ln, v.qkvw, P + v.qkvb, n, C, 3 * C);
        cuda::attention_decode(y, k_ + l * layer_cache, v_ + l * layer_cache, qkv, d_slot(), d_pos(), n, T, C, NH, s);
        product(ln, y, v.attprojw, P + v.attprojb, n, C, C);
        cuda::residual_forward(x, x, ln, nC, s);
        cuda::layernorm_forward(ln, mean_, rstd_, x, P + v.ln2w, P + v.ln2b, n, C, s);
        product(fc, ln, v.fcw, P + v.fcb, n, C, 4 * C);
        cuda::gelu_forward(fc, fc, 4 * nC, s);
        product(ln, fc, v.fcprojw, P + v.fcprojb, n, 4 * C, C);
        cuda::residual_forward(x, x, ln, nC, s);
    }
    cuda::layernorm_forward(ln, mean_, rstd_, x, P + lnfw_, P + lnfb_, n, C, s);
    return ln;
}

} // namespace dptrain
