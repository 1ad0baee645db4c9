// Hugging Face GPT-2 weights as a checkpoint's state (hf_import.h).
#include "dptrain/io/hf_import.h"

#include "dptrain/config/options.h"
#include "dptrain/core/error.h"
#include "dptrain/core/json.h"
#include "dptrain/data/tokenizer.h"
#include "dptrain/io/hf_gpt2.h"
#include "dptrain/model/llama.h"

#include <fstream>
#include <sstream>
#include <vector>

namespace dptrain {

namespace {

// The training options an imported model is rebuilt from (every other option its default).
std::string options_for(const GptConfig& c) {
    std::vector<std::string> args = {"dptrain",
                                     "--model", c.arch == DecoderArch::llama ? "llama" : "gpt",
                                     "--vocab-size", std::to_string(c.vocab_size),
                                     "--block-size", std::to_string(c.block_size),
                                     "--n-layer", std::to_string(c.n_layer),
                                     "--n-head", std::to_string(c.n_head),
                                     "--n-embd", std::to_string(c.n_embd)};
    if (c.arch == DecoderArch::llama) {
        const std::vector<std::string> more = {"--n-kv-head", std::to_string(c.n_kv_head),
                                               "--ffn-hidden", std::to_string(c.ffn_hidden),
                                               "--rope-theta", float_text(c.rope_theta),
                                               "--norm-eps", float_text(c.norm_eps),
                                               "--rope-scaling", rope_scaling_text(c.rope_scaling)};
        args.insert(args.end(), more.begin(), more.end());
        if (!c.tie_embeddings) args.push_back("--untie-embeddings");
    }
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    return parse_options((int)argv.size(), argv.data()).opts.to_ini();
}

// The training step an export recorded in config.json ("dptrain": {"step": N}), else 0.
long exported_step(const std::string& config_file) {
    std::ifstream in(config_file);
    std::stringstream text;
    text << in.rdbuf();
    const Json c = parse_json(text.str());
    const auto ours = c.find("dptrain");
    if (ours == c.end() || !ours->is_object() || !ours->contains("step") || !(*ours)["step"].is_number_integer())
        return 0;
    return (*ours)["step"].get<long>();
}

} // namespace

CheckpointState import_hf_checkpoint(const std::string& dir, std::string* note) {
    const HfGpt2 h = find_hf_gpt2(dir);
    if (h.config_file.empty())
        throw UserError(dir + ": no config.json beside the weights; give the directory that holds both");
    const TokenizerId tok = tokenizer_beside(h);
    if (tok.kind.empty() || (keeps_table(tokenizer_kind(tok.kind)) && tok.table.empty()))
        throw UserError(dir + ": no tokenizer beside the weights (vocab.json and merges.txt, tokenizer.model, or an "
                              "export's config.json entry); eval, serve and generate need it");
    CheckpointState s;
    s.params.assign(lm_count_params(h.cfg), 0.0f);
    import_hf_gpt2(dir, h.cfg, s.params.data(), note);
    s.opt_m.assign(s.params.size(), 0.0f);
    s.opt_v.assign(s.params.size(), 0.0f);
    s.step = exported_step(h.config_file);
    s.model = lm_signature(h.cfg);
    s.optimizer = "adamw";
    s.options = options_for(h.cfg);
    s.tokenizer = tok.kind;
    s.vocab = tok.table;
    return s;
}

} // namespace dptrain
