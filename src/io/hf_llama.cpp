// LlamaForCausalLM's tensors and config.json from a Llama's parameters (hf_llama.h).
// Not for: writing the directory (hf_gpt2_export.cpp's export does, for either kind).
#include "dptrain/io/hf_llama.h"

#include "dptrain/core/error.h"
#include "dptrain/model/llama.h"

#include <cstdlib>

namespace dptrain {

std::vector<TensorOut> hf_llama_tensors(const GptConfig& cfg_in, const float* params) {
    const Llama m(cfg_in, 0);
    const GptConfig& cfg = m.config();
    const int C = cfg.n_embd, V = cfg.vocab_size, F = cfg.ffn_hidden, hs = C / cfg.n_head;
    const int q_rows = cfg.n_head * hs, kv_rows = cfg.n_kv_head * hs;
    std::vector<TensorOut> out;
    // rows [first, first + rows) of the (.., cols) matrix at offset.
    auto put = [&](const std::string& name, size_t offset, int first, int rows, int cols) {
        TensorOut t;
        t.name = name;
        t.shape = cols > 0 ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows};
        const float* src = params + offset + (size_t)first * std::max(cols, 1);
        t.data.assign(src, src + (size_t)rows * std::max(cols, 1));
        out.push_back(std::move(t));
    };
    put("model.embed_tokens.weight", m.wte(), 0, V, C);
    for (int l = 0; l < cfg.n_layer; ++l) {
        const Llama::LayerViews& v = m.layer_views()[l];
        const std::string p = strfmt("model.layers.%d.", l);
        put(p + "input_layernorm.weight", v.ln1w, 0, C, 0);
        put(p + "self_attn.q_proj.weight", v.qkvw, 0, q_rows, C);
        put(p + "self_attn.k_proj.weight", v.qkvw, q_rows, kv_rows, C);
        put(p + "self_attn.v_proj.weight", v.qkvw, q_rows + kv_rows, kv_rows, C);
        put(p + "self_attn.o_proj.weight", v.attprojw, 0, C, C);
        put(p + "post_attention_layernorm.weight", v.ln2w, 0, C, 0);
        put(p + "mlp.gate_proj.weight", v.gateupw, 0, F, C);
        put(p + "mlp.up_proj.weight", v.gateupw, F, F, C);
        put(p + "mlp.down_proj.weight", v.fcprojw, 0, C, F);
    }
    put("model.norm.weight", m.lnf(), 0, C, 0);
    if (!cfg.tie_embeddings) put("lm_head.weight", m.head(), 0, V, C);
    return out;
}

// A float option as its user wrote it ("1e-05"), not as the float holds it.
static double as_written(float v) { return std::strtod(float_text(v).c_str(), nullptr); }

Json hf_llama_config(const GptConfig& cfg_in, TensorDtype dtype) {
    const GptConfig cfg = llama_resolved(cfg_in);
    Json c = Json::object();
    c["architectures"] = Json::array({"LlamaForCausalLM"});
    c["model_type"] = "llama";
    c["vocab_size"] = cfg.vocab_size;
    c["hidden_size"] = cfg.n_embd;
    c["intermediate_size"] = cfg.ffn_hidden;
    c["num_hidden_layers"] = cfg.n_layer;
    c["num_attention_heads"] = cfg.n_head;
    c["num_key_value_heads"] = cfg.n_kv_head;
    c["head_dim"] = cfg.n_embd / cfg.n_head;
    c["max_position_embeddings"] = cfg.block_size;
    c["rms_norm_eps"] = as_written(cfg.norm_eps);
    c["rope_theta"] = as_written(cfg.rope_theta);
    const RopeScaling& r = cfg.rope_scaling;
    c["rope_scaling"] = r.factor > 0 ? Json{{"rope_type", "llama3"},
                                            {"factor", as_written(r.factor)},
                                            {"low_freq_factor", as_written(r.low_freq_factor)},
                                            {"high_freq_factor", as_written(r.high_freq_factor)},
                                            {"original_max_position_embeddings", r.original_positions}}
                                     : Json(nullptr);
    c["hidden_act"] = "silu";
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
    c["attention_dropout"] = 0.0;
    c["initializer_range"] = 0.02;
    c["tie_word_embeddings"] = cfg.tie_embeddings;
    c["torch_dtype"] = dtype == TensorDtype::bf16 ? "bfloat16" : "float32";
    return c;
}

} // namespace dptrain
