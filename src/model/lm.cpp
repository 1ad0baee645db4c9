// The language models by their kind (GptConfig::arch): construction and static sizes, so that the
// trainer, the memory plan and the tools need not ask which. Not for: the models themselves.
#include "dptrain/model/gpt.h"
#include "dptrain/model/llama.h"

namespace dptrain {

std::unique_ptr<LanguageModel> make_cpu_lm(const GptConfig& cfg, int max_batch) {
    if (cfg.arch == DecoderArch::llama) return std::make_unique<Llama>(cfg, max_batch);
    return std::make_unique<Gpt>(cfg, max_batch);
}

std::string lm_signature(const GptConfig& cfg) { return make_cpu_lm(cfg, 0)->signature(); }

size_t lm_count_params(const GptConfig& cfg) {
    return cfg.arch == DecoderArch::llama ? Llama::count_params(cfg) : Gpt::count_params(cfg);
}

size_t lm_activation_bytes(const GptConfig& cfg, int max_batch) {
    return cfg.arch == DecoderArch::llama ? Llama::activation_bytes(cfg, max_batch)
                                          : Gpt::activation_bytes(cfg, max_batch);
}

size_t lm_operand_bytes(const GptConfig& cfg, int max_batch, Precision p) {
    return cfg.arch == DecoderArch::llama ? Llama::operand_bytes(cfg, max_batch, p)
                                          : Gpt::operand_bytes(cfg, max_batch, p);
}

} // namespace dptrain
