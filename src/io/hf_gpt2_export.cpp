// Export: a GPT checkpoint as Hugging Face's GPT-2 directory, a Llama's as LlamaForCausalLM's
// (model.safetensors, config.json and the tokenizer's files), clearing stale tokenizer files of an
// earlier export.
// Not for: the tensor names and orientation, or importing such a directory (hf_gpt2.cpp).
#include "dptrain/io/hf_gpt2.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/core/json.h"
#include "dptrain/data/tokenizer.h"
#include "dptrain/io/hf_llama.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace dptrain {

namespace {

// Any such file left in the directory would be loaded with the new model.
const char* const kTokenizerFiles[] = {"vocab.json",      "merges.txt",           "tokenizer.model",
                                       "tokenizer.json",  "tokenizer_config.json", "special_tokens_map.json",
                                       "added_tokens.json", "generation_config.json"};

// Refused when it holds files, unless overwrite; then the tokenizer files this export will not
// write are removed. Returns their names.
std::vector<std::string> clear_for_export(const std::string& dir, bool overwrite, const std::vector<std::string>& writes) {
    std::vector<std::string> held, removed;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        held.push_back(it->path().filename().string());
    if (held.empty()) return removed;
    std::sort(held.begin(), held.end());
    if (!overwrite) {
        std::string some;
        for (size_t i = 0; i < held.size() && i < 4; ++i) some += (i ? ", " : "") + held[i];
        throw UserError(strfmt("--out %s already holds %zu file%s (%s%s); export into a new directory, or replace the "
                               "model there with --overwrite",
                               dir.c_str(), held.size(), held.size() == 1 ? "" : "s", some.c_str(),
                               held.size() > 4 ? ", ..." : ""));
    }
    for (const char* name : kTokenizerFiles) {
        if (std::find(writes.begin(), writes.end(), name) != writes.end()) continue;
        if (std::find(held.begin(), held.end(), name) == held.end()) continue;
        if (std::remove((dir + "/" + name).c_str()) != 0)
            throw UserError(strfmt("--out %s: cannot remove the stale %s: %s", dir.c_str(), name, std::strerror(errno)));
        removed.push_back(name);
    }
    return removed;
}

// GPT2LMHeadModel's tensors: GPT-2's names, Conv1D's (in, out) orientation.
std::vector<TensorOut> gpt2_tensors(const GptConfig& cfg, const float* params) {
    std::vector<TensorOut> out;
    const Gpt gpt(cfg, 0);
    for (const ParamView& v : gpt.layout().views) {
        bool tr = false;
        TensorOut t;
        t.name = hf_gpt2_name(v.name, &tr);
        const float* src = params + v.offset;
        if (tr) {
            t.shape = {v.shape[1], v.shape[0]};
            t.data.resize(v.size);
            hf_gpt2_transpose(src, v.shape[0], v.shape[1], t.data.data());
        } else {
            t.shape.assign(v.shape.begin(), v.shape.end());
            t.data.assign(src, src + v.size);
        }
        out.push_back(std::move(t));
    }
    return out;
}

// GPT2Config's fields for cfg, dtype named by torch_dtype.
Json gpt2_config(const GptConfig& cfg, TensorDtype dtype) {
    Json c = Json::object();
    c["architectures"] = Json::array({"GPT2LMHeadModel"});
    c["model_type"] = "gpt2";
    c["vocab_size"] = cfg.vocab_size;
    c["n_positions"] = cfg.block_size;
    c["n_ctx"] = cfg.block_size;
    c["n_embd"] = cfg.n_embd;
    c["n_layer"] = cfg.n_layer;
    c["n_head"] = cfg.n_head;
    c["n_inner"] = nullptr;
    c["activation_function"] = "gelu_new";
    c["layer_norm_epsilon"] = 1e-5;
    c["resid_pdrop"] = 0.0;
    c["embd_pdrop"] = 0.0;
    c["attn_pdrop"] = 0.0;
    c["initializer_range"] = 0.02;
    c["tie_word_embeddings"] = true;
    c["torch_dtype"] = dtype == TensorDtype::bf16 ? "bfloat16" : "float32";
    return c;
}

} // namespace

std::vector<std::string> export_hf_gpt2(const CheckpointState& ck, const std::string& dir, TensorDtype dtype,
                                        bool overwrite) {
    GptConfig cfg;
    if (!parse_gpt_signature(ck.model, &cfg))
        throw UserError(strfmt("the checkpoint holds %s; export writes GPT-2's or Llama's layout, for --model gpt or "
                               "llama checkpoints",
                               ck.model.c_str()));
    const size_t P = lm_count_params(cfg);
    if (P != ck.params.size())
        throw UserError(strfmt("the checkpoint holds %zu parameters, but its model %s has %zu", ck.params.size(),
                               ck.model.c_str(), P));
    const bool llama = cfg.arch == DecoderArch::llama;
    const std::vector<TensorOut> out =
        llama ? hf_llama_tensors(cfg, ck.params.data()) : gpt2_tensors(cfg, ck.params.data());
    // GPT2Tokenizer's files for gpt2, tokenizer.model for SentencePiece; other kinds (char, ids,
    // one unknown here) as stored, their table in config.json.
    TokenizerKind kind;
    const TokenizerPtr tok = parse_tokenizer_kind(ck.tokenizer, &kind) ? tokenizer_from(kind, ck.vocab) : nullptr;
    const std::vector<TokenizerFile> files = tok ? tok->hf_files() : std::vector<TokenizerFile>{};
    std::vector<std::string> writes;
    for (const TokenizerFile& f : files) writes.push_back(f.name);
    make_directories(dir, "--out");
    const std::vector<std::string> removed = clear_for_export(dir, overwrite, writes);
    write_safetensors(dir + "/model.safetensors", out,
                      {{"format", "pt"},
                       {"dptrain.model", ck.model},
                       {"dptrain.step", std::to_string(ck.step)},
                       {"dptrain.tokenizer", ck.tokenizer}},
                      dtype);
    Json c = llama ? hf_llama_config(cfg, dtype) : gpt2_config(cfg, dtype);
    // GPT2Config's defaults name <|endoftext|> (50256), outside any other vocabulary: said.
    const int eot = tok ? tok->end_of_text() : -1;
    c["bos_token_id"] = eot >= 0 ? Json(eot) : Json(nullptr);
    c["eos_token_id"] = eot >= 0 ? Json(eot) : Json(nullptr);
    // The files that hold the table, else the table itself.
    std::string vocab;
    for (const std::string& name : writes) vocab += (vocab.empty() ? "" : ", ") + name;
    c["dptrain"] = {{"model", ck.model},
                    {"step", ck.step},
                    {"tokenizer", ck.tokenizer},
                    {"vocab", writes.empty() ? ck.vocab : vocab}};
    for (const TokenizerFile& f : files) write_file_atomically(dir + "/" + f.name, f.bytes);
    write_file_atomically(dir + "/config.json", c.dump(2, ' ', false, Json::error_handler_t::replace) + "\n");
    return removed;
}

} // namespace dptrain
