// GPT forward and backward over the CPU backend ops (llm.c's structure, one flat buffer).
// Not for: incremental decoding (gpt_decoder.cpp).
#include "dptrain/model/gpt.h"

#include "dptrain/model/gpt_buffers.h"
#include "dptrain/model/llama.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/error.h"
#include "dptrain/core/rng.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace dptrain {

Gpt::Gpt(const GptConfig& cfg, int max_batch) : cfg_(cfg), max_batch_(max_batch) {
    if (cfg.arch != DecoderArch::gpt2) throw std::logic_error("Gpt: a configuration of another kind (make_cpu_lm)");
    const int V = cfg.vocab_size, T = cfg.block_size, C = cfg.n_embd, L = cfg.n_layer, NH = cfg.n_head;
    if (V <= 0 || T <= 0 || C <= 0 || L <= 0 || NH <= 0 || C % NH != 0)
        throw UserError(strfmt("GPT: n_embd %d must be a positive multiple of n_head %d, and vocab, block size and "
                               "layers positive",
                               C, NH));
    if (cfg.flash_attention && !cpu::flash_attention_supported(C, NH))
        throw UserError(strfmt("--attention flash needs a head size (n_embd / n_head) of 16, 32, 64 or 128, and %d / "
                               "%d is %d; change --n-head or use --attention matmul",
                               C, NH, C / NH));
    auto add = [&](const std::string& name, std::vector<int> shape, bool decay) {
        layout_.add(name, std::move(shape), decay);
        return layout_.views.back().offset;
    };
    wte_ = add("wte", {V, C}, true);  // (V, C), also the LM head
    wpe_ = add("wpe", {T, C}, true);  // (T, C)
    for (int l = 0; l < L; ++l) {
        std::string p = "h" + std::to_string(l) + ".";
        LayerViews v;
        v.ln1w = add(p + "ln1.weight", {C}, false);
        v.ln1b = add(p + "ln1.bias", {C}, false);
        v.qkvw = add(p + "attn.qkv.weight", {3 * C, C}, true);  // (3C, C)
        v.qkvb = add(p + "attn.qkv.bias", {3 * C}, false);
        v.attprojw = add(p + "attn.proj.weight", {C, C}, true);  // (C, C)
        v.attprojb = add(p + "attn.proj.bias", {C}, false);
        v.ln2w = add(p + "ln2.weight", {C}, false);
        v.ln2b = add(p + "ln2.bias", {C}, false);
        v.fcw = add(p + "mlp.fc.weight", {4 * C, C}, true);  // (4C, C)
        v.fcb = add(p + "mlp.fc.bias", {4 * C}, false);
        v.fcprojw = add(p + "mlp.proj.weight", {C, 4 * C}, true);  // (C, 4C)
        v.fcprojb = add(p + "mlp.proj.bias", {C}, false);
        lv_.push_back(v);
    }
    lnfw_ = add("lnf.weight", {C}, false);
    lnfb_ = add("lnf.bias", {C}, false);

    // max_batch 0: no activations (a decoder's or CudaGpt's host_).
    if (max_batch < 0) throw std::invalid_argument("Gpt: negative max_batch");
    for (const GptBuffer& b : gpt_buffers(cfg, max_batch, Precision::fp32, BufferDevice::cpu)) buffer(b.name, b.count);
}

void Gpt::buffer(const char* name, size_t n) {
    using F = std::vector<float> Gpt::*;
    static const std::pair<const char*, F> floats[] = {
        {"encoded", &Gpt::encoded_}, {"ln1", &Gpt::ln1_}, {"ln1_mean", &Gpt::ln1_mean_}, {"ln1_rstd", &Gpt::ln1_rstd_},
        {"qkv", &Gpt::qkv_}, {"atty", &Gpt::atty_}, {"att", &Gpt::att_}, {"lse", &Gpt::lse_},
        {"residual2", &Gpt::residual2_}, {"ln2", &Gpt::ln2_}, {"ln2_mean", &Gpt::ln2_mean_},
        {"ln2_rstd", &Gpt::ln2_rstd_}, {"fch", &Gpt::fch_}, {"fch_gelu", &Gpt::fch_gelu_},
        {"residual3", &Gpt::residual3_}, {"lnf", &Gpt::lnf_}, {"lnf_mean", &Gpt::lnf_mean_},
        {"lnf_rstd", &Gpt::lnf_rstd_}, {"logits", &Gpt::logits_}, {"ce_stats", &Gpt::ce_stats_},
        {"losses", &Gpt::losses_}, {"scratch", &Gpt::scratch_}, {"dres", &Gpt::dres_}, {"dbig", &Gpt::dbig_},
        {"dsmall", &Gpt::dsmall_}, {"datt", &Gpt::datt_}, {"datty", &Gpt::datty_}, {"delta", &Gpt::delta_}};
    for (const auto& [field_name, field] : floats)
        if (std::strcmp(field_name, name) == 0) return (this->*field).resize(n);
    if (std::strcmp(name, "targets") == 0) return targets_.resize(n);
    if (std::strcmp(name, "argmax") == 0) return argmax_.resize(n);
    throw std::logic_error(std::string("Gpt: no field for buffer ") + name);
}

size_t Gpt::activation_bytes() const {
    size_t floats = 0;
    for (const std::vector<float>* v :
         {&encoded_, &ln1_, &ln1_mean_, &ln1_rstd_, &qkv_, &atty_, &att_, &residual2_, &ln2_, &ln2_mean_, &ln2_rstd_,
          &fch_, &fch_gelu_, &residual3_, &lnf_, &lnf_mean_, &lnf_rstd_, &logits_, &losses_, &scratch_, &lse_,
          &ce_stats_, &dres_, &dbig_, &dsmall_, &datt_, &datty_, &delta_})
        floats += v->size();
    return floats * sizeof(float) + (targets_.size() + argmax_.size()) * sizeof(int);
}

size_t Gpt::activation_bytes(const GptConfig& cfg, int max_batch) {
    return buffer_bytes(gpt_buffers(cfg, max_batch, Precision::fp32, BufferDevice::cpu));
}

size_t Gpt::count_params(const GptConfig& cfg) {
    const size_t V = cfg.vocab_size, T = cfg.block_size, C = cfg.n_embd, L = cfg.n_layer;
    // wte, wpe; per layer ln1 (2C), qkv (3C^2 + 3C), proj (C^2 + C), ln2 (2C), fc (4C^2 + 4C),
    // fc proj (4C^2 + C); lnf (2C).
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
}

// Every weight, the widest activation (B*T, 4C) and output gradient (B*T, max(4C, V)).
static void operand_sizes(const GptConfig& cfg, int max_batch, size_t* act, size_t* grad) {
    const size_t BT = (size_t)max_batch * cfg.block_size, C = (size_t)cfg.n_embd;
    *act = BT * 4 * C;
    *grad = BT * std::max<size_t>(4 * C, (size_t)cfg.vocab_size);
}

size_t Gpt::operand_bytes(const GptConfig& cfg, int max_batch, Precision p) {
    size_t act = 0, grad = 0;
    operand_sizes(cfg, max_batch, &act, &grad);
    return Bf16Operands::bytes_for(p, count_params(cfg), act, grad);
}

void Gpt::set_precision(Precision p) {
    last_B_ = -1;  // a backward now would take other operands than its forward: it refuses
    size_t act = 0, grad = 0;
    operand_sizes(cfg_, max_batch_, &act, &grad);
    bf_.set(p, layout_.total, act, grad);
}

void Gpt::mm_forward(const float* params, float* out, const float* inp, size_t w, const float* bias, int BT, int C,
                     int OC, bool out16) {
    lm_matmul_forward(bf_, ops_, params, out, inp, w, bias, BT, C, OC, out16);
}

void Gpt::mm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                      const float* params, size_t w, int BT, int C, int OC, bool dinp16) {
    lm_matmul_backward(bf_, ops_, dinp, dweight, dbias, dout, inp, params, w, BT, C, OC, dinp16);
}

bool parse_gpt_signature(const std::string& signature, GptConfig* cfg) {
    if (parse_llama_signature(signature, cfg)) return true;
    GptConfig c;
    int end = 0;
    if (std::sscanf(signature.c_str(), "gpt V=%d T=%d L=%d H=%d C=%d%n", &c.vocab_size, &c.block_size, &c.n_layer,
                    &c.n_head, &c.n_embd, &end) != 5 ||
        (size_t)end != signature.size())
        return false;
    *cfg = c;
    return true;
}

std::string Gpt::signature() const {
    return strfmt("gpt V=%d T=%d L=%d H=%d C=%d", cfg_.vocab_size, cfg_.block_size, cfg_.n_layer, cfg_.n_head,
                  cfg_.n_embd);
}

double Gpt::flops_per_sample() const {
    const double T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer;
    double n = (double)layout_.total - T * C;
    return T * (6.0 * n + 12.0 * L * T * C);
}

void Gpt::init(float* params, uint64_t seed, bool (*stop)()) const {
    const float residual_std = 0.02f / std::sqrt(2.0f * cfg_.n_layer);
    for (size_t i = 0; i < layout_.views.size(); ++i) {
        const ParamView& v = layout_.views[i];
        float* p = params + v.offset;
        const std::string& n = v.name;
        bool is_ln_weight = n.find("ln") != std::string::npos && n.find(".weight") != std::string::npos;
        if (v.shape.size() == 1) {
            std::fill(p, p + v.size, is_ln_weight ? 1.0f : 0.0f);
            continue;
        }
        bool residual = n.find("attn.proj.weight") != std::string::npos || n.find("mlp.proj.weight") != std::string::npos;
        float sigma = residual ? residual_std : 0.02f;
        if (!fill_normal(p, v.size, sigma, stream_seed(seed, 2000 + i), stop)) return;
    }
}

double Gpt::forward(const float* params, const ModelBatch& in, long* correct) {
    const int B = in.B, T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, V = cfg_.vocab_size;
    if (B > max_batch_) throw std::invalid_argument("Gpt::forward: batch larger than max_batch");
    if (B == 0) {
        last_B_ = 0;
        return 0.0;
    }
    const long BT = (long)B * T;
    const size_t sBT = (size_t)max_batch_ * T, sBTC = sBT * C;
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            int tok = in.tokens[(long)b * in.stride + t + 1];
            if (tok < 0 || tok >= V) throw UserError(strfmt("token %d outside the model's vocabulary of %d", tok, V));
            targets_[(long)b * T + t] = tok;
        }
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            int tok = in.tokens[(long)b * in.stride + t];
            if (tok < 0 || tok >= V) throw UserError(strfmt("token %d outside the model's vocabulary of %d", tok, V));
        }
    if (bf_.on()) timed(ops_, OpKind::matmul, [&] { bf_.round_weights(params); });
    timed(ops_, OpKind::encoder,
          [&] { cpu::encoder_forward(encoded_.data(), in.tokens, in.stride, params + wte_, params + wpe_, B, T, C); });
    // Each residual add runs with the LayerNorm after it, one op as on the GPU (where it saves a pass).
    auto residual_layernorm = [&](float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                  size_t w, size_t bias) {
        timed(ops_, OpKind::layernorm, [&] {
            cpu::residual_layernorm_forward(res, out, mean, rstd, a, b, params + w, params + bias, BT, C);
        });
    };
    timed(ops_, OpKind::layernorm, [&] {  // layer 0's, or with no layers the final one
        if (L > 0)
            cpu::layernorm_forward(ln1_.data(), ln1_mean_.data(), ln1_rstd_.data(), encoded_.data(),
                                   params + lv_[0].ln1w, params + lv_[0].ln1b, BT, C);
        else
            cpu::layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), encoded_.data(), params + lnfw_,
                                   params + lnfb_, BT, C);
    });
    const float* residual = encoded_.data();
    for (int l = 0; l < L; ++l) {
        const LayerViews& v = lv_[l];
        const size_t k = kept(l), next = kept(l + 1);
        float* res3 = residual3_.data() + l * sBTC;
        block_forward(params, l, residual, B);
        mm_forward(params, scratch_.data(), fch_gelu_.data() + k * 4 * sBTC, v.fcprojw, params + v.fcprojb, (int)BT,
                   4 * C, C);
        const float* res2 = residual2_.data() + k * sBTC;
        if (l + 1 < L)
            residual_layernorm(res3, ln1_.data() + next * sBTC, ln1_mean_.data() + next * sBT,
                               ln1_rstd_.data() + next * sBT, res2, scratch_.data(), lv_[l + 1].ln1w, lv_[l + 1].ln1b);
        else
            residual_layernorm(res3, lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), res2, scratch_.data(), lnfw_,
                               lnfb_);
        residual = res3;
    }
    // bf16 keeps the logits rounded (as autocast); the loss reads them so.
    mm_forward(params, logits_.data(), lnf_.data(), wte_, nullptr, (int)BT, C, V, true);
    last_B_ = B;
    return lm_loss(ops_, losses_.data(), ce_stats_.data(), argmax_.data(), logits_.data(), targets_.data(), BT, V,
                   correct);
}

// From ln1's output (kept(l)) to GELU's. Flash: lse kept; else the softmax (TF32 operands in bf16).
void Gpt::block_forward(const float* params, int l, const float* residual, int B) {
    const int T = cfg_.block_size, C = cfg_.n_embd, NH = cfg_.n_head;
    const long BT = (long)B * T;
    const size_t BTC = (size_t)BT * C, sBT = (size_t)max_batch_ * T, sBTC = sBT * C;
    const size_t sATT = (size_t)max_batch_ * NH * T * T, sSTAT = (size_t)max_batch_ * NH * T;
    const LayerViews& v = lv_[l];
    const size_t k = kept(l), a = kept_att(l);
    float* ln1 = ln1_.data() + k * sBTC;
    float* qkv = qkv_.data() + k * 3 * sBTC;
    float* atty = atty_.data() + k * sBTC;
    float* ln2 = ln2_.data() + k * sBTC;
    float* fch = fch_.data() + k * 4 * sBTC;
    mm_forward(params, qkv, ln1, v.qkvw, params + v.qkvb, (int)BT, C, 3 * C);
    timed(ops_, OpKind::attention, [&] {
        if (cfg_.flash_attention) {
            cpu::flash_attention_forward(atty, lse_.data() + a * sSTAT, qkv, B, T, C, NH);
            // Rounded for the projection and for backward's delta (FlashAttention-2's).
            if (bf_.on()) cpu::round_bf16(atty, atty, (long)BTC);
        } else cpu::attention_forward(atty, att_.data() + a * sATT, qkv, B, T, C, NH, bf_.on());
    });
    mm_forward(params, scratch_.data(), atty, v.attprojw, params + v.attprojb, (int)BT, C, C);
    timed(ops_, OpKind::layernorm, [&] {
        cpu::residual_layernorm_forward(residual2_.data() + k * sBTC, ln2, ln2_mean_.data() + k * sBT,
                                        ln2_rstd_.data() + k * sBT, residual, scratch_.data(), params + v.ln2w,
                                        params + v.ln2b, BT, C);
    });
    // GELU of fc's fp32 output, which bf16 then keeps rounded for backward (docs/GPU.md, "Mixed precision").
    mm_forward(params, fch, ln2, v.fcw, params + v.fcb, (int)BT, C, 4 * C);
    timed(ops_, OpKind::activation, [&] {
        cpu::gelu_forward(fch_gelu_.data() + k * 4 * sBTC, fch, 4 * (long)BTC);
        if (bf_.on()) cpu::round_bf16(fch, fch, 4 * (long)BTC);
    });
}

// block: from the kept input, ln1 included. attention: the output into scratch, so the kept one
// stays as the projection saw it.
void Gpt::recompute_layer(const float* params, int l, const float* residual, int B) {
    const int T = cfg_.block_size, C = cfg_.n_embd, NH = cfg_.n_head;
    const long BT = (long)B * T;
    const size_t sBTC = (size_t)max_batch_ * T * C;
    if (cfg_.recompute == Recompute::block) {
        timed(ops_, OpKind::layernorm, [&] {
            cpu::layernorm_forward(ln1_.data(), ln1_mean_.data(), ln1_rstd_.data(), residual, params + lv_[l].ln1w,
                                   params + lv_[l].ln1b, BT, C);
        });
        block_forward(params, l, residual, B);
    } else if (cfg_.recompute == Recompute::attention) {
        const float* qkv = qkv_.data() + kept(l) * 3 * sBTC;
        timed(ops_, OpKind::attention, [&] {
            if (cfg_.flash_attention) cpu::flash_attention_forward(scratch_.data(), lse_.data(), qkv, B, T, C, NH);
            else cpu::attention_forward(scratch_.data(), att_.data(), qkv, B, T, C, NH, bf_.on());
        });
    }
}

void Gpt::backward(float* grads, const float* params, const ModelBatch& in, float scale, GradHook* hook) {
    const int B = in.B, T = cfg_.block_size, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head, V = cfg_.vocab_size;
    if (B != last_B_) throw std::logic_error("Gpt::backward without the matching forward");
    if (B == 0) {
        if (hook) hook->grads_ready_from(0);
        return;
    }
    const long BT = (long)B * T;
    const size_t BTC = (size_t)BT * C, sBT = (size_t)max_batch_ * T, sBTC = sBT * C;
    const size_t sATT = (size_t)max_batch_ * NH * T * T, sSTAT = (size_t)max_batch_ * NH * T;
    // dlogits overwrite the logits in place (each element reads its own logit first).
    float* dlogits = logits_.data();
    timed(ops_, OpKind::crossentropy, [&] {
        cpu::softmax_crossentropy_backward(dlogits, logits_.data(), ce_stats_.data(), targets_.data(), scale, (int)BT, V);
    });
    float* dlnf = dsmall_.data();
    // bf16: LayerNorm's (and flash attention's) backward take dout rounded, as autocast does.
    mm_backward(dlnf, grads + wte_, nullptr, dlogits, lnf_.data(), params, wte_, (int)BT, C, V, true);
    float* dres = dres_.data();
    timed(ops_, OpKind::other, [&] { std::memset(dres, 0, BTC * sizeof(float)); });
    const float* last = L > 0 ? residual3_.data() + (L - 1) * sBTC : encoded_.data();
    timed(ops_, OpKind::layernorm, [&] {
        cpu::layernorm_backward(dres, grads + lnfw_, grads + lnfb_, dlnf, last, params + lnfw_, lnf_mean_.data(),
                                lnf_rstd_.data(), BT, C);
    });
    if (hook) hook->grads_ready_from(lnfw_);
    for (int l = L - 1; l >= 0; --l) {
        const LayerViews& v = lv_[l];
        const float* residual = l == 0 ? encoded_.data() : residual3_.data() + (l - 1) * sBTC;
        if (cfg_.recompute == Recompute::block) recompute_layer(params, l, residual, B);
        const size_t k = kept(l), a = kept_att(l);
        const float* ln1 = ln1_.data() + k * sBTC;
        const float* qkv = qkv_.data() + k * 3 * sBTC;
        const float* atty = atty_.data() + k * sBTC;
        const float* res2 = residual2_.data() + k * sBTC;
        const float* ln2 = ln2_.data() + k * sBTC;
        const float* fch = fch_.data() + k * 4 * sBTC;
        const float* fchg = fch_gelu_.data() + k * 4 * sBTC;
        // dres = d residual3 = d fcproj and, below, d residual2.
        float* dfc = dbig_.data();
        mm_backward(dfc, grads + v.fcprojw, grads + v.fcprojb, dres, fchg, params, v.fcprojw, (int)BT, 4 * C, C);
        timed(ops_, OpKind::activation, [&] { cpu::gelu_backward(dfc, fch, dfc, 4 * (long)BTC); });
        float* dln = dsmall_.data();
        mm_backward(dln, grads + v.fcw, grads + v.fcb, dfc, ln2, params, v.fcw, (int)BT, C, 4 * C, true);
        timed(ops_, OpKind::layernorm, [&] {
            cpu::layernorm_backward(dres, grads + v.ln2w, grads + v.ln2b, dln, res2, params + v.ln2w,
                                    ln2_mean_.data() + k * sBT, ln2_rstd_.data() + k * sBT, BT, C);
        });
        // dres = d residual2 = d attproj, and d residual so far.
        float* datty = datty_.data();
        mm_backward(datty, grads + v.attprojw, grads + v.attprojb, dres, atty, params, v.attprojw, (int)BT, C, C,
                    cfg_.flash_attention);
        // dqkv in dbig_: dfc is done with (fc's backward has taken it).
        float* dqkv = dbig_.data();
        if (cfg_.recompute == Recompute::attention) recompute_layer(params, l, residual, B);
        timed(ops_, OpKind::attention, [&] {
            if (cfg_.flash_attention)
                cpu::flash_attention_backward(dqkv, delta_.data(), datty, qkv, atty, lse_.data() + a * sSTAT, B,
                                              T, C, NH);
            else
                cpu::attention_backward(dqkv, datt_.data(), datty, qkv, att_.data() + a * sATT, B, T, C, NH,
                                        bf_.on());
        });
        mm_backward(dln, grads + v.qkvw, grads + v.qkvb, dqkv, ln1, params, v.qkvw, (int)BT, C, 3 * C, true);
        timed(ops_, OpKind::layernorm, [&] {
            cpu::layernorm_backward(dres, grads + v.ln1w, grads + v.ln1b, dln, residual, params + v.ln1w,
                                    ln1_mean_.data() + k * sBT, ln1_rstd_.data() + k * sBT, BT, C);
        });
        if (hook) hook->grads_ready_from(v.ln1w);
    }
    timed(ops_, OpKind::encoder,
          [&] { cpu::encoder_backward(grads + wte_, grads + wpe_, dres, in.tokens, in.stride, B, T, C); });
    if (hook) hook->grads_ready_from(0);
}

} // namespace dptrain
