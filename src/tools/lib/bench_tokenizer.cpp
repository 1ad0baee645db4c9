// dptrain-bench tokenizer: GPT-2's BPE and a SentencePiece model encoding and decoding a text on
// one core, cold (just loaded, as dptrain-data text sees it) and warm. Not for: the peers
// (bench/tokenizer.sh runs them beside it).
#include "dptrain/tools/bench.h"

#include "dptrain/comm/communicator.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/data/tokenizer.h"
#include "dptrain/tools/cli.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

namespace dptrain {

namespace {

// Best of `repeats`; one row per measure.
void measure(const std::string& name, const std::function<TokenizerPtr()>& make, const std::string& text, int repeats) {
    const double mb = text.size() / 1e6;
    double load_s = 1e30, cold_s = 1e30, warm_s = 1e30, decode_s = 1e30;
    std::vector<int> ids;
    for (int r = 0; r < repeats; ++r) {
        const double t0 = now_seconds();
        const TokenizerPtr tok = make();
        const double t1 = now_seconds();
        ids = tok->encode(text);
        const double t2 = now_seconds();
        ids = tok->encode(text);
        const double t3 = now_seconds();
        const std::string back = tok->decode(ids);
        const double t4 = now_seconds();
        if (back != text) throw UserError(name + ": the decoded text differs from the input: a tokenizer bug");
        load_s = std::min(load_s, t1 - t0), cold_s = std::min(cold_s, t2 - t1);
        warm_s = std::min(warm_s, t3 - t2), decode_s = std::min(decode_s, t4 - t3);
    }
    std::printf("%s: %zu ids, %.2f bytes an id\n", name.c_str(), ids.size(), text.size() / (double)ids.size());
    std::printf("  load                          %8.1f ms\n", 1e3 * load_s);
    std::printf("  encode, cold (cache empty)    %8.1f ms  %7.1f MB/s\n", 1e3 * cold_s, mb / cold_s);
    std::printf("  encode, warm (pieces cached)  %8.1f ms  %7.1f MB/s\n", 1e3 * warm_s, mb / warm_s);
    std::printf("  decode                        %8.1f ms  %7.1f MB/s\n", 1e3 * decode_s, mb / decode_s);
}

} // namespace

int bench_tokenizer(int argc, char** argv) {
    namespace po = boost::program_options;
    std::string encoder, merges, sp_model, input;
    int repeats = 5;
    po::options_description desc;
    desc.add_options()("encoder", po::value(&encoder))("merges", po::value(&merges))("sp-model", po::value(&sp_model))(
        "input", po::value(&input))("repeats", po::value(&repeats));
    parse_subcommand(argc, argv, desc);
    if (input.empty() || repeats < 1 || encoder.empty() != merges.empty() || (encoder.empty() && sp_model.empty()))
        throw po::error("tokenizer needs --input, --encoder and --merges (gpt2) or --sp-model (sentencepiece) or both, "
                        "and --repeats at least 1");
    if (MpiCommunicator(MPI_COMM_WORLD).rank() != 0) return 0;
    std::ifstream in(input, std::ios::binary);
    std::ostringstream all;
    all << in.rdbuf();
    if (!in) throw UserError(strfmt("--input %s: cannot read", input.c_str()));
    const std::string text = all.str();
    std::printf("# dptrain-bench tokenizer: %s (%.2f MB), best of %d\n", input.c_str(), text.size() / 1e6, repeats);
    if (!encoder.empty()) measure("gpt2 (GPT-2's BPE)", [&]() -> TokenizerPtr { return make_gpt2_tokenizer(encoder, merges); }, text, repeats);
    if (!sp_model.empty())
        measure("sentencepiece " + sp_model, [&]() -> TokenizerPtr { return make_sentencepiece_tokenizer(SentencePieceModel::load(sp_model)); },
                text, repeats);
    return 0;
}

} // namespace dptrain
