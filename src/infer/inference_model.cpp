// A checkpoint loaded for inference (inference_model.h): the model rebuilt from its stored options.
#include "dptrain/infer/inference_model.h"

#include "dptrain/config/infer_options.h"
#include "dptrain/core/error.h"
#include "dptrain/io/checkpoint.h"

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
    m.cfg.vocab_size = o.vocab_size > 0 ? o.vocab_size : m.tok->vocab_size();
    m.cfg.block_size = o.block_size;
    m.cfg.n_layer = o.n_layer;
    m.cfg.n_head = o.n_head;
    m.cfg.n_embd = o.n_embd;
    const Gpt layout(m.cfg, 0);
    if (layout.signature() != ck.model || layout.num_params() != ck.params.size())
        throw UserError(strfmt("%s: its stored options rebuild %s, but it holds %s", m.path.c_str(),
                               layout.signature().c_str(), ck.model.c_str()));
    m.step = ck.step;
    m.params = std::move(ck.params);
    return m;
}

} // namespace dptrain
