// Llama forward and backward over the CPU ops, in Gpt's structure (gpt.cpp): one flat buffer,
// each residual add fused with the norm after it, attention through the GPT ops on q, k, v
// rotated and repeated to every query head (rope_qkv_forward). Not for: decoding (llama_decoder.cpp).
#include "dptrain/model/llama.h"

#include "dptrain/model/gpt_buffers.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/error.h"
#include "dptrain/core/rng.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace dptrain {

void llama_rope_table(const GptConfig& cfg, float* cos, float* sin) {
    const int T = cfg.block_size, hs = cfg.n_embd / cfg.n_head, half = hs / 2;
    const RopeScaling& s = cfg.rope_scaling;
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < half; ++i) {
        // Hugging Face computes the inverse frequency in fp32; the angle t * inv in fp32 too.
        float inv = (float)(1.0 / std::pow((double)cfg.rope_theta, 2.0 * i / hs));
        if (s.factor > 0) {  // Llama 3: long wavelengths slowed by factor, short kept, a blend between
            const double wavelen = 2 * pi / inv, low = s.original_positions / s.low_freq_factor,
                         high = s.original_positions / s.high_freq_factor;
            if (wavelen > low) inv = inv / s.factor;
            else if (wavelen >= high) {
                const double smooth = (s.original_positions / wavelen - s.low_freq_factor) /
                                      (s.high_freq_factor - s.low_freq_factor);
                inv = (float)((1 - smooth) * inv / s.factor + smooth * inv);
            }
        }
        for (int t = 0; t < T; ++t) {
            const float angle = (float)t * inv;
            cos[(size_t)t * half + i] = std::cos(angle);
            sin[(size_t)t * half + i] = std::sin(angle);
        }
    }
}

// What a Llama of cfg (resolved) needs; UserError naming the option otherwise.
static void check_config(const GptConfig& cfg) {
    const int V = cfg.vocab_size, T = cfg.block_size, C = cfg.n_embd, L = cfg.n_layer, NH = cfg.n_head;
    const int KV = cfg.n_kv_head, F = cfg.ffn_hidden;
    if (cfg.arch != DecoderArch::llama) throw std::logic_error("Llama: a configuration of another kind");
    if (V <= 0 || T <= 0 || C <= 0 || L <= 0 || NH <= 0 || C % NH != 0)
        throw UserError(strfmt("Llama: n_embd %d must be a positive multiple of n_head %d, and vocab, block size and "
                               "layers positive",
                               C, NH));
    const int hs = C / NH;
    if (KV <= 0 || NH % KV != 0)
        throw UserError(strfmt("--n-kv-head %d must divide --n-head %d (each key/value head serves a group of query "
                               "heads); use a divisor of %d, or 0 for one per query head",
                               KV, NH, NH));
    if (hs % 2 != 0 || hs > 256)
        throw UserError(strfmt("--model llama needs an even head size of at most 256 (rotary pairs), and n_embd %d / "
                               "n_head %d is %d; change --n-head",
                               C, NH, hs));
    if (F <= 0) throw UserError(strfmt("--ffn-hidden %d must be positive (0: 8 * n_embd / 3 rounded up to 64)", F));
    if (!(cfg.rope_theta > 0) || !(cfg.norm_eps > 0))
        throw UserError(strfmt("--rope-theta %g and --norm-eps %g must be positive", cfg.rope_theta, cfg.norm_eps));
    if (cfg.flash_attention && !cpu::flash_attention_supported(C, NH))
        throw UserError(strfmt("--attention flash needs a head size (n_embd / n_head) of 16, 32, 64 or 128, and %d / "
                               "%d is %d; change --n-head or use --attention matmul",
                               C, NH, hs));
}

Llama::Llama(const GptConfig& cfg_in, int max_batch) : cfg_(llama_resolved(cfg_in)), max_batch_(max_batch) {
    check_config(cfg_);
    const int V = cfg_.vocab_size, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head, KV = cfg_.n_kv_head;
    const int F = cfg_.ffn_hidden;
    hs_ = C / NH;
    qkv_ = (NH + 2 * KV) * hs_;
    auto add = [&](const std::string& name, std::vector<int> shape, bool decay) {
        layout_.add(name, std::move(shape), decay);
        return layout_.views.back().offset;
    };
    wte_ = add("wte", {V, C}, true);  // (V, C), also the head when tied
    for (int l = 0; l < L; ++l) {
        const std::string p = "h" + std::to_string(l) + ".";
        LayerViews v;
        v.ln1w = add(p + "ln1.weight", {C}, false);
        v.qkvw = add(p + "attn.qkv.weight", {qkv_, C}, true);    // ((NH + 2 KV) hs, C): q, k, v
        v.attprojw = add(p + "attn.proj.weight", {C, C}, true);  // (C, C)
        v.ln2w = add(p + "ln2.weight", {C}, false);
        v.gateupw = add(p + "mlp.gate_up.weight", {2 * F, C}, true);  // (2F, C): gate, up
        v.fcprojw = add(p + "mlp.proj.weight", {C, F}, true);         // (C, F)
        lv_.push_back(v);
    }
    lnfw_ = add("lnf.weight", {C}, false);
    head_ = cfg_.tie_embeddings ? wte_ : add("lm_head.weight", {V, C}, true);  // last: its gradient is first

    if (max_batch < 0) throw std::invalid_argument("Llama: negative max_batch");
    for (const GptBuffer& b : llama_buffers(cfg_, max_batch)) buffer(b.name, b.count);
    if (max_batch > 0) llama_rope_table(cfg_, rope_cos_.data(), rope_sin_.data());
}

void Llama::buffer(const char* name, size_t n) {
    using F = std::vector<float> Llama::*;
    static const std::pair<const char*, F> floats[] = {
        {"rope_cos", &Llama::rope_cos_}, {"rope_sin", &Llama::rope_sin_}, {"encoded", &Llama::encoded_},
        {"ln1", &Llama::ln1_}, {"ln1_rstd", &Llama::ln1_rstd_}, {"qkv3", &Llama::qkv3_}, {"atty", &Llama::atty_},
        {"att", &Llama::att_}, {"lse", &Llama::lse_}, {"residual2", &Llama::residual2_}, {"ln2", &Llama::ln2_},
        {"ln2_rstd", &Llama::ln2_rstd_}, {"gu", &Llama::gu_}, {"swi", &Llama::swi_},
        {"residual3", &Llama::residual3_}, {"lnf", &Llama::lnf_}, {"lnf_rstd", &Llama::lnf_rstd_},
        {"logits", &Llama::logits_}, {"ce_stats", &Llama::ce_stats_}, {"losses", &Llama::losses_},
        {"scratch", &Llama::scratch_}, {"dres", &Llama::dres_}, {"dbig", &Llama::dbig_}, {"dsmall", &Llama::dsmall_},
        {"datt", &Llama::datt_}, {"datty", &Llama::datty_}, {"delta", &Llama::delta_}};
    for (const auto& [field_name, field] : floats)
        if (std::strcmp(field_name, name) == 0) return (this->*field).resize(n);
    if (std::strcmp(name, "targets") == 0) return targets_.resize(n);
    if (std::strcmp(name, "argmax") == 0) return argmax_.resize(n);
    throw std::logic_error(std::string("Llama: no field for buffer ") + name);
}

size_t Llama::activation_bytes() const {
    if (max_batch_ == 0) return 0;
    return activation_bytes(cfg_, max_batch_);
}

size_t Llama::activation_bytes(const GptConfig& cfg, int max_batch) {
    return buffer_bytes(llama_buffers(llama_resolved(cfg), max_batch));
}

size_t Llama::count_params(const GptConfig& cfg_in) {
    const GptConfig cfg = llama_resolved(cfg_in);
    const size_t V = cfg.vocab_size, C = cfg.n_embd, L = cfg.n_layer, F = cfg.ffn_hidden;
    const size_t qkv = (size_t)(cfg.n_head + 2 * cfg.n_kv_head) * (C / cfg.n_head);
    // wte; per layer two norms (2C), q/k/v (qkv C), proj (C^2), gate/up (2FC), down (CF); lnf; lm_head.
    return V * C + L * (2 * C + qkv * C + C * C + 3 * F * C) + C + (cfg.tie_embeddings ? 0 : V * C);
}

size_t llama_widest_matrix(const GptConfig& c) {
    const size_t C = c.n_embd, F = c.ffn_hidden, QKV = (size_t)(c.n_head + 2 * c.n_kv_head) * (C / c.n_head);
    return std::max({QKV * C, 2 * F * C, C * C});
}

void llama_operand_sizes(const GptConfig& cfg, int max_batch, size_t* act, size_t* grad) {
    const size_t BT = (size_t)max_batch * cfg.block_size, C = cfg.n_embd, F = cfg.ffn_hidden;
    const size_t qkv = (size_t)(cfg.n_head + 2 * cfg.n_kv_head) * (C / cfg.n_head);
    *act = BT * std::max(C, F);
    *grad = BT * std::max({2 * F, qkv, C, (size_t)cfg.vocab_size});
}

size_t Llama::operand_bytes(const GptConfig& cfg, int max_batch, Precision p) {
    size_t act = 0, grad = 0;
    llama_operand_sizes(llama_resolved(cfg), max_batch, &act, &grad);
    return Bf16Operands::bytes_for(p, count_params(cfg), act, grad);
}

void Llama::set_precision(Precision p) {
    last_B_ = -1;  // a backward now would take other operands than its forward: it refuses
    size_t act = 0, grad = 0;
    llama_operand_sizes(cfg_, max_batch_, &act, &grad);
    bf_.set(p, layout_.total, act, grad);
}

std::string Llama::signature() const {
    std::string s = strfmt("llama V=%d T=%d L=%d H=%d KV=%d C=%d F=%d theta=%s eps=%s tied=%d", cfg_.vocab_size,
                           cfg_.block_size, cfg_.n_layer, cfg_.n_head, cfg_.n_kv_head, cfg_.n_embd, cfg_.ffn_hidden,
                           float_text(cfg_.rope_theta).c_str(), float_text(cfg_.norm_eps).c_str(),
                           cfg_.tie_embeddings ? 1 : 0);
    const RopeScaling& r = cfg_.rope_scaling;
    if (r.factor > 0) s += " rope=" + rope_scaling_text(r);
    return s;
}

double Llama::flops_per_sample() const {
    const double T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer;
    // The embedding is a lookup: no products, unless the head shares it.
    const double n = (double)layout_.total - (cfg_.tie_embeddings ? 0.0 : (double)cfg_.vocab_size * C);
    return T * (6.0 * n + 12.0 * L * T * C);
}

void Llama::init(float* params, uint64_t seed, bool (*stop)()) const {
    const float residual_std = 0.02f / std::sqrt(2.0f * cfg_.n_layer);
    for (size_t i = 0; i < layout_.views.size(); ++i) {
        const ParamView& v = layout_.views[i];
        float* p = params + v.offset;
        if (v.shape.size() == 1) {  // the norms' weights
            std::fill(p, p + v.size, 1.0f);
            continue;
        }
        const bool residual = v.name.find("attn.proj.weight") != std::string::npos ||
                              v.name.find("mlp.proj.weight") != std::string::npos;
        if (!fill_normal(p, v.size, residual ? residual_std : 0.02f, stream_seed(seed, 3000 + i), stop)) return;
    }
}

double Llama::forward(const float* params, const ModelBatch& in, long* correct) {
    const int B = in.B, T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, V = cfg_.vocab_size;
    const float eps = cfg_.norm_eps;
    if (B > max_batch_) throw std::invalid_argument("Llama::forward: batch larger than max_batch");
    if (B == 0) {
        last_B_ = 0;
        return 0.0;
    }
    const long BT = (long)B * T;
    const size_t sBT = (size_t)max_batch_ * T, sBTC = sBT * C;
    lm_targets(in, T, V, targets_.data());
    if (bf_.on()) timed(ops_, OpKind::matmul, [&] { bf_.round_weights(params); });
    timed(ops_, OpKind::encoder,
          [&] { cpu::encoder_forward(encoded_.data(), in.tokens, in.stride, params + wte_, nullptr, B, T, C); });
    timed(ops_, OpKind::layernorm, [&] {  // layer 0's norm; later ones run with the residual add before them
        cpu::rmsnorm_forward(ln1_.data(), ln1_rstd_.data(), encoded_.data(), params + lv_[0].ln1w, BT, C, eps);
    });
    for (int l = 0; l < L; ++l) {
        const size_t k = kept(l), next = kept(l + 1);
        block_forward(params, l, B);
        lm_matmul_forward(bf_, ops_, params, scratch_.data(), swi_.data() + k * cfg_.ffn_hidden * sBT,
                          lv_[l].fcprojw, nullptr, (int)BT, cfg_.ffn_hidden, C);
        float* res3 = residual3_.data() + l * sBTC;
        const bool last = l + 1 == L;
        timed(ops_, OpKind::layernorm, [&] {
            cpu::residual_rmsnorm_forward(res3, last ? lnf_.data() : ln1_.data() + next * sBTC,
                                          last ? lnf_rstd_.data() : ln1_rstd_.data() + next * sBT,
                                          residual2_.data() + k * sBTC, scratch_.data(),
                                          params + (last ? lnfw_ : lv_[l + 1].ln1w), BT, C, eps);
        });
    }
    lm_matmul_forward(bf_, ops_, params, logits_.data(), lnf_.data(), head_, nullptr, (int)BT, C, V, true);
    last_B_ = B;
    return lm_loss(ops_, losses_.data(), ce_stats_.data(), argmax_.data(), logits_.data(), targets_.data(), BT, V,
                   correct);
}

// Causal attention of layer l's kept q, k, v into out; flash keeps lse, else att the softmax.
void Llama::attention(int l, float* out, float* lse, float* att, int B) {
    const int T = cfg_.block_size, C = cfg_.n_embd, NH = cfg_.n_head;
    const float* qkv = qkv3_.data() + kept(l) * 3 * (size_t)max_batch_ * T * C;
    timed(ops_, OpKind::attention, [&] {
        if (!cfg_.flash_attention) return cpu::attention_forward(out, att, qkv, B, T, C, NH, bf_.on());
        cpu::flash_attention_forward(out, lse, qkv, B, T, C, NH);
        if (bf_.on()) cpu::round_bf16(out, out, (long)B * T * C);  // for the projection and backward's delta
    });
}

// From ln1's output (kept(l)) to SwiGLU's; the residual stream's input is residual3 of l - 1.
void Llama::block_forward(const float* params, int l, int B) {
    const int T = cfg_.block_size, C = cfg_.n_embd, NH = cfg_.n_head, F = cfg_.ffn_hidden;
    const long BT = (long)B * T;
    const size_t sBT = (size_t)max_batch_ * T, sBTC = sBT * C;
    const LayerViews& v = lv_[l];
    const size_t k = kept(l), a = kept_att(l);
    const float* residual = l == 0 ? encoded_.data() : residual3_.data() + (l - 1) * sBTC;
    float* ln2 = ln2_.data() + k * sBTC;
    float* gu = gu_.data() + k * 2 * F * sBT;
    lm_matmul_forward(bf_, ops_, params, scratch_.data(), ln1_.data() + k * sBTC, v.qkvw, nullptr, (int)BT, C, qkv_);
    timed(ops_, OpKind::attention, [&] {
        cpu::rope_qkv_forward(qkv3_.data() + k * 3 * sBTC, scratch_.data(), rope_cos_.data(), rope_sin_.data(), B, T,
                              NH, cfg_.n_kv_head, hs_);
    });
    float* atty = atty_.data() + k * sBTC;
    attention(l, atty, lse_.data() + a * (size_t)max_batch_ * NH * T, att_.data() + a * (size_t)max_batch_ * NH * T * T,
              B);
    lm_matmul_forward(bf_, ops_, params, scratch_.data(), atty, v.attprojw, nullptr, (int)BT, C, C);
    timed(ops_, OpKind::layernorm, [&] {
        cpu::residual_rmsnorm_forward(residual2_.data() + k * sBTC, ln2, ln2_rstd_.data() + k * sBT, residual,
                                      scratch_.data(), params + v.ln2w, BT, C, cfg_.norm_eps);
    });
    // SwiGLU of the fp32 gate and up, which bf16 then keeps rounded for backward (as Gpt's GELU input).
    lm_matmul_forward(bf_, ops_, params, gu, ln2, v.gateupw, nullptr, (int)BT, C, 2 * F);
    timed(ops_, OpKind::activation, [&] {
        cpu::swiglu_forward(swi_.data() + k * F * sBT, gu, BT, F);
        if (bf_.on()) cpu::round_bf16(gu, gu, 2L * F * BT);
    });
}

// block: everything from the kept input, ln1 included. attention: the softmax (flash: lse) again,
// the output into scratch so the kept one stays as the projection saw it.
void Llama::recompute_layer(const float* params, int l, const float* residual, int B) {
    const long BT = (long)B * cfg_.block_size;
    if (cfg_.recompute == Recompute::block) {
        timed(ops_, OpKind::layernorm, [&] {
            cpu::rmsnorm_forward(ln1_.data(), ln1_rstd_.data(), residual, params + lv_[l].ln1w, BT, cfg_.n_embd,
                                 cfg_.norm_eps);
        });
        block_forward(params, l, B);
    } else if (cfg_.recompute == Recompute::attention) {
        attention(l, scratch_.data(), lse_.data(), att_.data(), B);
    }
}

// dres_ holds d residual3 of layer l on entry, d residual3 of l - 1 (its input) on return.
void Llama::block_backward(float* grads, const float* params, int l, const float* residual, int B) {
    const int T = cfg_.block_size, C = cfg_.n_embd, NH = cfg_.n_head, F = cfg_.ffn_hidden;
    const long BT = (long)B * T;
    const size_t sBT = (size_t)max_batch_ * T, sBTC = sBT * C;
    const size_t sATT = (size_t)max_batch_ * NH * T * T, sSTAT = (size_t)max_batch_ * NH * T;
    const LayerViews& v = lv_[l];
    if (cfg_.recompute == Recompute::block) recompute_layer(params, l, residual, B);
    const size_t k = kept(l), a = kept_att(l);
    const float* gu = gu_.data() + k * 2 * F * sBT;
    float *dres = dres_.data(), *dswi = dsmall_.data(), *dgu = dbig_.data(), *dln = dsmall_.data();
    lm_matmul_backward(bf_, ops_, dswi, grads + v.fcprojw, nullptr, dres, swi_.data() + k * F * sBT, params,
                       v.fcprojw, (int)BT, F, C);
    timed(ops_, OpKind::activation, [&] { cpu::swiglu_backward(dgu, gu, dswi, BT, F); });
    lm_matmul_backward(bf_, ops_, dln, grads + v.gateupw, nullptr, dgu, ln2_.data() + k * sBTC, params, v.gateupw,
                       (int)BT, C, 2 * F, true);
    timed(ops_, OpKind::layernorm, [&] {
        cpu::rmsnorm_backward(dres, grads + v.ln2w, dln, residual2_.data() + k * sBTC, params + v.ln2w,
                              ln2_rstd_.data() + k * sBT, BT, C);
    });
    const float* atty = atty_.data() + k * sBTC;
    lm_matmul_backward(bf_, ops_, datty_.data(), grads + v.attprojw, nullptr, dres, atty, params, v.attprojw,
                       (int)BT, C, C, cfg_.flash_attention);
    if (cfg_.recompute == Recompute::attention) recompute_layer(params, l, residual, B);
    const float* qkv3 = qkv3_.data() + k * 3 * sBTC;
    float* dqkv3 = dbig_.data();  // d gate/up is done with
    timed(ops_, OpKind::attention, [&] {
        if (cfg_.flash_attention)
            cpu::flash_attention_backward(dqkv3, delta_.data(), datty_.data(), qkv3, atty, lse_.data() + a * sSTAT, B,
                                          T, C, NH);
        else
            cpu::attention_backward(dqkv3, datt_.data(), datty_.data(), qkv3, att_.data() + a * sATT, B, T, C, NH,
                                    bf_.on());
        cpu::rope_qkv_backward(scratch_.data(), dqkv3, rope_cos_.data(), rope_sin_.data(), B, T, NH, cfg_.n_kv_head,
                               hs_);
    });
    lm_matmul_backward(bf_, ops_, dln, grads + v.qkvw, nullptr, scratch_.data(), ln1_.data() + k * sBTC, params,
                       v.qkvw, (int)BT, C, qkv_, true);
    timed(ops_, OpKind::layernorm, [&] {
        cpu::rmsnorm_backward(dres, grads + v.ln1w, dln, residual, params + v.ln1w, ln1_rstd_.data() + k * sBT, BT,
                              C);
    });
}

void Llama::backward(float* grads, const float* params, const ModelBatch& in, float scale, GradHook* hook) {
    const int B = in.B, T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, V = cfg_.vocab_size;
    if (B != last_B_) throw std::logic_error("Llama::backward without the matching forward");
    if (B == 0) {
        if (hook) hook->grads_ready_from(0);
        return;
    }
    const long BT = (long)B * T;
    const size_t sBTC = (size_t)max_batch_ * T * C;
    float* dlogits = logits_.data();  // in place: each element reads its own logit first
    timed(ops_, OpKind::crossentropy, [&] {
        cpu::softmax_crossentropy_backward(dlogits, logits_.data(), ce_stats_.data(), targets_.data(), scale, (int)BT, V);
    });
    lm_matmul_backward(bf_, ops_, dsmall_.data(), grads + head_, nullptr, dlogits, lnf_.data(), params, head_, (int)BT,
                       C, V, true);
    timed(ops_, OpKind::other, [&] { std::memset(dres_.data(), 0, (size_t)BT * C * sizeof(float)); });
    timed(ops_, OpKind::layernorm, [&] {
        cpu::rmsnorm_backward(dres_.data(), grads + lnfw_, dsmall_.data(), residual3_.data() + (L - 1) * sBTC,
                              params + lnfw_, lnf_rstd_.data(), BT, C);
    });
    if (hook) hook->grads_ready_from(lnfw_);  // and lm_head's, after it
    for (int l = L - 1; l >= 0; --l) {
        const float* residual = l == 0 ? encoded_.data() : residual3_.data() + (l - 1) * sBTC;
        block_backward(grads, params, l, residual, B);
        if (hook) hook->grads_ready_from(lv_[l].ln1w);
    }
    timed(ops_, OpKind::encoder,
          [&] { cpu::encoder_backward(grads + wte_, nullptr, dres_.data(), in.tokens, in.stride, B, T, C); });
    if (hook) hook->grads_ready_from(0);
}

} // namespace dptrain
