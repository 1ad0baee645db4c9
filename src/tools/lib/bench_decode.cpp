// dptrain-bench decode: a decoder (the CPU's, or a GPU's with --device cuda) with fp32 weights
// beside bf16, on a checkpoint or a GPT-2-initialised model of any shape (GPT-2 124M's by
// default): greedy tokens a second for one sequence and for --streams decoded together (on a GPU
// also launched kernel by kernel, against its CUDA graphs), how long the two precisions agree, and
// with --text each position's loss and argmax under both. Not for: serving under load
// (dptrain-serve) or training.
#include "dptrain/tools/bench.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/decoders.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/model/decoder.h"
#include "dptrain/tools/cli.h"
#include "dptrain/tools/text_files.h"
#include "dptrain/infer/inference_model.h"

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

// Greedy, picked by the decoder (a GPU hands back the ids alone, as generate and serve use it).
TokenDraw greedy_draw(int V) {
    TokenDraw d;
    d.vocab = V;
    return d;
}

// One token a call; the ids in *out. Returns the token calls' seconds (not the prompt's).
double greedy(Decoder& dec, const GptConfig& cfg, const std::vector<int>& prompt, int tokens, std::vector<int>* out) {
    const int P = (int)prompt.size();
    const TokenDraw d = greedy_draw(cfg.vocab_size);
    std::vector<int> slot(P, 0), pos(P);
    for (int i = 0; i < P; ++i) pos[i] = i;
    const int last = P - 1;
    int id = 0;
    dec.decode_pick(prompt.data(), slot.data(), pos.data(), P, &last, 1, &d, &id);
    out->assign(1, id);
    const double t0 = now_seconds();
    for (int n = 1; n < tokens; ++n) {
        const int tok = out->back(), s = 0, p = P + n - 1;
        dec.decode_pick(&tok, &s, &p, 1, nullptr, 0, &d, &id);
        out->push_back(id);
    }
    return now_seconds() - t0;
}

// S sequences (slots 0..S-1), each the prompt, decoded together: the prompts in one call, then one
// row of each a call. Returns the token calls' seconds.
double batched(Decoder& dec, const GptConfig& cfg, const std::vector<int>& prompt, int tokens, int S) {
    const int P = (int)prompt.size();
    const std::vector<TokenDraw> draws(S, greedy_draw(cfg.vocab_size));
    std::vector<int> tok, slot, pos, outs, ids(S);
    for (int s = 0; s < S; ++s) {
        for (int i = 0; i < P; ++i) tok.push_back(prompt[i]), slot.push_back(s), pos.push_back(i);
        outs.push_back(s * P + P - 1);
    }
    dec.decode_pick(tok.data(), slot.data(), pos.data(), S * P, outs.data(), S, draws.data(), ids.data());
    slot.resize(S);
    pos.resize(S);
    for (int s = 0; s < S; ++s) slot[s] = s;
    const double t0 = now_seconds();
    for (int n = 1; n < tokens; ++n) {
        std::fill(pos.begin(), pos.end(), P + n - 1);
        tok = ids;
        dec.decode_pick(tok.data(), slot.data(), pos.data(), S, nullptr, 0, draws.data(), ids.data());
    }
    return now_seconds() - t0;
}

struct Answers {
    double loss = 0;  // mean next-token cross-entropy, nats
    long positions = 0;
    std::vector<int> top;  // argmax per position
};

// Windows of T (+1 for the targets), each one prompt call of T rows.
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

struct DecodeBench {
    std::string checkpoint, text_path;
    GptConfig cfg;  // without a checkpoint: the shape to initialise
    int tokens = 100, prompt_tokens = 4, repeats = 3, threads = 1, streams = 8;
    DeviceKind device = DeviceKind::cpu;
};

DecodeBench parse_decode(int argc, char** argv) {
    namespace po = boost::program_options;
    DecodeBench b;
    std::string device = "cpu";
    GptConfig& c = b.cfg;
    c.vocab_size = 50257, c.block_size = 1024, c.n_layer = 12, c.n_head = 12, c.n_embd = 768;
    po::options_description desc;
    desc.add_options()("checkpoint", po::value(&b.checkpoint))("text", po::value(&b.text_path))(
        "vocab", po::value(&c.vocab_size))("block-size", po::value(&c.block_size))("n-layer", po::value(&c.n_layer))(
        "n-head", po::value(&c.n_head))("n-embd", po::value(&c.n_embd))("tokens", po::value(&b.tokens))(
        "prompt-tokens", po::value(&b.prompt_tokens))("repeats", po::value(&b.repeats))("threads", po::value(&b.threads))(
        "streams", po::value(&b.streams))("device", po::value(&device));
    parse_subcommand(argc, argv, desc);
    b.device = parse_device_kind(device);
    if (!b.text_path.empty() && b.checkpoint.empty())
        throw po::error("--text needs --checkpoint (its tokenizer reads the text, its weights are scored)");
    if (b.repeats < 1 || b.threads < 1 || b.prompt_tokens < 1 || b.streams < 1)
        throw po::error("--prompt-tokens, --repeats, --threads and --streams must be at least 1");
    if (b.tokens < 2) throw po::error("--tokens must be at least 2 (the first comes from the prompt's call)");
    if (b.checkpoint.empty() && (c.vocab_size < 2 || c.block_size < 2 || c.n_layer < 1 || c.n_head < 1 ||
                                 c.n_embd < 1 || c.n_embd % c.n_head != 0))
        throw po::error("the shape needs --vocab and --block-size of 2 or more, and --n-embd a multiple of --n-head");
    return b;
}

// b.cfg becomes the checkpoint's shape, else GPT-2's initialisation of b.cfg.
InferenceModel model_for(DecodeBench& b) {
    InferenceModel m;
    if (!b.checkpoint.empty()) {
        m = load_inference_model(b.checkpoint);
        b.cfg = m.cfg;
    } else {
        m.params.resize(Gpt::count_params(b.cfg));
        Gpt(b.cfg, 0).init(m.params.data(), 1);
    }
    if (b.prompt_tokens + b.tokens > b.cfg.block_size)
        throw boost::program_options::error(strfmt("--prompt-tokens %d + --tokens %d exceed the block size %d",
                                                   b.prompt_tokens, b.tokens, b.cfg.block_size));
    return m;
}

// At least one window; none without --text.
std::vector<int> text_tokens(const DecodeBench& b, const Tokenizer& tok) {
    if (b.text_path.empty()) return {};
    if (access(b.text_path.c_str(), R_OK) != 0)
        throw UserError(strfmt("--text %s: cannot read it: %s", b.text_path.c_str(), std::strerror(errno)));
    std::vector<int> ids = tok.encode(read_texts({b.text_path}));
    if ((long)ids.size() < b.cfg.block_size + 1)
        throw UserError(strfmt("--text %s: %zu tokens, fewer than one window of %d + 1", b.text_path.c_str(),
                               ids.size(), b.cfg.block_size));
    return ids;
}

struct Measured {
    std::vector<int> greedy_ids;
    double rate = 0, batched_rate = 0;  // tokens/s, the best run: one sequence, --streams together
    double eager_rate = 0, eager_batched_rate = 0;  // a GPU's kernel by kernel (0: no graphs)
    std::string where;
    Answers answers;
};

// The best of --repeats runs, one sequence and --streams together.
void rates(Decoder& dec, const DecodeBench& b, const std::vector<int>& prompt, std::vector<int>* ids, double* one,
           double* many) {
    for (int r = 0; r < b.repeats; ++r) {
        *one = std::max(*one, (b.tokens - 1) / greedy(dec, b.cfg, prompt, b.tokens, ids));
        *many = std::max(*many, (double)b.streams * (b.tokens - 1) / batched(dec, b.cfg, prompt, b.tokens, b.streams));
    }
}

Measured measure(const DecodeBench& b, Precision weights, const std::vector<float>& params,
                 const std::vector<int>& prompt, const std::vector<int>& text_ids) {
    Measured out;
    std::unique_ptr<Decoder> dec = make_decoder(b.device, b.cfg, weights);
    out.where = dec->where();
    dec->reserve(std::max(1, b.streams), std::max(b.cfg.block_size, b.streams * b.prompt_tokens));
    dec->set_params(params.data());
    rates(*dec, b, prompt, &out.greedy_ids, &out.rate, &out.batched_rate);
    if (dec->set_graphs(false)) {
        std::vector<int> ids;
        rates(*dec, b, prompt, &ids, &out.eager_rate, &out.eager_batched_rate);
        dec->set_graphs(true);
    }
    if (!text_ids.empty()) out.answers = score(*dec, b.cfg, text_ids);
    return out;
}

void print_results(const DecodeBench& b, const Measured& f, const Measured& h) {
    int same = 0;
    while (same < b.tokens && f.greedy_ids[same] == h.greedy_ids[same]) ++same;
    const auto row = [](const std::string& what, double x, double y) {
        std::printf("%-26s %12.1f %12.1f %7.2fx\n", what.c_str(), x, y, y / x);
    };
    std::printf("%-26s %12s %12s %8s\n", "", "fp32", "bf16", "ratio");
    row("tokens/s (best)", f.rate, h.rate);
    row(strfmt("tokens/s, %d streams", b.streams), f.batched_rate, h.batched_rate);
    if (f.eager_rate > 0) {  // CUDA graphs against launching kernel by kernel
        row("no graphs: tokens/s", f.eager_rate, h.eager_rate);
        row(strfmt("no graphs: %d streams", b.streams), f.eager_batched_rate, h.eager_batched_rate);
        std::printf("graphs' speed-up, fp32: %.2fx one stream, %.2fx %d streams; bf16: %.2fx, %.2fx\n",
                    f.rate / f.eager_rate, f.batched_rate / f.eager_batched_rate, b.streams, h.rate / h.eager_rate,
                    h.batched_rate / h.eager_batched_rate);
    }
    std::printf("greedy tokens equal before the first difference: %d of %d\n", same, b.tokens);
    if (b.text_path.empty()) return;
    long agree = 0;
    for (size_t i = 0; i < f.answers.top.size(); ++i) agree += f.answers.top[i] == h.answers.top[i];
    std::printf("%-26s %12.5f %12.5f %+9.5f\n", "next-token loss (nats)", f.answers.loss, h.answers.loss,
                h.answers.loss - f.answers.loss);
    std::printf("argmax equal at %ld of %ld positions (%.2f%%) of --text, in windows of %d\n", agree,
                f.answers.positions, 100.0 * (double)agree / (double)std::max(1l, f.answers.positions),
                b.cfg.block_size);
}

}  // namespace

int bench_decode(int argc, char** argv) {
    const int rank = MpiCommunicator(MPI_COMM_WORLD).rank();
    DecodeBench b = parse_decode(argc, argv);
    const InferenceModel m = model_for(b);
    const std::vector<int> text_ids = text_tokens(b, *m.tok);
    if (rank != 0) return 0;
    cpu::set_threads(b.threads);
    std::vector<int> prompt(b.prompt_tokens);
    for (int i = 0; i < b.prompt_tokens; ++i)
        prompt[i] = text_ids.empty() ? (i * 7919) % b.cfg.vocab_size : text_ids[i];
    const Measured fp32 = measure(b, Precision::fp32, m.params, prompt, text_ids);
    const Measured bf16 = measure(b, Precision::bf16, m.params, prompt, text_ids);
    std::printf("# dptrain-bench decode: %s (%s), %zu parameters, on %s; %d thread%s; greedy, %d tokens after %d\n",
                b.checkpoint.empty() ? "GPT-2's initialisation" : b.checkpoint.c_str(),
                Gpt(b.cfg, 0).signature().c_str(), m.params.size(), fp32.where.c_str(), b.threads,
                b.threads == 1 ? "" : "s", b.tokens, b.prompt_tokens);
    print_results(b, fp32, bf16);
    return 0;
}

} // namespace dptrain
