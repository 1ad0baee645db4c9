// The Llama in Hugging Face's LlamaForCausalLM layout: its safetensors names (q/k/v and gate/up as
// separate matrices) and config.json, out for export and in for --init-from and import.
// Not for: the safetensors format (safetensors.h), the directory an export writes or finding one
// (hf_gpt2.h, shared with GPT-2's layout).
#pragma once

#include "dptrain/core/json.h"
#include "dptrain/io/hf_gpt2.h"
#include "dptrain/io/safetensors.h"
#include "dptrain/model/gpt.h"

#include <string>
#include <vector>

namespace dptrain {

// params (a Llama of cfg) as LlamaForCausalLM's tensors: model.embed_tokens, model.layers.N.*,
// model.norm and, untied, lm_head; (out, in) orientation as nn.Linear keeps it.
std::vector<TensorOut> hf_llama_tensors(const GptConfig& cfg, const float* params);
// LlamaConfig's fields for cfg (rope_scaling null or Llama 3's), dtype named by torch_dtype.
Json hf_llama_config(const GptConfig& cfg, TensorDtype dtype);

// config.json names a Llama: model_type "llama".
bool is_hf_llama(const Json& config);
// Its configuration (arch llama, block size from max_position_embeddings). What dptrain's Llama
// does not compute (biases, another activation, a head_dim apart from hidden_size / heads, a
// rope_scaling type other than llama3's) is refused in one line naming the file and the key.
GptConfig read_hf_llama_config(const std::string& path, const Json& config);
// Fills params (a Llama of run) from h, checking config.json against the run's options (each
// difference named with the option to change) and every tensor's shape; a tied head's lm_head
// must equal the embedding, and no other tensor may be left over. *note: what was taken as given.
void import_hf_llama(const HfGpt2& h, const GptConfig& run, float* params, std::string* note,
                     const TokenizerId& tokens);

} // namespace dptrain
