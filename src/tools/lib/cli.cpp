// parse_subcommand and run_tool: the tools' one way of reading arguments and failing.
#include "dptrain/tools/cli.h"

#include "dptrain/config/argv.h"
#include "dptrain/core/files.h"

#include <cstdio>
#include <cstring>
#include <exception>

namespace po = boost::program_options;

namespace dptrain {

po::variables_map parse_subcommand(int argc, char** argv, const po::options_description& desc,
                                   const std::vector<std::string>& positional, int repeat_last) {
    po::positional_options_description pos;
    for (size_t i = 0; i < positional.size(); ++i)
        pos.add(positional[i].c_str(), i + 1 == positional.size() ? repeat_last : 1);
    po::variables_map vm;
    // The parser takes argv[0] for a program's name: here, the subcommand's.
    po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).style(kWholeOptionNames).run(), vm);
    po::notify(vm);
    return vm;
}

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    size_t a = 0;
    while (a <= s.size()) {
        size_t b = s.find(',', a);
        if (b == std::string::npos) b = s.size();
        if (b > a) out.push_back(s.substr(a, b - a));
        a = b + 1;
    }
    return out;
}

int run_tool(const char* tool, const char* usage, int argc, char** argv, const std::function<int()>& body,
             bool speak) {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "--version") {
        if (speak) std::printf("%s %s\n", tool, DPTRAIN_VERSION);
        return 0;
    }
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
            if (speak) std::fputs(usage, stdout);
            return 0;
        }
    try {
        return body();
    } catch (const po::error& e) {
        if (speak)
            std::fprintf(stderr, "%s: error: %s: %s; see %s --help\n", tool, cmd.c_str(), e.what(),
                         runnable(tool).c_str());
    } catch (const std::exception& e) {
        if (speak) std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    }
    return 2;
}

} // namespace dptrain
