// dptrain-report: after a run.
//   dptrain-report trace OUT.json TRACE-rank00000.json TRACE-rank00001.json ...
//       merges the per-rank Chrome traces of --trace into one file with a track per rank (open it
//       in Perfetto or chrome://tracing).
#include "dptrain/error.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

using namespace dptrain;

// The events of one trace file: the text inside its "traceEvents" array.
static std::string events_of(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw UserError(strfmt("%s: cannot open it", path.c_str()));
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    const std::string key = "\"traceEvents\":[";
    size_t a = s.find(key), b = s.rfind(']');
    if (a == std::string::npos || b == std::string::npos || b < a + key.size())
        throw UserError(strfmt("%s: not a dptrain trace (no traceEvents array)", path.c_str()));
    std::string body = s.substr(a + key.size(), b - a - key.size());
    size_t first = body.find_first_not_of(" \n");
    return first == std::string::npos ? "" : body.substr(first);
}

int main(int argc, char** argv) {
    std::string cmd = argc > 1 ? argv[1] : "";
    try {
        if (cmd == "trace" && argc >= 4) {
            std::string merged;
            for (int i = 3; i < argc; ++i) {
                std::string e = events_of(argv[i]);
                while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
                if (e.empty()) continue;
                merged += (merged.empty() ? "" : ",\n") + e;
            }
            FILE* f = std::fopen(argv[2], "w");
            if (!f) throw UserError(strfmt("%s: cannot write it", argv[2]));
            std::fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n%s\n]}\n", merged.c_str());
            if (std::fclose(f) != 0) throw UserError(strfmt("%s: write failed", argv[2]));
            std::printf("dptrain-report: merged %d rank traces into %s\n", argc - 3, argv[2]);
            return 0;
        }
        std::fprintf(stderr, "usage: dptrain-report trace OUT.json TRACE-rank*.json\n");
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dptrain-report: error: %s\n", e.what());
        return 2;
    }
}
