// libFuzzer target: the readers of token files (dptrain-data tokens): nanoGPT's raw uint16, llm.c's
// header and ids, NumPy arrays, told apart by their first bytes (HDF5 files aside). Every input must end in ids below
// the vocabulary or a UserError naming the file; any other exception, crash or sanitizer report
// is a bug.
#include "memfile.h"

#include "dptrain/core/error.h"
#include "dptrain/tools/token_files.h"

#include <cstdlib>
#include <cstring>

using namespace dptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // Raw bytes are not fed to HDF5 (its 1.10 parser can crash on corrupt files; fuzz_shard.cpp
    // says more): an input with HDF5's signature is skipped.
    if (size >= 8 && std::memcmp(data, "\x89HDF\r\n\x1a\n", 8) == 0) return 0;
    MemFile f(data, size);
    if (!f.ok()) return 0;
    try {
        for (uint32_t id : token_files::read(f.path(), token_files::Format::automatic, 50257))
            if (id >= 50257) std::abort();  // an id the reader should have refused
    } catch (const UserError&) {
    }
    return 0;
}
