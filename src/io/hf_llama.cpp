// LlamaForCausalLM's tensors and config.json from a Llama's parameters (hf_llama.h).
// Not for: writing the directory (hf_gpt2_export.cpp's export does, for either kind).
#include "dptrain/io/hf_llama.h"

#include "dptrain/core/error.h"
#include "dptrain/model/llama.h"

#include <algorithm>
#include <cstdlib>
#include <set>

namespace dptrain {

namespace {

// One of LlamaForCausalLM's tensors: rows [first, first + rows) of the (.., cols) matrix at
// offset in dptrain's parameters (cols 0: a vector).
struct HfPiece {
    std::string name;  // without "model." for the model's own tensors: the prefix is the caller's
    size_t offset;
    int first, rows, cols;
    size_t count() const { return (size_t)rows * (cols > 0 ? cols : 1); }
    size_t at() const { return offset + (size_t)first * (cols > 0 ? cols : 1); }
};

std::vector<HfPiece> hf_pieces(const Llama& m) {
    const GptConfig& cfg = m.config();
    const int C = cfg.n_embd, V = cfg.vocab_size, F = cfg.ffn_hidden, hs = C / cfg.n_head;
    const int q = cfg.n_head * hs, kv = cfg.n_kv_head * hs;
    std::vector<HfPiece> p = {{"embed_tokens.weight", m.wte(), 0, V, C}};
    for (int l = 0; l < cfg.n_layer; ++l) {
        const Llama::LayerViews& v = m.layer_views()[l];
        const std::string n = strfmt("layers.%d.", l);
        p.push_back({n + "input_layernorm.weight", v.ln1w, 0, C, 0});
        p.push_back({n + "self_attn.q_proj.weight", v.qkvw, 0, q, C});
        p.push_back({n + "self_attn.k_proj.weight", v.qkvw, q, kv, C});
        p.push_back({n + "self_attn.v_proj.weight", v.qkvw, q + kv, kv, C});
        p.push_back({n + "self_attn.o_proj.weight", v.attprojw, 0, C, C});
        p.push_back({n + "post_attention_layernorm.weight", v.ln2w, 0, C, 0});
        p.push_back({n + "mlp.gate_proj.weight", v.gateupw, 0, F, C});
        p.push_back({n + "mlp.up_proj.weight", v.gateupw, F, F, C});
        p.push_back({n + "mlp.down_proj.weight", v.fcprojw, 0, C, F});
    }
    p.push_back({"norm.weight", m.lnf(), 0, C, 0});
    return p;
}

std::vector<int64_t> shape_of(const HfPiece& p) {
    return p.cols > 0 ? std::vector<int64_t>{p.rows, p.cols} : std::vector<int64_t>{p.rows};
}

} // namespace

std::vector<TensorOut> hf_llama_tensors(const GptConfig& cfg, const float* params) {
    const Llama m(cfg, 0);
    std::vector<TensorOut> out;
    auto put = [&](const std::string& name, const HfPiece& p) {
        TensorOut t;
        t.name = name;
        t.shape = shape_of(p);
        t.data.assign(params + p.at(), params + p.at() + p.count());
        out.push_back(std::move(t));
    };
    for (const HfPiece& p : hf_pieces(m)) put("model." + p.name, p);
    const GptConfig& c = m.config();
    if (!c.tie_embeddings) put("lm_head.weight", {"lm_head.weight", m.head(), 0, c.vocab_size, c.n_embd});
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

bool is_hf_llama(const Json& c) {
    const auto type = c.find("model_type");
    return type != c.end() && type->is_string() && type->get<std::string>() == "llama";
}

namespace {

// A number at `key`; `def` when absent or null.
double config_number(const std::string& path, const Json& c, const char* key, double def) {
    const auto it = c.find(key);
    if (it == c.end() || it->is_null()) return def;
    if (!it->is_number() || !(it->get<double>() > 0))
        throw UserError(strfmt("%s: \"%s\" must be a positive number", path.c_str(), key));
    return it->get<double>();
}

bool config_bool(const Json& c, const char* key, bool def) {
    const auto it = c.find(key);
    return it != c.end() && it->is_boolean() ? it->get<bool>() : def;
}

RopeScaling read_rope_scaling(const std::string& path, const Json& c) {
    RopeScaling r;
    const auto it = c.find("rope_scaling");
    if (it == c.end() || it->is_null()) return r;
    if (!it->is_object()) throw UserError(path + ": rope_scaling must be null or an object");
    std::string type;
    for (const char* key : {"rope_type", "type"}) {
        const auto t = it->find(key);
        if (t != it->end() && t->is_string()) type = t->get<std::string>();
        if (!type.empty()) break;
    }
    if (type == "default") return r;
    if (type != "llama3")
        throw UserError(strfmt("%s: rope_scaling type \"%s\" is one dptrain's Llama does not compute; it computes Llama "
                               "3's (\"llama3\") or none",
                               path.c_str(), type.c_str()));
    r.factor = (float)config_number(path, *it, "factor", 0);
    r.low_freq_factor = (float)config_number(path, *it, "low_freq_factor", 1);
    r.high_freq_factor = (float)config_number(path, *it, "high_freq_factor", 4);
    r.original_positions = hf_config_int(path, *it, "original_max_position_embeddings", nullptr, true);
    if (!(r.factor > 0) || !(r.high_freq_factor > r.low_freq_factor))
        throw UserError(path + ": rope_scaling needs factor > 0 and high_freq_factor > low_freq_factor");
    return r;
}

} // namespace

GptConfig read_hf_llama_config(const std::string& path, const Json& c) {
    GptConfig cfg;
    cfg.arch = DecoderArch::llama;
    cfg.vocab_size = hf_config_int(path, c, "vocab_size", nullptr, true);
    cfg.n_embd = hf_config_int(path, c, "hidden_size", nullptr, true);
    cfg.ffn_hidden = hf_config_int(path, c, "intermediate_size", nullptr, true);
    cfg.n_layer = hf_config_int(path, c, "num_hidden_layers", nullptr, true);
    cfg.n_head = hf_config_int(path, c, "num_attention_heads", nullptr, true);
    cfg.n_kv_head = hf_config_int(path, c, "num_key_value_heads", nullptr, false);
    if (cfg.n_kv_head == 0) cfg.n_kv_head = cfg.n_head;
    cfg.block_size = hf_config_int(path, c, "max_position_embeddings", nullptr, true);
    cfg.rope_theta = (float)config_number(path, c, "rope_theta", 10000);
    cfg.norm_eps = (float)config_number(path, c, "rms_norm_eps", 1e-6);  // LlamaConfig's defaults
    cfg.tie_embeddings = config_bool(c, "tie_word_embeddings", false);
    cfg.rope_scaling = read_rope_scaling(path, c);
    const auto act = c.find("hidden_act");
    if (act != c.end() && (!act->is_string() || act->get<std::string>() != "silu"))
        throw UserError(strfmt("%s: hidden_act %s; dptrain's Llama computes SwiGLU with silu", path.c_str(),
                               act->dump().c_str()));
    for (const char* key : {"attention_bias", "mlp_bias"})
        if (config_bool(c, key, false))
            throw UserError(strfmt("%s: %s is true; dptrain's Llama has no biases", path.c_str(), key));
    const int head_dim = hf_config_int(path, c, "head_dim", nullptr, false);
    if (head_dim != 0 && cfg.n_head * head_dim != cfg.n_embd)
        throw UserError(strfmt("%s: head_dim %d x %d heads is not hidden_size %d; dptrain's Llama has heads of "
                               "hidden_size / num_attention_heads",
                               path.c_str(), head_dim, cfg.n_head, cfg.n_embd));
    if (cfg.n_embd % cfg.n_head != 0 || cfg.n_head % cfg.n_kv_head != 0)
        throw UserError(strfmt("%s: hidden_size %d, num_attention_heads %d and num_key_value_heads %d do not divide",
                               path.c_str(), cfg.n_embd, cfg.n_head, cfg.n_kv_head));
    return cfg;
}

namespace {

// The model's settings against the run's, each difference with the option that gives the model's.
void check_run(const std::string& path, const GptConfig& m, const GptConfig& run) {
    auto differ = [&](const char* what, const std::string& theirs, const std::string& ours, const char* option) {
        throw UserError(strfmt("%s: the model has %s %s; this run has %s %s: use %s %s", path.c_str(), what,
                               theirs.c_str(), option, ours.c_str(), option, theirs.c_str()));
    };
    auto same = [&](const char* what, int theirs, int ours, const char* option) {
        if (theirs != ours) differ(what, std::to_string(theirs), std::to_string(ours), option);
    };
    if (m.vocab_size != run.vocab_size)
        throw UserError(strfmt("%s: the model's vocabulary is %d, this run's is %d (the data's tokenizer, or "
                               "--vocab-size); fine-tune on data tokenized with the model's own vocabulary",
                               path.c_str(), m.vocab_size, run.vocab_size));
    same("hidden_size", m.n_embd, run.n_embd, "--n-embd");
    same("num_hidden_layers", m.n_layer, run.n_layer, "--n-layer");
    same("num_attention_heads", m.n_head, run.n_head, "--n-head");
    same("num_key_value_heads", m.n_kv_head, run.n_kv_head, "--n-kv-head");
    same("intermediate_size", m.ffn_hidden, run.ffn_hidden, "--ffn-hidden");
    if (m.rope_theta != run.rope_theta)
        differ("rope_theta", float_text(m.rope_theta), float_text(run.rope_theta), "--rope-theta");
    if (m.norm_eps != run.norm_eps) differ("rms_norm_eps", float_text(m.norm_eps), float_text(run.norm_eps), "--norm-eps");
    if (rope_scaling_text(m.rope_scaling) != rope_scaling_text(run.rope_scaling))
        differ("rope_scaling", rope_scaling_text(m.rope_scaling), rope_scaling_text(run.rope_scaling),
               "--rope-scaling");
    if (m.tie_embeddings != run.tie_embeddings)
        throw UserError(strfmt("%s: the model's tie_word_embeddings is %s; %s", path.c_str(),
                               m.tie_embeddings ? "true" : "false",
                               m.tie_embeddings ? "leave out --untie-embeddings" : "add --untie-embeddings"));
}

} // namespace

void import_hf_llama(const HfGpt2& h, const GptConfig& run_in, float* params, std::string* note,
                     const TokenizerId& tokens) {
    if (h.config_file.empty())
        throw UserError(h.file + ": no config.json beside the weights; a Llama's needs it (its rotary and norm "
                                 "settings are not in the tensors)");
    const Llama m(run_in, 0);
    const GptConfig& run = m.config();
    check_run(h.config_file, h.cfg, run);
    const std::string taken = check_hf_tokenizer(h.file, h, tokens);
    const Safetensors st = Safetensors::read_file(h.file);
    // LlamaForCausalLM's names are under "model."; LlamaModel's are not.
    const std::string prefix = st.find("model.embed_tokens.weight") ? "model." : "";
    std::set<std::string> used;
    std::vector<float> tmp;
    auto take = [&](const std::string& name, const HfPiece& p) {
        const SafeTensor* t = st.find(name);
        const std::vector<int64_t> want = shape_of(p);
        if (!t || t->shape != want)
            throw UserError(strfmt("%s: tensor %s %s; this run's Llama needs %s", h.file.c_str(), name.c_str(),
                                   t ? ("is " + hf_shape_text(t->shape)).c_str() : "is missing",
                                   hf_shape_text(want).c_str()));
        tmp.resize(t->count());
        st.to_float(*t, tmp.data());
        std::copy(tmp.begin(), tmp.end(), params + p.at());
        used.insert(name);
    };
    for (const HfPiece& p : hf_pieces(m)) take(prefix + p.name, p);
    const HfPiece head{"lm_head.weight", m.head(), 0, run.vocab_size, run.n_embd};
    if (!run.tie_embeddings) take("lm_head.weight", head);
    for (const SafeTensor& t : st.tensors()) {
        if (used.count(t.name) || t.name.find("rotary_emb.inv_freq") != std::string::npos) continue;
        if (t.name == "lm_head.weight" && t.shape == shape_of(head)) {  // a tied head saved beside the embedding
            tmp.resize(t.count());
            st.to_float(t, tmp.data());
            if (std::equal(tmp.begin(), tmp.end(), params + m.wte())) continue;
            throw UserError(h.file + ": lm_head.weight differs from the embedding, but config.json ties them "
                                     "(tie_word_embeddings true); mend config.json");
        }
        throw UserError(strfmt("%s: tensor %s is not part of a Llama of %d layers", h.file.c_str(), t.name.c_str(),
                               run.n_layer));
    }
    *note = taken;
    if (run.block_size > h.cfg.block_size)
        *note += strfmt("%s--block-size %d is past the model's max_position_embeddings %d", note->empty() ? "" : "; ",
                        run.block_size, h.cfg.block_size);
}

} // namespace dptrain
