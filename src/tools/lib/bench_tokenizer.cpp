// dptrain-bench tokenizer: how fast GPT-2's BPE encodes and decodes a text, on one core. Cold: a
// tokenizer just loaded (its piece cache empty), as dptrain-data text sees a corpus; warm: the
// same text again, every piece remembered. The peer (js-tiktoken on the same text) runs beside it
// in bench/tokenizer.sh.
#include "dptrain/tools/bench.h"

#include "dptrain/comm/communicator.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/data/tokens.h"
#include "dptrain/tools/cli.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace dptrain {

int bench_tokenizer(int argc, char** argv) {
    namespace po = boost::program_options;
    std::string encoder, merges, input;
    int repeats = 5;
    po::options_description desc;
    desc.add_options()("encoder", po::value(&encoder))("merges", po::value(&merges))("input", po::value(&input))(
        "repeats", po::value(&repeats));
    parse_subcommand(argc, argv, desc);
    if (encoder.empty() || merges.empty() || input.empty() || repeats < 1)
        throw po::error("tokenizer needs --encoder, --merges and --input, and --repeats at least 1");
    if (MpiCommunicator(MPI_COMM_WORLD).rank() != 0) return 0;
    std::ifstream in(input, std::ios::binary);
    std::ostringstream all;
    all << in.rdbuf();
    if (!in) throw UserError(strfmt("--input %s: cannot read", input.c_str()));
    const std::string text = all.str();
    const double mb = text.size() / 1e6;
    double load_s = 1e30, cold_s = 1e30, warm_s = 1e30, decode_s = 1e30;
    std::vector<int> ids;
    for (int r = 0; r < repeats; ++r) {
        double t0 = now_seconds();
        const Tokenizer tok = Tokenizer::gpt2(encoder, merges);
        double t1 = now_seconds();
        ids = tok.encode(text);
        double t2 = now_seconds();
        ids = tok.encode(text);
        double t3 = now_seconds();
        const std::string back = tok.decode(ids);
        double t4 = now_seconds();
        if (back != text) throw UserError("the decoded text differs from the input: a tokenizer bug");
        load_s = std::min(load_s, t1 - t0), cold_s = std::min(cold_s, t2 - t1);
        warm_s = std::min(warm_s, t3 - t2), decode_s = std::min(decode_s, t4 - t3);
    }
    std::printf("# dptrain-bench tokenizer: GPT-2 BPE on %s (%.2f MB, %zu ids, %.2f bytes an id), best of %d\n",
                input.c_str(), mb, ids.size(), text.size() / (double)ids.size(), repeats);
    std::printf("load encoder.json + vocab.bpe   %8.1f ms\n", 1e3 * load_s);
    std::printf("encode, cold (cache empty)      %8.1f ms  %7.1f MB/s\n", 1e3 * cold_s, mb / cold_s);
    std::printf("encode, warm (pieces cached)    %8.1f ms  %7.1f MB/s\n", 1e3 * warm_s, mb / warm_s);
    std::printf("decode                          %8.1f ms  %7.1f MB/s\n", 1e3 * decode_s, mb / decode_s);
    return 0;
}

} // namespace dptrain
