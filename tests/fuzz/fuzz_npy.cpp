// libFuzzer target: the .npy reader, and its conversions to float32 and int64 (what ingest does
// with every array). Every input must end in an array or a UserError.
#include "dptrain/core/error.h"
#include "dptrain/tools/npy.h"

#include <cstdint>
#include <string>

using namespace dptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        npy::Array a = npy::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz.npy");
        (void)npy::dtype_name(a);
        // As ingest does: any numeric array converts to float32, integer ones (and bools) to int64.
        if (a.kind == 'f' || a.kind == 'i' || a.kind == 'u' || a.kind == 'b') (void)npy::to_float32(a);
        if (a.kind == 'i' || a.kind == 'u' || a.kind == 'b') (void)npy::to_int64(a);
    } catch (const UserError&) {
    }
    return 0;
}
