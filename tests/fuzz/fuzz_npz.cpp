// libFuzzer target: the .npz reader (libzip's archive, then each member as .npy), as dptrain-data
// ingest reads it. Every input must end in a table or a UserError.
#include "memfile.h"

#include "dptrain/core/error.h"
#include "dptrain/tools/ingest.h"

using namespace dptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    MemFile f(data, size);
    if (!f.ok()) return 0;
    try {
        (void)ingest::read_npz(f.path(), {"x", "features"}, {"y", "labels"});
    } catch (const UserError&) {
    }
    return 0;
}
