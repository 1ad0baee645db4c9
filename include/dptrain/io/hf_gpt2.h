// The GPT in Hugging Face's GPT-2 layout, out and in: model.safetensors with GPT-2's tensor names
// (h.0.attn.c_attn.weight, ...) and Conv1D orientation (in, out), beside a config.json that
// GPT2LMHeadModel reads. Export from a checkpoint; import as the start of a run (--init-from) or
// for a look at logits. Not for: the safetensors format itself (safetensors.h) or checkpoints.
#pragma once

#include "dptrain/io/checkpoint.h"
#include "dptrain/io/safetensors.h"
#include "dptrain/model/gpt.h"

#include <string>
#include <vector>

namespace dptrain {

// The Hugging Face name of one of the GPT's parameters ("h1.attn.qkv.weight" ->
// "h.1.attn.c_attn.weight"), and whether its matrix is stored transposed there (Conv1D keeps
// (in, out) where dptrain keeps (out, in)).
std::string hf_gpt2_name(const std::string& ours, bool* transposed);
// dst (cols, rows) = src (rows, cols): a matrix between dptrain's orientation and Conv1D's.
void hf_gpt2_transpose(const float* src, long rows, long cols, float* dst);

// Writes DIR/model.safetensors (every parameter in GPT-2's names, float32 or bf16; the metadata
// name dptrain's model, step and tokenizer) and DIR/config.json (GPT2LMHeadModel's settings, and
// under "dptrain" the tokenizer and its table; for the gpt2 tokenizer, DIR/vocab.json and
// DIR/merges.txt, the files of Hugging Face's GPT2Tokenizer, instead; for sentencepiece, the
// model as DIR/tokenizer.model). Creates DIR. A DIR that holds files already is refused (a user's
// model there would be replaced, or its tokenizer files left beside another model) unless
// overwrite; then the files an export writes are replaced, and the tokenizer files of Hugging
// Face's layout that this export does not write are removed: their names are returned. Throws
// UserError for a checkpoint that is not a GPT.
std::vector<std::string> export_hf_gpt2(const CheckpointState& ck, const std::string& dir, TensorDtype dtype,
                                        bool overwrite = false);

// A GPT-2 in Hugging Face's layout as found at PATH: a directory with model.safetensors (and
// config.json), or a .safetensors file (and a config.json beside it, if any).
// A tokenizer as a run's data holds it: its kind and Tokenizer::table(); an empty kind is not checked.
struct TokenizerId {
    std::string kind, table;
};

struct HfGpt2 {
    std::string dir;          // the directory it is in
    std::string file;         // the safetensors file
    std::string config_file;  // "" when there is none
    GptConfig cfg;            // from config.json; without one, from the shapes (n_head then 0: unknown)
    TokenizerId named;        // config.json's "dptrain" entry: table as written there ({} when none)
    std::string prefix;       // "" or "transformer." (GPT2LMHeadModel.state_dict's own names)
};
HfGpt2 find_hf_gpt2(const std::string& path);

// Fills params (the layout of a Gpt built with cfg) from the weights at PATH. Checks config.json
// against the tensors, then vocabulary, width, layers, heads and every tensor's shape against cfg,
// and the tokenizer the directory names (config.json's "dptrain" entry, or GPT-2's vocab.json and
// merges.txt) against `tokens`: the same vocabulary size can hold other tokens. Throws UserError
// with one line, starting with the file, naming the difference and the option to change. A file
// with more positions than cfg.block_size gives its first block_size (as GPT-2 users crop it);
// *note then says so ("" otherwise).
void import_hf_gpt2(const std::string& path, const GptConfig& cfg, float* params, std::string* note,
                    const TokenizerId& tokens = {});

} // namespace dptrain
