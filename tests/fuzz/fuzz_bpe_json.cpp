// libFuzzer target: a Hugging Face tokenizer.json (a byte-level BPE), then a NUL byte, then text.
// The file must build a tokenizer or throw UserError naming what is wrong; a tokenizer built must
// encode the text (and the file itself) into ids whose bytes give the text back, and give itself
// back, ids and all (the post_processor's around a sequence too), from its stored table and from
// the tokenizer.json it writes. Anything else
// (another exception, a crash, a sanitizer report, a failed round trip) is a bug.
#include "dptrain/core/error.h"
#include "dptrain/data/bpe.h"

#include <cstdlib>
#include <string>

using namespace dptrain;

static std::string bytes_of(const Gpt2Bpe& bpe, const std::vector<int>& ids) {
    std::string out;
    for (int id : ids) {
        if (id < 0 || id >= bpe.size()) std::abort();
        out += bpe.bytes_of(id);
    }
    return out;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string in(reinterpret_cast<const char*>(data), size);
    const size_t nul = in.find('\0');
    const std::string json = in.substr(0, nul), text = nul == std::string::npos ? in : in.substr(nul + 1);
    std::shared_ptr<const Gpt2Bpe> bpe;
    try {
        bpe = Gpt2Bpe::parse_tokenizer_json(json, "fuzz");
    } catch (const UserError&) {
        return 0;
    }
    for (const std::vector<int>* around : {&bpe->sequence_prefix(), &bpe->sequence_suffix()})
        (void)bytes_of(*bpe, *around);  // the ids around a sequence are tokens
    for (const std::string* t : {&text, &json}) {
        std::vector<int> ids;
        bpe->encode(*t, &ids);
        if (bytes_of(*bpe, ids) != *t) std::abort();
        for (const auto& again : {Gpt2Bpe::from_table(bpe->table()),
                                  Gpt2Bpe::parse_tokenizer_json(bpe->tokenizer_json(), "fuzz again")}) {
            std::vector<int> ids2;
            again->encode(*t, &ids2);
            if (ids2 != ids) std::abort();
            if (again->sequence_prefix() != bpe->sequence_prefix() || again->sequence_suffix() != bpe->sequence_suffix())
                std::abort();
        }
    }
    return 0;
}
