// libFuzzer target: the checkpoint reader, fed arbitrary bytes as a checkpoint file. Loading must
// end in a verified state or a UserError.
#include "dptrain/io/checkpoint.h"
#include "dptrain/core/error.h"
#include "../scratch_dir.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

using namespace dptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static std::string path = dptrain_test::scratch_dir("fuzz-ckpt") + "/ckpt-00000001.h5";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return 0;
    std::fwrite(data, 1, size, f);
    std::fclose(f);
    try {
        CheckpointState s = load_checkpoint(path);
        (void)s;
    } catch (const UserError&) {
    }
    return 0;
}
