// The Llama in Hugging Face's LlamaForCausalLM layout: its safetensors names (q/k/v and gate/up as
// separate matrices) and config.json, for export. Not for: the safetensors format (safetensors.h),
// the files an export writes beside them (hf_gpt2_export.cpp), or GPT-2's layout (hf_gpt2.h).
#pragma once

#include "dptrain/core/json.h"
#include "dptrain/io/safetensors.h"
#include "dptrain/model/gpt.h"

#include <vector>

namespace dptrain {

// params (a Llama of cfg) as LlamaForCausalLM's tensors: model.embed_tokens, model.layers.N.*,
// model.norm and, untied, lm_head; (out, in) orientation as nn.Linear keeps it.
std::vector<TensorOut> hf_llama_tensors(const GptConfig& cfg, const float* params);
// LlamaConfig's fields for cfg (rope_scaling null or Llama 3's), dtype named by torch_dtype.
Json hf_llama_config(const GptConfig& cfg, TensorDtype dtype);

} // namespace dptrain
