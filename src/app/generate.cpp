// dptrain generate: text from a trained GPT checkpoint. The model is rebuilt from the options and
// tokenizer stored in the checkpoint; each new token is drawn from the softmax of the last
// position's logits / temperature, restricted to the top k. The prompt is computed once and each
// new token costs one position (a key/value cache, Gpt::decode); --no-kv-cache recomputes the
// whole window for every token instead.
#include "dptrain/app/generate.h"

#include "dptrain/app/inference.h"
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/device.h"
#include "dptrain/config/argv.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/core/files.h"

#include <boost/program_options.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>

namespace po = boost::program_options;

namespace dptrain {

namespace {

// What a generation did: tokens written, when the first came (the prompt's pass done), and whether
// the model ended the document (GPT-2's <|endoftext|>, not written).
struct Generated {
    int tokens = 0;
    double first_at = 0;
    bool ended = false;
};

// Writes `next` unless it ends the document; false when it does.
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

// Today's window: the last T tokens at positions 0.., recomputed whole for each new token.
Generated generate_recompute(Gpt& model, const float* params, std::vector<int>& ids, int tokens, TokenPicker& picker,
                             const Tokenizer& tok) {
    const int T = model.config().block_size, V = model.config().vocab_size;
    std::vector<int> window(T + 1);
    Generated g;
    for (int n = 0; n < tokens; ++n) {
        // The last T tokens, padded after the end: causal attention keeps the padding from
        // reaching the position read.
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

// With the key/value cache: the window (the last T tokens) computed once, then one position per
// token. A full window keeps its newest half, recomputed at positions 0.., and goes on from there
// (one recomputation every T / 2 tokens); up to T tokens the result is the recomputing one's.
Generated generate_cached(Decoder& model, const GptConfig& cfg, const float* params, std::vector<int>& ids, int tokens,
                          TokenPicker& picker, const Tokenizer& tok) {
    Generated g;
    const int T = cfg.block_size, V = cfg.vocab_size;
    model.reserve(1, T);
    model.set_params(params);
    std::vector<float> logits(V);
    std::vector<int> slot(T, 0), pos(T);
    std::iota(pos.begin(), pos.end(), 0);
    int filled = 0;
    auto prefill = [&](int keep) {  // only the last position's logits
        const int last = keep - 1;
        model.decode(ids.data() + ids.size() - keep, slot.data(), pos.data(), keep, logits.data(), &last, 1);
        filled = keep;
        return logits.data();
    };
    const float* z = prefill((int)std::min<size_t>(ids.size(), (size_t)T));
    for (int n = 0; n < tokens; ++n) {
        int next = picker.pick(z);
        ids.push_back(next);
        if (!put(g, next, tok) || n + 1 == tokens) break;
        if (filled == T) {
            z = prefill(std::max(1, T / 2));
        } else {
            model.decode(&next, slot.data(), &pos[filled], 1, logits.data());
            ++filled;
            z = logits.data();
        }
    }
    return g;
}

} // namespace

int run_generate(int argc, const char* const* argv) {
    std::string checkpoint, prompt;
    int tokens = 200, top_k = 0, threads = 1;
    double temperature = 1.0;
    unsigned long seed = 1;
    bool no_cache = false;
    std::string device = "cpu", precision = "fp32";
    po::options_description desc("dptrain generate: text from a GPT checkpoint", 100, 50);
    desc.add_options()("help,h", "print this help")("checkpoint", po::value(&checkpoint)->default_value(""),
                                                    "checkpoint file (ckpt-NNNNNNNN.h5) of a --model gpt run, or its run "
                                                    "directory for the newest complete one")(
        "prompt", po::value(&prompt)->default_value("\n", "a new line"), "text to continue")(
        "tokens", po::value(&tokens)->default_value(200), "tokens to generate")(
        "temperature", po::value(&temperature)->default_value(1.0), "softmax temperature; 0 = always the most likely")(
        "top-k", po::value(&top_k)->default_value(0), "sample among the k most likely tokens; 0 = all")(
        "seed", po::value(&seed)->default_value(1), "seed of the sampling")(
        "threads", po::value(&threads)->default_value(1), "compute threads")(
        "device", po::value(&device)->default_value("cpu"),
        "where to decode with the key/value cache: cpu | cuda (this host's first GPU) | auto (cuda when a GPU "
        "is visible, else cpu)")(
        "precision", po::value(&precision)->default_value("fp32"),
        "the weights decoding reads: fp32 | bf16 (rounded once: half the bytes a token reads, products and sums "
        "still fp32; with the key/value cache)")(
        "no-kv-cache", po::bool_switch(&no_cache),
        "recompute the whole window (the last block-size tokens) for every new token instead of keeping each "
        "position's keys and values; slower, and past the block size the window slides one token at a time "
        "instead of keeping its newest half (on the CPU: with --device auto too)");
    po::variables_map vm;
    try {
        po::store(parse_argv(argc, argv, desc, "generate takes options alone (the prompt: --prompt TEXT)"), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        throw UserError(std::string(e.what()) + "; see " + runnable("dptrain") + " generate --help");
    }
    if (vm.count("help")) {
        std::cout << desc;
        return 0;
    }
    if (checkpoint.empty()) throw UserError("generate: give the checkpoint with --checkpoint PATH");
    if (tokens < 0) throw UserError(strfmt("generate: --tokens %d must be >= 0", tokens));
    if (top_k < 0) throw UserError(strfmt("generate: --top-k %d must be >= 0 (0: every token)", top_k));
    if (!(temperature >= 0) || !std::isfinite(temperature))
        throw UserError(strfmt("generate: --temperature %g must be >= 0 and finite (0: the likeliest token)", temperature));
    if (threads < 1) throw UserError(strfmt("generate: --threads %d must be >= 1", threads));
    const DeviceKind where = parse_device_kind(device);
    if (no_cache && where == DeviceKind::cuda)
        throw UserError("generate: --no-kv-cache recomputes on the CPU; leave --device out, or drop --no-kv-cache");
    const Precision weights = parse_precision(precision);
    if (no_cache && weights == Precision::bf16)
        throw UserError("generate: --no-kv-cache recomputes in fp32; drop --precision bf16, or --no-kv-cache");
    cpu::set_threads(threads);
    const InferenceModel m = load_inference_model(checkpoint);
    const Tokenizer& tok = m.tok;
    // The default prompt, a new line, is no prompt to a model of ids, nor to one whose characters
    // hold no new line: say what to give, not what was wrong with a prompt never given.
    const bool given = !vm["prompt"].defaulted();
    std::vector<int> ids;
    try {
        ids = tok.encode(prompt);
    } catch (const UserError& e) {
        if (given) throw;
        throw UserError(strfmt("generate: the default prompt, a new line, is not in this model's vocabulary (%s); give "
                               "one with --prompt TEXT",
                               e.what()));
    }
    if (ids.empty() && tok.kind == "ids")
        throw UserError("generate: this model reads ids: give the prompt as ids, --prompt \"ID ID ...\"");
    if (ids.empty()) throw UserError("generate: --prompt must not be empty");
    TokenPicker picker(drawable_ids(m.cfg, m.tok), temperature, top_k, 1.0, seed);
    std::fputs(prompt.c_str(), stdout);
    const double t0 = now_seconds();
    std::string on = "the CPU";
    Generated g;
    const size_t prompt_tokens = ids.size();
    if (no_cache) {
        Gpt model(m.cfg, 1);
        g = generate_recompute(model, m.params.data(), ids, tokens, picker, tok);
    } else {
        const std::unique_ptr<Decoder> model = make_device(where, Topology{})->make_decoder(m.cfg, weights);
        on = model->where();
        g = generate_cached(*model, m.cfg, m.params.data(), ids, tokens, picker, tok);
    }
    const double t1 = now_seconds();
    std::fputc('\n', stdout);
    std::fflush(stdout);
    // The rate is of the tokens after the first: the first one's time is the prompt's pass (all
    // its tokens at once) and the set-up (the decoder, its cache, the weights to the device).
    const double first = g.tokens + g.ended > 0 ? g.first_at - t0 : t1 - t0, rest = t1 - (t0 + first);
    const int after = g.tokens + (g.ended ? 1 : 0) - 1;
    std::fprintf(stderr,
                 "generate: %d tokens in %.3f s%s: the first %.3f s after the start (the prompt's %zu tokens and "
                 "set-up), then %s tokens/s (%s, on %s, %d thread%s)\n",
                 g.tokens, t1 - t0, g.ended ? ", ended by <|endoftext|>" : "", first, prompt_tokens,
                 after > 0 && rest > 0 ? strfmt("%.1f", after / rest).c_str() : "-",
                 no_cache ? "the whole window per token" : "key/value cache", on.c_str(), threads,
                 threads == 1 ? "" : "s");
    return 0;
}

} // namespace dptrain
