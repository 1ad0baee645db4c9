// dptrain generate: text from a GPT checkpoint, with a key/value cache (--no-kv-cache: the whole
// window recomputed per token). Not for: serving (serve.cpp) or sampling's rules (TokenPicker).
#include "dptrain/infer/generate.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/decoders.h"
#include "dptrain/config/infer_options.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/infer/inference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>

namespace dptrain {

namespace {

// ended: <|endoftext|>, not written.
struct Generated {
    int tokens = 0;
    double first_at = 0;
    bool ended = false;
};

// false once the document ends.
bool put(Generated& g, int next, const Tokenizer& tok) {
    if (g.tokens == 0) g.first_at = now_seconds();
    if (next == tok.end_of_text()) {
        g.ended = true;
        return false;
    }
    ++g.tokens;
    std::fputs(tok.decode({next}).c_str(), stdout);
    std::fflush(stdout);
    return true;
}

// --no-kv-cache: the last T tokens at positions 0.., recomputed for each token.
Generated generate_recompute(LanguageModel& model, const float* params, std::vector<int>& ids, int tokens, TokenPicker& picker,
                             const Tokenizer& tok) {
    const int T = model.config().block_size, V = model.config().vocab_size;
    std::vector<int> window(T + 1);
    Generated g;
    for (int n = 0; n < tokens; ++n) {
        // Causal attention keeps the padding after the end from the position read.
        int len = (int)std::min<size_t>(ids.size(), (size_t)T);
        std::fill(window.begin(), window.end(), 0);
        std::copy(ids.end() - len, ids.end(), window.begin());
        ModelBatch in;
        in.B = 1;
        in.tokens = window.data();
        in.stride = T + 1;
        model.forward(params, in, nullptr);
        ids.push_back(picker.pick(model.logits() + (size_t)(len - 1) * V));
        if (!put(g, ids.back(), tok)) break;
    }
    return g;
}

// A full window keeps its newest half, recomputed at positions 0.. (once per T / 2 tokens); up to
// T tokens the result equals the recomputing one's. The decoder picks each token where its logits
// are (a GPU hands back the id alone), by the picker's rule and draw.
Generated generate_cached(Decoder& model, const GptConfig& cfg, const float* params, std::vector<int>& ids, int tokens,
                          TokenPicker& picker, const Tokenizer& tok) {
    Generated g;
    const int T = cfg.block_size;
    model.reserve(1, T);
    model.set_params(params);
    std::vector<int> slot(T, 0), pos(T);
    std::iota(pos.begin(), pos.end(), 0);
    int filled = 0;
    auto prefill = [&](int keep) {  // only the last position's token
        const int last = keep - 1;
        const TokenDraw d = picker.next_draw();
        int next = 0;
        model.decode_pick(ids.data() + ids.size() - keep, slot.data(), pos.data(), keep, &last, 1, &d, &next);
        filled = keep;
        return next;
    };
    int next = prefill((int)std::min<size_t>(ids.size(), (size_t)T));
    for (int n = 0; n < tokens; ++n) {
        ids.push_back(next);
        if (!put(g, next, tok) || n + 1 == tokens) break;
        if (filled == T) {
            next = prefill(std::max(1, T / 2));
        } else {
            const TokenDraw d = picker.next_draw();
            const int at = next;
            model.decode_pick(&at, slot.data(), &pos[filled], 1, nullptr, 0, &d, &next);
            ++filled;
        }
    }
    return g;
}

} // namespace

int run_generate(int argc, const char* const* argv, const std::string& program) {
    const InferenceParse<GenerateOptions> parsed = parse_generate_options(argc, argv, program);
    if (!parsed.help_text.empty()) {
        std::fputs(parsed.help_text.c_str(), stdout);
        return 0;
    }
    const GenerateOptions& o = parsed.opts;
    const int threads = o.threads;
    cpu::set_threads(threads);
    const InferenceModel m = load_inference_model(o.checkpoint);
    const Tokenizer& tok = *m.tok;
    // The default prompt "\n" may not be encodable: say what to give, not what was wrong with a
    // prompt never given.
    std::vector<int> ids;
    try {
        ids = tok.encode_prompt(o.prompt);
    } catch (const UserError& e) {
        if (o.prompt_given) throw;
        throw UserError(strfmt("generate: the default prompt, a new line, is not in this model's vocabulary (%s); give "
                               "one with --prompt TEXT",
                               e.what()));
    }
    if (ids.empty() && !tok.reads_text())
        throw UserError("generate: this model reads ids: give the prompt as ids, --prompt \"ID ID ...\"");
    if (ids.empty()) throw UserError("generate: --prompt must not be empty");
    TokenPicker picker(drawable_ids(m.cfg, tok), o.temperature, o.top_k, 1.0, o.seed);
    std::fputs(o.prompt.c_str(), stdout);
    const double t0 = now_seconds();
    std::string on = "the CPU";
    Generated g;
    const size_t prompt_tokens = ids.size();
    if (o.no_kv_cache) {
        const std::unique_ptr<LanguageModel> model = make_cpu_lm(m.cfg, 1);
        g = generate_recompute(*model, m.params.data(), ids, o.tokens, picker, tok);
    } else {
        const std::unique_ptr<Decoder> model = make_decoder(o.device, m.cfg, o.precision);
        on = model->where();
        g = generate_cached(*model, m.cfg, m.params.data(), ids, o.tokens, picker, tok);
    }
    const double t1 = now_seconds();
    std::fputc('\n', stdout);
    std::fflush(stdout);
    // Rate after the first token, whose time is the prompt's pass and the set-up.
    const double first = g.tokens + g.ended > 0 ? g.first_at - t0 : t1 - t0, rest = t1 - (t0 + first);
    const int after = g.tokens + (g.ended ? 1 : 0) - 1;
    std::fprintf(stderr,
                 "generate: %d tokens in %.3f s%s: the first %.3f s after the start (the prompt's %zu tokens and "
                 "set-up), then %s tokens/s (%s, on %s, %d thread%s)\n",
                 g.tokens, t1 - t0, g.ended ? ", ended by <|endoftext|>" : "", first, prompt_tokens,
                 after > 0 && rest > 0 ? strfmt("%.1f", after / rest).c_str() : "-",
                 o.no_kv_cache ? "the whole window per token" : "key/value cache", on.c_str(), threads,
                 threads == 1 ? "" : "s");
    return 0;
}

} // namespace dptrain
