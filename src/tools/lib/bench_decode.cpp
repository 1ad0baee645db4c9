// dptrain-bench decode: the CPU decoder with fp32 weights beside bf16 ones (--precision of
// generate and serve), on a trained checkpoint or on a model of any shape with GPT-2's
// initialisation (GPT-2 124M's, vocabulary 50,257, by default). Speed: greedy tokens a second
// after a short prompt, one token a call, the best of --repeats runs; and how many of those
// tokens the two agree on before they first differ. Answers (--text, with a checkpoint): the
// text cut into windows of the block size, each decoded as one prompt call, every position's
// next-token loss and argmax under both weights.
#include "dptrain/tools/bench.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/model/decoder.h"
#include "dptrain/tools/cli.h"
#include "dptrain/tools/text_files.h"
#include "dptrain/train/inference_model.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

namespace dptrain {

namespace {

int argmax(const float* row, int V) { return (int)(std::max_element(row, row + V) - row); }

// Greedy decoding of `tokens` tokens after `prompt`, one token a call; the ids in *out.
// Returns the seconds of the token calls (the prompt's call not counted).
double greedy(Decoder& dec, const GptConfig& cfg, const std::vector<int>& prompt, int tokens, std::vector<int>* out) {
    const int V = cfg.vocab_size, P = (int)prompt.size();
    std::vector<float> logits(V);
    std::vector<int> slot(P, 0), pos(P);
    for (int i = 0; i < P; ++i) pos[i] = i;
    const int last = P - 1;
    dec.decode(prompt.data(), slot.data(), pos.data(), P, logits.data(), &last, 1);
    out->assign(1, argmax(logits.data(), V));
    const double t0 = now_seconds();
    for (int n = 1; n < tokens; ++n) {
        const int tok = out->back(), s = 0, p = P + n - 1;
        dec.decode(&tok, &s, &p, 1, logits.data());
        out->push_back(argmax(logits.data(), V));
    }
    return now_seconds() - t0;
}

struct Answers {
    double loss = 0;  // mean next-token cross-entropy, nats
    long positions = 0;
    std::vector<int> top;  // each position's argmax
};

// The text's ids in windows of T (+1 for the targets), each one prompt call of T rows.
Answers score(Decoder& dec, const GptConfig& cfg, const std::vector<int>& ids) {
    const int T = cfg.block_size, V = cfg.vocab_size;
    std::vector<float> logits((size_t)T * V);
    std::vector<int> slot(T, 0), pos(T);
    for (int i = 0; i < T; ++i) pos[i] = i;
    Answers a;
    for (size_t w = 0; w + T + 1 <= ids.size(); w += T) {
        dec.decode(ids.data() + w, slot.data(), pos.data(), T, logits.data());
        for (int i = 0; i < T; ++i) {
            const float* row = logits.data() + (size_t)i * V;
            const float top = *std::max_element(row, row + V);
            double sum = 0;
            for (int v = 0; v < V; ++v) sum += std::exp((double)row[v] - top);
            a.loss += std::log(sum) + top - row[ids[w + i + 1]];
            a.top.push_back(argmax(row, V));
        }
        a.positions += T;
    }
    if (a.positions > 0) a.loss /= (double)a.positions;
    return a;
}

}  // namespace

int bench_decode(int argc, char** argv) {
    const int rank = MpiCommunicator(MPI_COMM_WORLD).rank();
    std::string checkpoint, text_path;
    GptConfig cfg;
    cfg.vocab_size = 50257, cfg.block_size = 1024, cfg.n_layer = 12, cfg.n_head = 12, cfg.n_embd = 768;
    int tokens = 100, prompt_tokens = 4, repeats = 3, threads = 1;
    namespace po = boost::program_options;
    po::options_description desc;
    desc.add_options()("checkpoint", po::value(&checkpoint))("text", po::value(&text_path))(
        "vocab", po::value(&cfg.vocab_size))("block-size", po::value(&cfg.block_size))(
        "n-layer", po::value(&cfg.n_layer))("n-head", po::value(&cfg.n_head))("n-embd", po::value(&cfg.n_embd))(
        "tokens", po::value(&tokens))("prompt-tokens", po::value(&prompt_tokens))("repeats", po::value(&repeats))(
        "threads", po::value(&threads));
    parse_subcommand(argc, argv, desc);
    if (!text_path.empty() && checkpoint.empty())
        throw po::error("--text needs --checkpoint (its tokenizer reads the text, its weights are scored)");
    if (repeats < 1 || threads < 1 || prompt_tokens < 1)
        throw po::error("--prompt-tokens, --repeats and --threads must be at least 1");
    if (tokens < 2) throw po::error("--tokens must be at least 2 (the first comes from the prompt's call)");
    InferenceModel m;
    if (!checkpoint.empty()) {
        m = load_inference_model(checkpoint);
        cfg = m.cfg;
    } else {
        if (cfg.vocab_size < 2 || cfg.block_size < 2 || cfg.n_layer < 1 || cfg.n_head < 1 || cfg.n_embd < 1 ||
            cfg.n_embd % cfg.n_head != 0)
            throw po::error("the shape needs --vocab and --block-size of 2 or more, and --n-embd a multiple of --n-head");
        m.params.resize(Gpt::count_params(cfg));
        Gpt(cfg, 0).init(m.params.data(), 1);
    }
    if (prompt_tokens + tokens > cfg.block_size)
        throw po::error(strfmt("--prompt-tokens %d + --tokens %d exceed the block size %d", prompt_tokens, tokens,
                               cfg.block_size));
    std::vector<int> text_ids;
    if (!text_path.empty()) {
        if (access(text_path.c_str(), R_OK) != 0)
            throw UserError(strfmt("--text %s: cannot read it: %s", text_path.c_str(), std::strerror(errno)));
        text_ids = m.tok.encode(read_texts({text_path}));
        if ((long)text_ids.size() < cfg.block_size + 1)
            throw UserError(strfmt("--text %s: %zu tokens, fewer than one window of %d + 1", text_path.c_str(),
                                   text_ids.size(), cfg.block_size));
    }
    if (rank != 0) return 0;
    cpu::set_threads(threads);
    std::vector<int> prompt(prompt_tokens);
    for (int i = 0; i < prompt_tokens; ++i)
        prompt[i] = text_ids.empty() ? (i * 7919) % cfg.vocab_size : text_ids[i];
    std::printf("# dptrain-bench decode: %s (%s), %zu parameters; %d thread%s; greedy, %d tokens after %d\n",
                checkpoint.empty() ? "GPT-2's initialisation" : checkpoint.c_str(), Gpt(cfg, 0).signature().c_str(),
                m.params.size(), threads, threads == 1 ? "" : "s", tokens, prompt_tokens);
    std::vector<int> greedy_ids[2];
    double rate[2] = {0, 0};
    Answers answers[2];
    const Precision precisions[2] = {Precision::fp32, Precision::bf16};
    for (int k = 0; k < 2; ++k) {
        std::unique_ptr<Decoder> dec = make_cpu_decoder(cfg, precisions[k]);
        dec->reserve(1, cfg.block_size);
        dec->set_params(m.params.data());
        for (int r = 0; r < repeats; ++r) {
            const double s = greedy(*dec, cfg, prompt, tokens, &greedy_ids[k]);
            rate[k] = std::max(rate[k], (tokens - 1) / s);
        }
        if (!text_ids.empty()) answers[k] = score(*dec, cfg, text_ids);
    }
    int same = 0;
    while (same < tokens && greedy_ids[0][same] == greedy_ids[1][same]) ++same;
    std::printf("%-26s %12s %12s %8s\n", "", "fp32", "bf16", "ratio");
    std::printf("%-26s %12.1f %12.1f %7.2fx\n", "tokens/s (best)", rate[0], rate[1], rate[1] / rate[0]);
    std::printf("greedy tokens equal before the first difference: %d of %d\n", same, tokens);
    if (!text_ids.empty()) {
        long agree = 0;
        for (size_t i = 0; i < answers[0].top.size(); ++i) agree += answers[0].top[i] == answers[1].top[i];
        std::printf("%-26s %12.5f %12.5f %+9.5f\n", "next-token loss (nats)", answers[0].loss, answers[1].loss,
                    answers[1].loss - answers[0].loss);
        std::printf("argmax equal at %ld of %ld positions (%.2f%%) of --text, in windows of %d\n", agree,
                    answers[0].positions, 100.0 * (double)agree / (double)std::max(1l, answers[0].positions),
                    cfg.block_size);
    }
    return 0;
}

} // namespace dptrain
