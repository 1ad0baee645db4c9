// dptrain generate: text from a trained GPT checkpoint. The model is rebuilt from the options and
// tokenizer stored in the checkpoint; each new token is drawn from the softmax of the last
// position's logits / temperature, restricted to the top k.
#include "dptrain/app/generate.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/io/checkpoint.h"
#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/model/gpt.h"
#include "dptrain/config/options.h"
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

int run_generate(int argc, const char* const* argv) {
    std::string checkpoint, prompt;
    int tokens = 200, top_k = 0, threads = 1;
    double temperature = 1.0;
    unsigned long seed = 1;
    po::options_description desc("dptrain generate: text from a GPT checkpoint", 100, 50);
    desc.add_options()("help,h", "print this help")("checkpoint", po::value(&checkpoint)->default_value(""),
                                                    "checkpoint file (ckpt-NNNNNNNN.h5) of a --model gpt run, or its run "
                                                    "directory for the newest complete one")(
        "prompt", po::value(&prompt)->default_value("\n"), "text to continue")(
        "tokens", po::value(&tokens)->default_value(200), "tokens to generate")(
        "temperature", po::value(&temperature)->default_value(1.0), "softmax temperature; 0 = always the most likely")(
        "top-k", po::value(&top_k)->default_value(0), "sample among the k most likely tokens; 0 = all")(
        "seed", po::value(&seed)->default_value(1), "seed of the sampling")(
        "threads", po::value(&threads)->default_value(1), "compute threads");
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
    Gpt model(cfg, 1);
    if (model.signature() != ck.model || model.num_params() != ck.params.size())
        throw UserError(strfmt("%s: its stored options rebuild %s, but it holds %s", checkpoint.c_str(),
                               model.signature().c_str(), ck.model.c_str()));
    std::vector<int> ids = tok.encode(prompt);
    if (ids.empty()) throw UserError("generate: --prompt must not be empty");
    const int T = cfg.block_size, V = cfg.vocab_size;
    std::vector<int> window(T + 1);
    std::vector<float> probs(V);
    std::vector<int> order(V);
    Rng rng(stream_seed(seed, 0x6E6E));
    std::fputs(prompt.c_str(), stdout);
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
        model.forward(ck.params.data(), in, nullptr);
        const float* z = model.logits() + (size_t)(len - 1) * V;
        int next;
        if (temperature == 0) {
            next = (int)(std::max_element(z, z + V) - z);
        } else {
            std::iota(order.begin(), order.end(), 0);
            int k = top_k > 0 ? std::min(top_k, V) : V;
            std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) { return z[a] > z[b]; });
            double sum = 0;
            for (int i = 0; i < k; ++i) sum += probs[i] = (float)std::exp((z[order[i]] - z[order[0]]) / temperature);
            double u = rng.uniform() * sum, acc = 0;
            next = order[k - 1];
            for (int i = 0; i < k; ++i)
                if ((acc += probs[i]) >= u) {
                    next = order[i];
                    break;
                }
        }
        ids.push_back(next);
        std::fputs(tok.decode({next}).c_str(), stdout);
        std::fflush(stdout);
    }
    std::fputc('\n', stdout);
    return 0;
}

} // namespace dptrain
