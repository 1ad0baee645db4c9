// /proc/self/status, /proc/meminfo and the cgroups' memory limits, read with stdio.
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

// Calls look(dir) for the cgroup `rel` and each of its parents up to the hierarchy's root: a
// container sees its own limit at its root, a Slurm job or a pod's cgroup below it.
template <typename Look>
static void up_from(const std::string& root, std::string rel, Look look) {
    for (;;) {
        look(root + (rel == "/" ? "" : rel));
        if (rel.empty() || rel == "/") return;
        const size_t slash = rel.rfind('/');
        rel = slash == 0 || slash == std::string::npos ? "/" : rel.substr(0, slash);
    }
}

// The first line of a small file; false when it cannot be read.
static bool first_line(const std::string& path, std::string* text) {
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (!f) return false;
    char buf[128] = {};
    const bool got = std::fgets(buf, sizeof buf, f) != nullptr;
    std::fclose(f);
    *text = buf;
    return got;
}

// The tightest limit in `file` on the path of `rel`: "max" (v2) or a v1 value near 2^63 is none.
static size_t tightest(const std::string& root, const std::string& rel, const char* file, std::string* where) {
    size_t best = 0;
    up_from(root, rel, [&](const std::string& dir) {
        std::string text;
        if (!first_line(dir + "/" + file, &text)) return;
        char* end = nullptr;
        const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
        if (end != text.c_str() && v > 0 && v < (1ull << 62) && (best == 0 || v < best)) {
            best = (size_t)v;
            if (where) *where = dir + "/" + file;
        }
    });
    return best;
}

// The quota in CPUs at one cgroup directory, 0 for none: v2 "QUOTA PERIOD" ("max PERIOD": none), v1
// the two files (quota -1: none).
static double cpu_quota(const std::string& dir, bool v2, std::string* file) {
    std::string a, b;
    double quota = 0, period = 0;
    if (v2) {
        *file = dir + "/cpu.max";
        if (!first_line(*file, &a) || std::sscanf(a.c_str(), "%lf %lf", &quota, &period) != 2) return 0;
    } else {
        *file = dir + "/cpu.cfs_quota_us";
        if (!first_line(*file, &a) || !first_line(dir + "/cpu.cfs_period_us", &b)) return 0;
        quota = std::atof(a.c_str()), period = std::atof(b.c_str());
    }
    return quota > 0 && period > 0 ? quota / period : 0;
}

// Each line of /proc/self/cgroup as (controllers, path); v2's line has no controllers.
template <typename Look>
static void each_cgroup(const std::string& self, Look look) {
    std::FILE* f = std::fopen(self.c_str(), "r");
    if (!f) return;
    char line[1024];
    while (std::fgets(line, sizeof line, f)) {
        std::string l(line);
        while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
        const size_t a = l.find(':'), b = a == std::string::npos ? a : l.find(':', a + 1);
        if (b != std::string::npos) look("," + l.substr(a + 1, b - a - 1) + ",", l.substr(b + 1));
    }
    std::fclose(f);
}

size_t cgroup_memory_limit(std::string* where, const std::string& root, const std::string& self) {
    size_t best = 0;
    each_cgroup(self, [&](const std::string& controllers, const std::string& rel) {
        std::string w;
        size_t v = 0;
        if (controllers == ",,") v = tightest(root, rel, "memory.max", &w);  // v2: "0::/path"
        else if (controllers.find(",memory,") != std::string::npos)
            v = tightest(root + "/memory", rel, "memory.limit_in_bytes", &w);  // v1
        if (v > 0 && (best == 0 || v < best)) {
            best = v;
            if (where) *where = w;
        }
    });
    return best;
}

double cgroup_cpu_limit(std::string* where, const std::string& root, const std::string& self) {
    double best = 0;
    each_cgroup(self, [&](const std::string& controllers, const std::string& rel) {
        const bool v2 = controllers == ",,";
        if (!v2 && controllers.find(",cpu,") == std::string::npos) return;
        // v1 mounts cpu alone or as "cpu,cpuacct".
        const std::string base = v2 ? root : root + (controllers == ",cpu," ? "/cpu" : "/cpu,cpuacct");
        up_from(base, rel, [&](const std::string& dir) {
            std::string file;
            const double v = cpu_quota(dir, v2, &file);
            if (v > 0 && (best == 0 || v < best)) {
                best = v;
                if (where) *where = file;
            }
        });
    });
    return best;
}

static size_t env_mib(const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v) return 0;
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    return end && *end == '\0' ? (size_t)n : 0;  // Slurm writes plain MiB
}

size_t slurm_memory_limit(std::string* what) {
    if (const size_t node = env_mib("SLURM_MEM_PER_NODE")) {
        *what = strfmt("SLURM_MEM_PER_NODE=%zu", node);
        return node << 20;
    }
    const size_t per_cpu = env_mib("SLURM_MEM_PER_CPU"), cpus = env_mib("SLURM_CPUS_ON_NODE");
    if (per_cpu == 0 || cpus == 0) return 0;
    *what = strfmt("SLURM_MEM_PER_CPU=%zu x SLURM_CPUS_ON_NODE=%zu", per_cpu, cpus);
    return (per_cpu * cpus) << 20;
}

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
