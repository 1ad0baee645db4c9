// libFuzzer target: dptrain-data ingest's CSV reader. The first byte picks the label column (-2 to
// 2) and whether the first line may be a header; the rest is the file. Every input must end in a
// table or a UserError.
#include "memfile.h"

#include "dptrain/core/error.h"
#include "dptrain/tools/ingest.h"

using namespace dptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    MemFile f(data + 1, size - 1);
    if (!f.ok()) return 0;
    try {
        ingest::Table t = ingest::read_csv(f.path(), (int)(data[0] % 5) - 2, (data[0] & 8) != 0);
        (void)t.max_label();
    } catch (const UserError&) {
    }
    return 0;
}
