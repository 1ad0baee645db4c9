// /proc/self/status and /proc/meminfo, read with stdio (no allocation beyond a line).
#include "dptrain/core/memory.h"

#include "dptrain/core/error.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dptrain {

// The "KEY: N kB" line of a /proc file, in bytes.
static size_t proc_kib(const char* file, const char* key) {
    std::FILE* f = std::fopen(file, "r");
    if (!f) return 0;
    char line[256];
    size_t bytes = 0;
    const size_t n = std::strlen(key);
    while (std::fgets(line, sizeof line, f))
        if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
            bytes = (size_t)std::strtoull(line + n + 1, nullptr, 10) * 1024;
            break;
        }
    std::fclose(f);
    return bytes;
}

size_t resident_bytes() { return proc_kib("/proc/self/status", "VmRSS"); }

size_t peak_resident_bytes() { return proc_kib("/proc/self/status", "VmHWM"); }

size_t available_bytes() { return proc_kib("/proc/meminfo", "MemAvailable"); }

size_t parse_bytes(const std::string& text, const char* what) {
    const char* s = text.c_str();
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    while (end && *end == ' ') ++end;
    std::string unit = end ? end : "";
    for (char& c : unit) c = (char)std::tolower((unsigned char)c);
    double scale = -1;
    if (unit.empty() || unit == "b") scale = 1;
    else if (unit == "k" || unit == "kb" || unit == "kib") scale = 1024.0;
    else if (unit == "m" || unit == "mb" || unit == "mib") scale = 1024.0 * 1024;
    else if (unit == "g" || unit == "gb" || unit == "gib") scale = 1024.0 * 1024 * 1024;
    else if (unit == "t" || unit == "tb" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
    if (end == s || scale < 0 || !std::isfinite(v) || v <= 0 || v * scale > 1e18)
        throw UserError(strfmt("%s %s: give a positive size such as 80GiB, 40GiB or 512MiB", what, text.c_str()));
    return (size_t)(v * scale);
}

} // namespace dptrain
