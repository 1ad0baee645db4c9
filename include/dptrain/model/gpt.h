// GPT-2 style transformer over the CPU ops, LM head tied to wte. Parameters grouped by layer (wte,
// wpe, h0.*, ..., lnf.*) so gradient buckets follow backward's order; activations for (max_batch, T).
// Not for: decoding (gpt_decoder.h), data, or anything MPI.
#pragma once

#include "dptrain/model/model.h"

#include <vector>

namespace dptrain {

// --recompute: attention, each layer's softmax (flash: statistics) from the kept q, k, v; block,
// all of a block but its input. The same operations on the same values: bit-identical gradients.
enum class Recompute { none, attention, block };

struct GptConfig {
    int vocab_size = 256;
    int block_size = 64;  // T: context length (and the position table's size)
    int n_layer = 4;
    int n_head = 4;
    int n_embd = 128;  // C
    // --attention flash: no T x T matrices kept; the same parameters and checkpoints either way.
    bool flash_attention = false;
    Recompute recompute = Recompute::none;  // not part of the signature: checkpoints are the same
};

// signature()'s configuration; false for any other text. flash_attention stays false.
bool parse_gpt_signature(const std::string& signature, GptConfig* cfg);

class Gpt : public Model {
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
    const GptConfig& config() const { return cfg_; }
    // Offsets of layer l's tensors in the flat parameters.
    struct LayerViews {
        size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
    };
    const std::vector<LayerViews>& layer_views() const { return lv_; }
    // Logits of the last forward: (B, T, V); a backward overwrites them with their gradient.
    const float* logits() const { return logits_.data(); }
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
