// GPT-2 style transformer over the CPU ops, LM head tied to wte. Parameters grouped by layer (wte,
// wpe, h0.*, ..., lnf.*) so gradient buckets follow backward's order; activations for (max_batch, T).
// Not for: decoding (gpt_decoder.h), data, or anything MPI.
#pragma once

#include "dptrain/model/model.h"

#include <memory>
#include <vector>

namespace dptrain {

// --recompute: attention, each layer's softmax (flash: statistics) from the kept q, k, v; block,
// all of a block but its input. The same operations on the same values: bit-identical gradients.
enum class Recompute { none, attention, block };

// The decoder's shape. gpt2: LayerNorm, learned positions, GELU MLP, biases, head tied to wte.
// llama: RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no biases (model/llama.h).
enum class DecoderArch { gpt2, llama };

// Llama 3's rotary frequency scaling ("rope_scaling" {"rope_type": "llama3"} in a Hugging Face
// config); factor 0: none.
struct RopeScaling {
    float factor = 0, low_freq_factor = 1, high_freq_factor = 4;
    int original_positions = 8192;
};

struct GptConfig {
    DecoderArch arch = DecoderArch::gpt2;
    int vocab_size = 256;
    int block_size = 64;  // T: context length (and the position table's size)
    int n_layer = 4;
    int n_head = 4;
    int n_embd = 128;  // C
    // llama only (their defaults leave a GPT as it was):
    int n_kv_head = 0;         // key/value heads, dividing n_head; 0: n_head
    int ffn_hidden = 0;        // SwiGLU's width F; 0: llama_ffn_hidden(n_embd)
    float rope_theta = 10000;  // rotary base
    float norm_eps = 1e-5f;    // RMSNorm's
    bool tie_embeddings = true;  // the head reads wte; false: a head of its own (lm_head)
    RopeScaling rope_scaling;
    // --attention flash: no T x T matrices kept; the same parameters and checkpoints either way.
    bool flash_attention = false;
    Recompute recompute = Recompute::none;  // not part of the signature: checkpoints are the same
};

// signature()'s configuration, a Gpt's or a Llama's; false for any other text. flash_attention stays false.
bool parse_gpt_signature(const std::string& signature, GptConfig* cfg);
// A decoder the trainer trains (Gpt, Llama): its configuration and the last forward's logits.
class LanguageModel : public Model {
  public:
    virtual const GptConfig& config() const = 0;
    // (B, T, V) of the last forward; a backward overwrites them with their gradient.
    virtual const float* logits() const = 0;
};

// A decoder of cfg.arch's kind (Gpt or Llama); max_batch 0: layout, init, signature and FLOPs only.
std::unique_ptr<LanguageModel> make_cpu_lm(const GptConfig& cfg, int max_batch);
// Its signature (what checkpoints must match).
std::string lm_signature(const GptConfig& cfg);
// The static sizes of cfg.arch's class (Gpt's or Llama's).
size_t lm_count_params(const GptConfig& cfg);
size_t lm_activation_bytes(const GptConfig& cfg, int max_batch);
size_t lm_operand_bytes(const GptConfig& cfg, int max_batch, Precision p);

class Gpt : public LanguageModel {
  public:
    // max_batch 0 allocates no activations: layout, init, signature and FLOPs only.
    Gpt(const GptConfig& cfg, int max_batch);

    const ParamLayout& layout() const override { return layout_; }
    // "gpt V=65 T=64 L=4 H=4 C=128"
    std::string signature() const override;
    int terms_per_sample() const override { return cfg_.block_size; }
    // T * (6 * (N - T*C) + 12 * L * T * C), attention over the full T x T (PaLM's convention).
    double flops_per_sample() const override;
    // GPT-2's: N(0, 0.02), residual projections / sqrt(2 L); a counter-based stream per tensor.
    void init(float* params, uint64_t seed, bool (*stop)() = nullptr) const override;
    // in.tokens: (B, in.stride) windows of T + 1 tokens; the loss terms are B * T next tokens.
    double forward(const float* params, const ModelBatch& in, long* correct) override;
    void backward(float* grads, const float* params, const ModelBatch& in, float scale, GradHook* hook) override;

    void set_precision(Precision p) override;
    void set_op_times(OpTimes* t) override { ops_ = t; }
    // For max_batch windows; the static forms without building one (the same sums: tested).
    size_t activation_bytes() const override;
    static size_t activation_bytes(const GptConfig& cfg, int max_batch);
    size_t operand_bytes() const override { return bf_.bytes(); }
    static size_t operand_bytes(const GptConfig& cfg, int max_batch, Precision p);
    static size_t count_params(const GptConfig& cfg);
    const GptConfig& config() const override { return cfg_; }
    // Offsets of layer l's tensors in the flat parameters.
    struct LayerViews {
        size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
    };
    const std::vector<LayerViews>& layer_views() const { return lv_; }
    const float* logits() const override { return logits_.data(); }
    // Layer l's fc output (B, T, 4C) and attention output (B, T, C) of the last forward, as kept
    // (bf16: rounded); with --recompute block the last layer's only.
    const float* fc_output(int l) const {
        return fch_.data() + kept(l) * 4 * max_batch_ * cfg_.block_size * cfg_.n_embd;
    }
    const float* attention_output(int l) const {
        return atty_.data() + kept(l) * max_batch_ * cfg_.block_size * cfg_.n_embd;
    }

  private:
    void buffer(const char* name, size_t n);  // gpt_buffers' `name`, n values
    // Layer l's slot: its own, or the one all share of what --recompute recomputes.
    size_t kept(int l) const { return cfg_.recompute == Recompute::block ? 0 : (size_t)l; }
    size_t kept_att(int l) const { return cfg_.recompute == Recompute::none ? (size_t)l : 0; }
    void block_forward(const float* params, int l, const float* residual, int B);
    void recompute_layer(const float* params, int l, const float* residual, int B);
    GptConfig cfg_;
    int max_batch_;
    ParamLayout layout_;
    size_t wte_, wpe_, lnfw_, lnfb_;
    std::vector<LayerViews> lv_;

    // Sized by gpt_buffers; per layer: ln1 ... residual3 and the LayerNorm statistics.
    std::vector<float> encoded_, ln1_, ln1_mean_, ln1_rstd_, qkv_, atty_, att_, residual2_, ln2_, ln2_mean_,
        ln2_rstd_, fch_, fch_gelu_, residual3_, lnf_, lnf_mean_, lnf_rstd_, logits_, losses_, scratch_, lse_,
        ce_stats_;  // the loss's max and 1 / sum per row
    std::vector<int> targets_, argmax_;
    int last_B_ = 0;
    // Backward scratch, reused by every layer.
    std::vector<float> dres_, dbig_, dsmall_, datt_, datty_, delta_;
    Bf16Operands bf_;  // --precision bf16
    OpTimes* ops_ = nullptr;  // --profile-ops
    void mm_forward(const float* params, float* out, const float* inp, size_t w, const float* bias, int BT, int C,
                    int OC, bool out16 = false);
    void mm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* params, size_t w, int BT, int C, int OC, bool dinp16 = false);
};

} // namespace dptrain
