// A checkpoint loaded for inference (inference_model.h): the model rebuilt from its stored options.
#include "dptrain/infer/inference_model.h"

#include "dptrain/config/infer_options.h"
#include "dptrain/core/error.h"
#include "dptrain/io/checkpoint.h"
#include "dptrain/model/llama.h"

namespace dptrain {

InferenceModel load_inference_model(const std::string& path) {
    std::string file = path;
    CheckpointState ck = load_checkpoint_or_newest(&file, "--checkpoint");
    return inference_model_from(std::move(ck), file);
}

InferenceModel inference_model_from(CheckpointState ck, const std::string& path) {
    InferenceModel m;
    m.path = path;
    if (ck.tokenizer.empty())
        throw UserError(strfmt("%s: not a language model checkpoint (%s); generate and serve need a --model gpt run",
                               m.path.c_str(), ck.model.c_str()));
    const Options o = options_from_ini(ck.options);
    m.tok = tokenizer_from(ck.tokenizer, ck.vocab);
    m.cfg = lm_config(o, o.vocab_size > 0 ? o.vocab_size : m.tok->vocab_size());
    m.cfg.flash_attention = false;  // training's choices: decoding has its own attention
    m.cfg.recompute = Recompute::none;
    if (m.cfg.arch == DecoderArch::llama) m.cfg = llama_resolved(m.cfg);
    const std::unique_ptr<LanguageModel> layout = make_cpu_lm(m.cfg, 0);
    if (layout->signature() != ck.model || layout->num_params() != ck.params.size())
        throw UserError(strfmt("%s: its stored options rebuild %s, but it holds %s", m.path.c_str(),
                               layout->signature().c_str(), ck.model.c_str()));
    m.step = ck.step;
    m.params = std::move(ck.params);
    return m;
}

} // namespace dptrain
