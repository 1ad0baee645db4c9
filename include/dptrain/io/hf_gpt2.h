// The GPT in Hugging Face's GPT-2 layout (model.safetensors with GPT-2's names and Conv1D's (in,
// out) orientation, and config.json), out of a checkpoint and in for --init-from.
// Not for: the safetensors format itself (safetensors.h) or checkpoints.
#pragma once

#include "dptrain/core/json.h"
#include "dptrain/io/checkpoint.h"
#include "dptrain/io/safetensors.h"
#include "dptrain/model/gpt.h"

#include <string>
#include <vector>

namespace dptrain {

// "h1.attn.qkv.weight" -> "h.1.attn.c_attn.weight"; *transposed: Conv1D keeps (in, out) where
// dptrain keeps (out, in).
std::string hf_gpt2_name(const std::string& ours, bool* transposed);
// dst (cols, rows) = src (rows, cols).
void hf_gpt2_transpose(const float* src, long rows, long cols, float* dst);

// Writes DIR/model.safetensors, DIR/config.json and the tokenizer's files (GPT2Tokenizer's for
// gpt2, tokenizer.model for sentencepiece, else in config.json's "dptrain" entry). A DIR with files
// is refused unless overwrite (a user's model would be replaced, or tokenizer files left beside
// another); then stale Hugging Face tokenizer files are removed and their names returned. Throws
// UserError for a checkpoint that is not a GPT. A Llama's checkpoint gets LlamaForCausalLM's
// layout (hf_llama.h) the same way.
std::vector<std::string> export_hf_gpt2(const CheckpointState& ck, const std::string& dir, TensorDtype dtype,
                                        bool overwrite = false);

// A tokenizer as a run's data holds it; an empty kind is not checked.
struct TokenizerId {
    std::string kind, table;
};

struct HfGpt2 {
    std::string dir;
    std::string file;         // the safetensors file
    std::string config_file;  // "" when there is none
    GptConfig cfg;            // without config.json, from the shapes (n_head 0: unknown); arch llama when it names one
    TokenizerId named;        // config.json's "dptrain" entry ({} when none)
    std::string prefix;       // "" or "transformer." (GPT2LMHeadModel.state_dict's)
};
// PATH: a directory with model.safetensors (and config.json), or a .safetensors file.
HfGpt2 find_hf_gpt2(const std::string& path);

// The tokenizer beside the weights: config.json's "dptrain" entry (tables from its named files for
// gpt2 and sentencepiece), else GPT-2's vocab.json and merges.txt; kind "" when there is none.
TokenizerId tokenizer_beside(const HfGpt2& h);

// What both layouts' readers share (hf_llama.cpp's too): a shape as "768 x 50257"; config.json's
// positive integer `key` (or `alt`, its older name), 0 when absent or null and not `need`ed; the
// tokenizer beside the weights against the run's (a note when bare ids are taken as the other
// side's, "" otherwise; UserError when they differ).
std::string hf_shape_text(const std::vector<int64_t>& s);
int hf_config_int(const std::string& path, const Json& c, const char* key, const char* alt, bool need);
std::string check_hf_tokenizer(const std::string& path, const HfGpt2& h, const TokenizerId& run);

// Fills params (a Gpt of cfg, or a Llama's: import_hf_llama) from PATH, checking config.json against the tensors, then every shape
// against cfg and the tokenizer against `tokens` (the same vocabulary size can hold other tokens).
// Throws UserError with one line naming the file, the difference and the option to change. Extra
// positions are cropped to cfg.block_size, as GPT-2 users do; *note says so ("" otherwise).
void import_hf_gpt2(const std::string& path, const GptConfig& cfg, float* params, std::string* note,
                    const TokenizerId& tokens = {});

} // namespace dptrain
