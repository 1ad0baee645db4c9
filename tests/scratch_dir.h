// Scratch directories for test programs: made under /tmp, removed with their contents when the
// program ends (normally or through exit(), as libFuzzer ends), so test runs leave /tmp as they
// found it.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace dptrain_test {

class ScratchDirs {
  public:
    ~ScratchDirs() {
        for (const std::string& d : made_) {
            std::error_code ec;
            std::filesystem::remove_all(d, ec);
        }
    }
    // A new directory $TMPDIR/dptrain-TAG-XXXXXX ($TMPDIR unset or empty: /tmp).
    std::string make(const std::string& tag) {
        const char* tmp = getenv("TMPDIR");
        std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/dptrain-" + tag + "-XXXXXX";
        if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp " + path + " failed");
        made_.push_back(path);
        return path;
    }

  private:
    std::vector<std::string> made_;
};

// The program's one set, destroyed after main returns.
inline std::string scratch_dir(const std::string& tag) {
    static ScratchDirs dirs;
    return dirs.make(tag);
}

} // namespace dptrain_test
