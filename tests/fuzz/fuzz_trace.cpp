// libFuzzer target: dptrain-report trace's reading of a rank's trace file. Every input must end in
// its events or a UserError (a file cut short is refused, never merged into invalid JSON).
#include "memfile.h"

#include "dptrain/core/error.h"
#include "dptrain/tools/trace_merge.h"

using namespace dptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    MemFile f(data, size);
    if (!f.ok()) return 0;
    try {
        (void)json_text(trace_events(f.path()));
    } catch (const UserError&) {
    }
    return 0;
}
