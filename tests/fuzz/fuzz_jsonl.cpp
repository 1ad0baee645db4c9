// libFuzzer target: the JSON-lines reader (dptrain-report plot's metrics.jsonl) and the strict
// JSON parser under it. Every input must end in records or a UserError naming the file and line;
// any other exception, crash or sanitizer report is a bug.
#include "memfile.h"

#include "dptrain/core/error.h"
#include "dptrain/tools/json.h"

using namespace dptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    MemFile f(data, size);
    if (!f.ok()) return 0;
    try {
        for (const JsonRecord& r : read_jsonl_records(f.path())) (void)json_number_or(r.value, "step", 0);
    } catch (const UserError&) {
    }
    return 0;
}
