// A Llama's configuration as text and numbers, without the model: defaults, the signature's and
// --rope-scaling's forms. Kept apart from llama.cpp so the option parser (and its fuzz target)
// links it alone. Not for: the layout or the arithmetic (llama.cpp).
#include "dptrain/model/llama.h"

#include "dptrain/core/error.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace dptrain {

int llama_ffn_hidden(int n_embd) { return (8 * n_embd / 3 + 63) / 64 * 64; }

GptConfig llama_resolved(const GptConfig& cfg) {
    GptConfig c = cfg;
    if (c.n_kv_head == 0) c.n_kv_head = c.n_head;
    if (c.ffn_hidden == 0) c.ffn_hidden = llama_ffn_hidden(c.n_embd);
    return c;
}

std::string float_text(float v) {
    if (v == std::floor(v) && std::fabs(v) < 1e9f) return strfmt("%.0f", v);  // "500000", not "5e+05"
    for (int digits = 1; digits < 9; ++digits) {
        const std::string s = strfmt("%.*g", digits, v);
        if (std::strtof(s.c_str(), nullptr) == v) return s;
    }
    return strfmt("%.9g", v);
}

std::string rope_scaling_text(const RopeScaling& r) {
    if (!(r.factor > 0)) return "none";
    return strfmt("llama3:%s,%s,%s,%d", float_text(r.factor).c_str(), float_text(r.low_freq_factor).c_str(),
                  float_text(r.high_freq_factor).c_str(), r.original_positions);
}

bool parse_rope_scaling(const std::string& text, RopeScaling* out) {
    RopeScaling r;
    if (text == "none") {
        *out = r;
        return true;
    }
    int end = 0;
    if (std::sscanf(text.c_str(), "llama3:%g,%g,%g,%d%n", &r.factor, &r.low_freq_factor, &r.high_freq_factor,
                    &r.original_positions, &end) != 4 ||
        (size_t)end != text.size() || !(r.factor > 0) || !(r.low_freq_factor > 0) ||
        !(r.high_freq_factor > r.low_freq_factor) || r.original_positions <= 0)
        return false;
    *out = r;
    return true;
}

bool parse_llama_signature(const std::string& signature, GptConfig* cfg) {
    GptConfig c;
    c.arch = DecoderArch::llama;
    int tied = 0, end = 0;
    if (std::sscanf(signature.c_str(), "llama V=%d T=%d L=%d H=%d KV=%d C=%d F=%d theta=%g eps=%g tied=%d%n",
                    &c.vocab_size, &c.block_size, &c.n_layer, &c.n_head, &c.n_kv_head, &c.n_embd, &c.ffn_hidden,
                    &c.rope_theta, &c.norm_eps, &tied, &end) != 10 ||
        (tied != 0 && tied != 1))
        return false;
    c.tie_embeddings = tied == 1;
    if ((size_t)end != signature.size()) {
        const std::string rest = signature.substr(end);
        if (rest.rfind(" rope=", 0) != 0 || !parse_rope_scaling(rest.substr(6), &c.rope_scaling) ||
            !(c.rope_scaling.factor > 0))
            return false;
    }
    *cfg = c;
    return true;
}

} // namespace dptrain
