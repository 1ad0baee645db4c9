// GPT-2 style decoder-only transformer over the backend ops: token + position embeddings, L
// pre-LayerNorm blocks (causal multi-head self-attention, residual, MLP with GELU at 4x,
// residual), a final LayerNorm, and an LM head tied to the token embedding.
// Parameters live in one flat buffer, grouped by layer (wte, wpe, h0.*, h1.*, ..., lnf.*), so
// gradient buckets follow backward's order: lnf, then the last layer down to the first, then
// the embeddings. Activations are allocated once for (max_batch, T).
// Not for: decoding (gpt_decoder.h), data, or anything MPI.
#pragma once

#include "dptrain/model/model.h"

#include <vector>

namespace dptrain {

// --recompute: which activations backward recomputes instead of keeping from the forward.
// attention: each layer's T x T softmax (or flash attention's statistics), recomputed from the kept
// q, k, v; block: everything of a block but its input (the residual stream), the block's forward run
// again before its backward. The same operations on the same values: gradients are bit-identical.
enum class Recompute { none, attention, block };

struct GptConfig {
    int vocab_size = 256;
    int block_size = 64;  // T: context length (and the position table's size)
    int n_layer = 4;
    int n_head = 4;
    int n_embd = 128;  // C
    // --attention flash: attention in key tiles with a running softmax (flash_attention_forward),
    // bf16 operands, no T x T matrices kept; the same parameters and checkpoints either way.
    bool flash_attention = false;
    Recompute recompute = Recompute::none;  // not part of the signature: checkpoints are the same
};

// The configuration signature() names ("gpt V=65 T=64 L=4 H=4 C=128"); false for any other text
// (an MLP's signature). flash_attention is not part of it and stays false.
bool parse_gpt_signature(const std::string& signature, GptConfig* cfg);

class Gpt : public Model {
  public:
    // max_batch 0 allocates no activations: layout, init, signature and FLOPs only.
    Gpt(const GptConfig& cfg, int max_batch);

    const ParamLayout& layout() const override { return layout_; }
    // "gpt V=65 T=64 L=4 H=4 C=128"
    std::string signature() const override;
    int terms_per_sample() const override { return cfg_.block_size; }
    // Per window of T tokens: T * (6 * (N - T*C) + 12 * L * T * C), N = all parameters; the
    // position table costs nothing, the tied LM head counts once (through wte), attention counts
    // Q.K^T and att.V over the full T x T (the PaLM convention, although causal work is half).
    double flops_per_sample() const override;
    // GPT-2: weights N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm
    // weights 1. Each tensor draws from its own counter-based stream.
    void init(float* params, uint64_t seed) const override;
    // in.tokens: (B, in.stride) windows of T + 1 tokens; the loss terms are B * T next tokens.
    double forward(const float* params, const ModelBatch& in, long* correct) override;
    void backward(float* grads, const float* params, const ModelBatch& in, float scale, GradHook* hook) override;

    void set_precision(Precision p) override;
    void set_op_times(OpTimes* t) override { ops_ = t; }
    // Bytes of the activations this model keeps for backward (and backward's scratch), as
    // allocated for max_batch windows; of cfg's, without building one (the same sum: tested).
    size_t activation_bytes() const override;
    static size_t activation_bytes(const GptConfig& cfg, int max_batch);
    // The bf16 operands (set_precision's), and the parameter count, likewise without building one.
    size_t operand_bytes() const override { return bf_.bytes(); }
    static size_t operand_bytes(const GptConfig& cfg, int max_batch, Precision p);
    static size_t count_params(const GptConfig& cfg);
    const GptConfig& config() const { return cfg_; }
    // Where layer l's tensors start in the flat parameters (offsets into layout()), for every l.
    struct LayerViews {
        size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
    };
    const std::vector<LayerViews>& layer_views() const { return lv_; }
    // Logits of the last forward: (B, T, V); a backward overwrites them with their gradient.
    const float* logits() const { return logits_.data(); }
    // Layer l's fc output (GELU's input) of the last forward, (B, T, 4C), as kept (bf16: rounded).
    // With --recompute block only the last layer's is kept.
    const float* fc_output(int l) const {
        return fch_.data() + kept(l) * 4 * max_batch_ * cfg_.block_size * cfg_.n_embd;
    }
    // Layer l's attention output of the last forward, (B, T, C), as kept (bf16 with flash
    // attention: rounded). With --recompute block only the last layer's is kept.
    const float* attention_output(int l) const {
        return atty_.data() + kept(l) * max_batch_ * cfg_.block_size * cfg_.n_embd;
    }

  private:
    void buffer(const char* name, size_t n);  // gpt_buffers' buffer `name`, sized to n values
    // Where layer l's activations live: their own slot, or with --recompute block the one slot all
    // layers share (and with attention or block recomputation, the one slot of the softmax).
    size_t kept(int l) const { return cfg_.recompute == Recompute::block ? 0 : (size_t)l; }
    size_t kept_att(int l) const { return cfg_.recompute == Recompute::none ? (size_t)l : 0; }
    // Layer l's forward from its ln1 output to GELU's (into kept(l)), its residual input given.
    void block_forward(const float* params, int l, const float* residual, int B);
    // --recompute: what backward needs of layer l that the forward did not keep.
    void recompute_layer(const float* params, int l, const float* residual, int B);
    GptConfig cfg_;
    int max_batch_;
    ParamLayout layout_;
    size_t wte_, wpe_, lnfw_, lnfb_;
    std::vector<LayerViews> lv_;

    // Activations, allocated once from gpt_buffers (which gives their sizes). Per layer (index l):
    // ln1, qkv, atty, att (or, with flash attention, lse), residual2, ln2, fch, fch_gelu, residual3
    // and the LayerNorm statistics.
    std::vector<float> encoded_, ln1_, ln1_mean_, ln1_rstd_, qkv_, atty_, att_, residual2_, ln2_, ln2_mean_,
        ln2_rstd_, fch_, fch_gelu_, residual3_, lnf_, lnf_mean_, lnf_rstd_, logits_, losses_, scratch_, lse_,
        ce_stats_;  // the loss's max and 1 / sum per row: backward writes dlogits over logits_
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
