// dptrain generate: text from a trained GPT checkpoint. The model is rebuilt from the options and
// tokenizer stored in the checkpoint; each new token is drawn from the softmax of the last
// position's logits / temperature, restricted to the top k. The prompt is computed once and each
// new token costs one position (a key/value cache, Gpt::decode); --no-kv-cache recomputes the
// whole window for every token instead.
#include "dptrain/app/generate.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/io/checkpoint.h"
#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/model/gpt.h"
#include "dptrain/config/options.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/rng.h"
#include "dptrain/data/tokens.h"

#include <boost/program_options.hpp>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>

namespace po = boost::program_options;

namespace dptrain {

// The training options stored in a checkpoint, parsed as an INI file.
static Options stored_options(const std::string& ini) {
    int fd = memfd_create("options", 0);
    if (fd < 0 || write(fd, ini.data(), ini.size()) != (ssize_t)ini.size())
        throw UserError("cannot read the options stored in the checkpoint");
    std::string path = "/proc/self/fd/" + std::to_string(fd);
    const char* argv[] = {"dptrain", "--config", path.c_str()};
    Options o = parse_options(3, argv).opts;
    close(fd);
    return o;
}

// --checkpoint: a checkpoint file, or a run or checkpoint directory for its newest complete
// checkpoint (a damaged newer one is skipped with a note on stderr).
static CheckpointState load_for_generate(std::string* path) {
    struct stat st;
    if (stat(path->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return load_checkpoint(*path);
    const std::string sub = *path + "/checkpoints";
    const std::string dir = stat(sub.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? sub : *path;
    CheckpointState ck;
    std::vector<std::string> damaged;
    std::string found;
    const bool ok = load_latest(dir, &ck, &found, &damaged);
    for (const std::string& d : damaged)
        std::fprintf(stderr, "dptrain generate: skipping checkpoint: %s; falling back to an older one\n", d.c_str());
    if (!ok)
        throw UserError(strfmt("--checkpoint %s: no complete checkpoint in %s; train there first or give a "
                               "ckpt-NNNNNNNN.h5 file",
                               path->c_str(), dir.c_str()));
    *path = found;
    return ck;
}

namespace {

// The next token from a row of logits: the largest (temperature 0), else a draw from the softmax
// of logits / temperature over the top k. Buffers allocated once.
class TokenPicker {
  public:
    TokenPicker(int V, double temperature, int top_k, uint64_t seed)
        : V_(V), k_(top_k > 0 ? std::min(top_k, V) : V), temperature_(temperature), probs_(V), order_(V),
          rng_(stream_seed(seed, 0x6E6E)) {}

    int pick(const float* z) {
        if (temperature_ == 0) return (int)(std::max_element(z, z + V_) - z);
        std::iota(order_.begin(), order_.end(), 0);
        std::partial_sort(order_.begin(), order_.begin() + k_, order_.end(), [&](int a, int b) { return z[a] > z[b]; });
        double sum = 0;
        for (int i = 0; i < k_; ++i) sum += probs_[i] = (float)std::exp((z[order_[i]] - z[order_[0]]) / temperature_);
        double u = rng_.uniform() * sum, acc = 0;
        for (int i = 0; i < k_; ++i)
            if ((acc += probs_[i]) >= u) return order_[i];
        return order_[k_ - 1];
    }

  private:
    int V_, k_;
    double temperature_;
    std::vector<float> probs_;
    std::vector<int> order_;
    Rng rng_;
};

// Today's window: the last T tokens at positions 0.., recomputed whole for each new token.
void generate_recompute(Gpt& model, const float* params, std::vector<int>& ids, int tokens, TokenPicker& picker,
                        const Tokenizer& tok) {
    const int T = model.config().block_size, V = model.config().vocab_size;
    std::vector<int> window(T + 1);
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
        std::fputs(tok.decode({ids.back()}).c_str(), stdout);
        std::fflush(stdout);
    }
}

// With the key/value cache: the window (the last T tokens) computed once, then one position per
// token. A full window keeps its newest half, recomputed at positions 0.., and goes on from there
// (one recomputation every T / 2 tokens); up to T tokens the result is the recomputing one's.
void generate_cached(Gpt& model, const float* params, std::vector<int>& ids, int tokens, TokenPicker& picker,
                     const Tokenizer& tok) {
    const int T = model.config().block_size, V = model.config().vocab_size;
    model.reserve_decode(1, T);
    std::vector<float> logits((size_t)T * V);
    std::vector<int> slot(T, 0), pos(T);
    std::iota(pos.begin(), pos.end(), 0);
    int filled = 0;
    auto prefill = [&](int keep) {
        model.decode(params, ids.data() + ids.size() - keep, slot.data(), pos.data(), keep, logits.data());
        filled = keep;
        return logits.data() + (size_t)(keep - 1) * V;
    };
    const float* z = prefill((int)std::min<size_t>(ids.size(), (size_t)T));
    for (int n = 0; n < tokens; ++n) {
        int next = picker.pick(z);
        ids.push_back(next);
        std::fputs(tok.decode({next}).c_str(), stdout);
        std::fflush(stdout);
        if (n + 1 == tokens) break;
        if (filled == T) {
            z = prefill(std::max(1, T / 2));
        } else {
            model.decode(params, &next, slot.data(), &pos[filled], 1, logits.data());
            ++filled;
            z = logits.data();
        }
    }
}

} // namespace

int run_generate(int argc, const char* const* argv) {
    std::string checkpoint, prompt;
    int tokens = 200, top_k = 0, threads = 1;
    double temperature = 1.0;
    unsigned long seed = 1;
    bool no_cache = false;
    po::options_description desc("dptrain generate: text from a GPT checkpoint", 100, 50);
    desc.add_options()("help,h", "print this help")("checkpoint", po::value(&checkpoint)->default_value(""),
                                                    "checkpoint file (ckpt-NNNNNNNN.h5) of a --model gpt run, or its run "
                                                    "directory for the newest complete one")(
        "prompt", po::value(&prompt)->default_value("\n"), "text to continue")(
        "tokens", po::value(&tokens)->default_value(200), "tokens to generate")(
        "temperature", po::value(&temperature)->default_value(1.0), "softmax temperature; 0 = always the most likely")(
        "top-k", po::value(&top_k)->default_value(0), "sample among the k most likely tokens; 0 = all")(
        "seed", po::value(&seed)->default_value(1), "seed of the sampling")(
        "threads", po::value(&threads)->default_value(1), "compute threads")(
        "no-kv-cache", po::bool_switch(&no_cache),
        "recompute the whole window (the last block-size tokens) for every new token instead of keeping each "
        "position's keys and values; slower, and past the block size the window slides one token at a time "
        "instead of keeping its newest half");
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, desc), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        throw UserError(std::string(e.what()) + "; see " + runnable("dptrain") + " generate --help");
    }
    if (vm.count("help")) {
        std::cout << desc;
        return 0;
    }
    if (checkpoint.empty()) throw UserError("generate: give the checkpoint with --checkpoint PATH");
    if (tokens < 0 || top_k < 0 || temperature < 0 || threads < 1)
        throw UserError("generate: --tokens, --top-k and --temperature must be >= 0, --threads >= 1");
    cpu::set_threads(threads);
    CheckpointState ck = load_for_generate(&checkpoint);
    if (ck.tokenizer.empty())
        throw UserError(strfmt("%s: not a language model checkpoint (%s); generate needs a --model gpt run",
                               checkpoint.c_str(), ck.model.c_str()));
    Options o = stored_options(ck.options);
    Tokenizer tok = Tokenizer::from(ck.tokenizer, ck.vocab);
    GptConfig cfg;
    cfg.vocab_size = o.vocab_size > 0 ? o.vocab_size : tok.vocab_size();
    cfg.block_size = o.block_size;
    cfg.n_layer = o.n_layer;
    cfg.n_head = o.n_head;
    cfg.n_embd = o.n_embd;
    Gpt model(cfg, no_cache ? 1 : 0);  // the cache needs none of training's activations
    if (model.signature() != ck.model || model.num_params() != ck.params.size())
        throw UserError(strfmt("%s: its stored options rebuild %s, but it holds %s", checkpoint.c_str(),
                               model.signature().c_str(), ck.model.c_str()));
    std::vector<int> ids = tok.encode(prompt);
    if (ids.empty()) throw UserError("generate: --prompt must not be empty");
    TokenPicker picker(cfg.vocab_size, temperature, top_k, seed);
    std::fputs(prompt.c_str(), stdout);
    const double t0 = now_seconds();
    if (no_cache) generate_recompute(model, ck.params.data(), ids, tokens, picker, tok);
    else generate_cached(model, ck.params.data(), ids, tokens, picker, tok);
    const double dt = now_seconds() - t0;
    std::fputc('\n', stdout);
    std::fflush(stdout);
    std::fprintf(stderr, "generate: %d tokens in %.3f s, %.1f tokens/s (%s, %d thread%s)\n", tokens, dt,
                 dt > 0 ? tokens / dt : 0.0, no_cache ? "the whole window per token" : "key/value cache", threads,
                 threads == 1 ? "" : "s");
    return 0;
}

} // namespace dptrain
