// libFuzzer target: the option parser, fed command lines and INI files. Every input must end in
// a parse result or a UserError; any other exception, crash or sanitizer report is a bug.
// First byte even: the rest is argv (tokens split at NUL). Odd: the rest is an INI file.
#include "dptrain/core/error.h"
#include "dptrain/config/options.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

using namespace dptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
    std::vector<std::string> args = {"dptrain"};
    int fd = -1;
    if (data[0] % 2 == 0) {
        size_t at = 0;
        while (at <= rest.size()) {
            size_t nul = rest.find('\0', at);
            if (nul == std::string::npos) nul = rest.size();
            args.push_back(rest.substr(at, nul - at));
            at = nul + 1;
        }
    } else {
        fd = memfd_create("ini", 0);
        if (fd < 0 || write(fd, rest.data(), rest.size()) != (ssize_t)rest.size()) return 0;
        args.push_back("--config");
        args.push_back("/proc/self/fd/" + std::to_string(fd));
    }
    std::vector<const char*> argv;
    for (auto& a : args) argv.push_back(a.c_str());
    try {
        ParseResult r = parse_options((int)argv.size(), argv.data());
        if (!r.help && !r.version) (void)r.opts.to_ini();
    } catch (const UserError&) {
    }
    if (fd >= 0) close(fd);
    return 0;
}
