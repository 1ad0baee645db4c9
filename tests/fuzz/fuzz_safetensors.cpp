// libFuzzer target: the safetensors reader (--init-from, dptrain-ckpt logits), and the conversion of
// each tensor it accepts to float32 as an import does. Every input must end in tensors or a
// UserError.
#include "dptrain/core/error.h"
#include "dptrain/io/safetensors.h"

#include <cstdint>
#include <string>
#include <vector>

using namespace dptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        Safetensors s = Safetensors::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
        std::vector<float> out;
        for (const SafeTensor& t : s.tensors()) {
            if (s.find(t.name) != &t) continue;  // a repeated name: the first one is what import reads
            out.resize(t.count());
            try {
                s.to_float(t, out.data());
            } catch (const UserError&) {  // an integer dtype
            }
        }
    } catch (const UserError&) {
    }
    return 0;
}
