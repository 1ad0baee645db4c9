// Inference models and token choice (inference.h): shared by generate and serve.
#include "dptrain/app/inference.h"

#include "dptrain/config/options.h"
#include "dptrain/core/error.h"
#include "dptrain/io/checkpoint.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace dptrain {

namespace {

// The training options stored in a checkpoint, parsed as an INI file.
Options stored_options(const std::string& ini) {
    int fd = memfd_create("options", 0);
    if (fd < 0 || write(fd, ini.data(), ini.size()) != (ssize_t)ini.size()) {
        if (fd >= 0) close(fd);
        throw UserError("cannot read the options stored in the checkpoint");
    }
    std::string path = "/proc/self/fd/" + std::to_string(fd);
    const char* argv[] = {"dptrain", "--config", path.c_str()};
    Options o = parse_options(3, argv).opts;
    close(fd);
    return o;
}

// A checkpoint file, or a run or checkpoint directory for its newest complete checkpoint.
CheckpointState load_newest(std::string* path) {
    struct stat st;
    if (stat(path->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return load_checkpoint(*path);
    const std::string sub = *path + "/checkpoints";
    const std::string dir = stat(sub.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? sub : *path;
    CheckpointState ck;
    std::vector<std::string> damaged;
    std::string found;
    const bool ok = load_latest(dir, &ck, &found, &damaged);
    for (const std::string& d : damaged)
        std::fprintf(stderr, "dptrain: skipping checkpoint: %s; falling back to an older one\n", d.c_str());
    if (!ok)
        throw UserError(strfmt("--checkpoint %s: no complete checkpoint in %s; train there first or give a "
                               "ckpt-NNNNNNNN.h5 file",
                               path->c_str(), dir.c_str()));
    *path = found;
    return ck;
}

} // namespace

InferenceModel load_inference_model(const std::string& path) {
    InferenceModel m;
    m.path = path;
    CheckpointState ck = load_newest(&m.path);
    if (ck.tokenizer.empty())
        throw UserError(strfmt("%s: not a language model checkpoint (%s); generate and serve need a --model gpt run",
                               m.path.c_str(), ck.model.c_str()));
    const Options o = stored_options(ck.options);
    m.tok = Tokenizer::from(ck.tokenizer, ck.vocab);
    m.cfg.vocab_size = o.vocab_size > 0 ? o.vocab_size : m.tok.vocab_size();
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

TokenPicker::TokenPicker(int vocab_size, double temperature, int top_k, double top_p, uint64_t seed)
    : V_(vocab_size), k_(top_k > 0 ? std::min(top_k, vocab_size) : vocab_size), temperature_(temperature),
      top_p_(top_p), probs_(vocab_size), order_(vocab_size), rng_(stream_seed(seed, 0x6E6E)) {}

int TokenPicker::pick(const float* z) {
    if (temperature_ == 0) return (int)(std::max_element(z, z + V_) - z);
    std::iota(order_.begin(), order_.end(), 0);
    std::partial_sort(order_.begin(), order_.begin() + k_, order_.end(), [&](int a, int b) { return z[a] > z[b]; });
    double sum = 0;
    for (int i = 0; i < k_; ++i) sum += probs_[i] = (float)std::exp((z[order_[i]] - z[order_[0]]) / temperature_);
    // Nucleus: the fewest most likely tokens whose probabilities reach top_p.
    int n = k_;
    if (top_p_ < 1.0) {
        double acc = 0;
        for (n = 0; n < k_;) {
            acc += probs_[n++];
            if (acc >= top_p_ * sum) break;
        }
        sum = acc;
    }
    const double u = rng_.uniform() * sum;
    double acc = 0;
    for (int i = 0; i < n; ++i)
        if ((acc += probs_[i]) >= u) return order_[i];
    return order_[n - 1];
}

} // namespace dptrain
