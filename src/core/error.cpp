// strfmt, the process identity used in error lines, and the failed check's line (check.h).
// Not for: ending the job (fatal.cpp).
#include "dptrain/core/check.h"
#include "dptrain/core/error.h"

#include <cstdarg>
#include <cstdio>
#include <vector>

namespace dptrain {

std::string strfmt(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = std::vsnprintf(nullptr, 0, fmt, ap);
    va_end(ap);
    std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
    if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, ap2);
    va_end(ap2);
    return out;
}

static std::string g_identity = "rank ? on ?";

void set_process_identity(int rank, const std::string& host) {
    g_identity = strfmt("rank %d on %s", rank, host.c_str());
}

std::string process_identity() { return g_identity; }

[[noreturn]] void check_failed(const char* lib, const std::string& status, const char* call, const char* file,
                               int line) {
    fatal(strfmt("%s error %s in %s at %s:%d", lib, status.c_str(), call, file, line));
}

} // namespace dptrain
