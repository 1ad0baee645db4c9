// libFuzzer target: the SHA256SUMS reader (dptrain-data verify, --verify-data, staging). Any input
// must end in (sum, name) pairs of 64 hex digits and a non-empty relative name without a ..
// component, or a UserError naming the file and line; any other exception, crash or sanitizer
// report is a bug.
#include "dptrain/core/error.h"
#include "dptrain/data/stage.h"
#include "../scratch_dir.h"

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace dptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string dir = dptrain_test::scratch_dir("fuzz-sums");
    FILE* f = std::fopen((dir + "/SHA256SUMS").c_str(), "wb");
    if (!f) return 0;
    const bool written = size == 0 || std::fwrite(data, 1, size, f) == size;
    if (std::fclose(f) != 0 || !written) return 0;
    try {
        for (const auto& entry : read_sums(dir))
            if (entry.first.size() != 64 || entry.first.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos ||
                entry.second.empty() || entry.second[0] == '/' ||
                ("/" + entry.second + "/").find("/../") != std::string::npos)
                std::abort();  // a line the reader should have refused
    } catch (const UserError&) {
    }
    return 0;
}
