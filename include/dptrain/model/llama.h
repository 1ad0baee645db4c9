// Llama-style decoder over the CPU ops: RMSNorm, rotary positions, SwiGLU, grouped-query attention,
// no biases, head tied to wte or its own. Parameters grouped by layer (wte, h0.*, ..., lnf, lm_head)
// so gradient buckets follow backward's order; activations for (max_batch, T).
// Not for: decoding (llama_decoder.h), Hugging Face's names (io/hf_llama.h), data, or anything MPI.
#pragma once

#include "dptrain/model/gpt.h"

#include <string>
#include <vector>

namespace dptrain {

// SwiGLU's width when none is given: 8C/3 (the parameters of a 4C GELU MLP) rounded up to 64.
int llama_ffn_hidden(int n_embd);
// cfg with n_kv_head and ffn_hidden filled in (0 means the default); flash_attention and recompute kept.
GptConfig llama_resolved(const GptConfig& cfg);
// The bf16 operands' widest activation (B*T, max(F, C)) and output gradient (B*T, max(2F, QKV, C,
// V)) in values, cfg resolved; every weight besides. CudaLlama's matmuls round into the same room.
void llama_operand_sizes(const GptConfig& cfg, int max_batch, size_t* act, size_t* grad);
// The largest weight matrix in values (q/k/v, gate/up or a projection; cfg resolved): what a
// decoder with bf16 weights widens for a prompt's product.
size_t llama_widest_matrix(const GptConfig& cfg);
// The angles of position t < T for pair i < hs/2: theta^(-2i/hs), Llama 3's scaling where cfg has it.
void llama_rope_table(const GptConfig& cfg, float* cos, float* sin);
// The shortest decimal text that reads back to v ("1e-05", not "9.99999975e-06"): signatures and
// config.json carry the value a user gave.
std::string float_text(float v);
// "none" (factor 0) or "llama3:FACTOR,LOW,HIGH,ORIGINAL"; false for any other text or values that
// do not make a blend (FACTOR > 0, HIGH > LOW > 0, ORIGINAL > 0).
bool parse_rope_scaling(const std::string& text, RopeScaling* out);
std::string rope_scaling_text(const RopeScaling& r);  // parse_rope_scaling's form
// "llama V=.. T=.. L=.. H=.. KV=.. C=.. F=.. theta=.. eps=.. tied=1[ rope=llama3:f,lo,hi,orig]"'s
// configuration; false for any other text.
bool parse_llama_signature(const std::string& signature, GptConfig* cfg);

class Llama : public LanguageModel {
  public:
    // cfg.arch llama; max_batch 0 allocates no activations: layout, init, signature and FLOPs only.
    Llama(const GptConfig& cfg, int max_batch);

    const ParamLayout& layout() const override { return layout_; }
    std::string signature() const override;
    int terms_per_sample() const override { return cfg_.block_size; }
    // T * (6 * (N - untied embedding) + 12 * L * T * C), attention over the full T x T (as Gpt's).
    double flops_per_sample() const override;
    // N(0, 0.02), the residual projections / sqrt(2 L), norm weights 1; a counter-based stream per tensor.
    void init(float* params, uint64_t seed, bool (*stop)() = nullptr) const override;
    double forward(const float* params, const ModelBatch& in, long* correct) override;
    void backward(float* grads, const float* params, const ModelBatch& in, float scale, GradHook* hook) override;

    void set_precision(Precision p) override;
    void set_op_times(OpTimes* t) override { ops_ = t; }
    size_t activation_bytes() const override;
    static size_t activation_bytes(const GptConfig& cfg, int max_batch);
    size_t operand_bytes() const override { return bf_.bytes(); }
    static size_t operand_bytes(const GptConfig& cfg, int max_batch, Precision p);
    static size_t count_params(const GptConfig& cfg);
    const GptConfig& config() const override { return cfg_; }  // resolved (llama_resolved)
    // Offsets of layer l's tensors in the flat parameters.
    struct LayerViews {
        size_t ln1w, qkvw, attprojw, ln2w, gateupw, fcprojw;
    };
    const std::vector<LayerViews>& layer_views() const { return lv_; }
    size_t wte() const { return wte_; }
    size_t lnf() const { return lnfw_; }
    size_t head() const { return head_; }  // wte's offset when tied
    const float* logits() const override { return logits_.data(); }

  private:
    void buffer(const char* name, size_t n);  // llama_buffers' `name`, n values
    size_t kept(int l) const { return cfg_.recompute == Recompute::block ? 0 : (size_t)l; }
    size_t kept_att(int l) const { return cfg_.recompute == Recompute::none ? (size_t)l : 0; }
    void block_forward(const float* params, int l, int B);
    void attention(int l, float* out, float* lse, float* att, int B);
    void recompute_layer(const float* params, int l, const float* residual, int B);
    void block_backward(float* grads, const float* params, int l, const float* residual, int B);
    GptConfig cfg_;
    int max_batch_, hs_ = 0, qkv_ = 0;  // head size; the projection's width (NH + 2 KV) * hs
    ParamLayout layout_;
    size_t wte_ = 0, lnfw_ = 0, head_ = 0;
    std::vector<LayerViews> lv_;

    // Sized by llama_buffers; per layer: ln1 ... residual3 and the norms' statistics.
    std::vector<float> rope_cos_, rope_sin_, encoded_, ln1_, ln1_rstd_, qkv3_, atty_, att_, lse_, residual2_, ln2_,
        ln2_rstd_, gu_, swi_, residual3_, lnf_, lnf_rstd_, logits_, ce_stats_, losses_, scratch_, dres_, dbig_,
        dsmall_, datt_, datty_, delta_;
    std::vector<int> targets_, argmax_;
    int last_B_ = 0;
    Bf16Operands bf_;  // --precision bf16
    OpTimes* ops_ = nullptr;  // --profile-ops
};

} // namespace dptrain
