// libFuzzer target: GPT-2's tokenizer files (encoder.json, then a NUL byte, then vocab.bpe) and
// the text it encodes. A file pair must build a tokenizer or throw UserError naming the entry;
// a tokenizer built must encode any bytes (the input itself) into ids that decode to them, and
// give itself back from its stored table. Anything else (another exception, a crash, a sanitizer
// report, a failed round trip) is a bug.
#include "dptrain/core/error.h"
#include "dptrain/data/bpe.h"

#include <cstdlib>
#include <string>

using namespace dptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string in(reinterpret_cast<const char*>(data), size);
    const size_t nul = in.find('\0');
    const std::string encoder = in.substr(0, nul), merges = nul == std::string::npos ? "" : in.substr(nul + 1);
    std::shared_ptr<const Gpt2Bpe> bpe;
    try {
        bpe = Gpt2Bpe::parse(encoder, merges, "fuzz");
    } catch (const UserError&) {
        return 0;
    }
    std::vector<int> ids;
    bpe->encode(in, &ids);
    std::string back;
    for (int id : ids) {
        if (id < 0 || id >= bpe->size()) std::abort();
        back += bpe->bytes_of(id);
    }
    if (back != in) std::abort();
    auto again = Gpt2Bpe::from_table(bpe->table());
    std::vector<int> ids2;
    again->encode(in, &ids2);
    if (ids2 != ids) std::abort();
    return 0;
}
