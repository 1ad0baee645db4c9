// The tools' command lines: Boost.Program_options per subcommand, --help, and one error line with
// exit 2. Not for: dptrain's training options (config/options.h).
#pragma once

#include <boost/program_options.hpp>

#include <functional>
#include <string>
#include <vector>

namespace dptrain {

// argv[0] is the subcommand. `positional` names take bare arguments in order (repeat a name for a
// list). Throws the parser's error.
boost::program_options::variables_map parse_subcommand(int argc, char** argv,
                                                       const boost::program_options::options_description& desc,
                                                       const std::vector<std::string>& positional = {},
                                                       int repeat_last = 1);

// "1,,4" -> {"1", "4"}
std::vector<std::string> split_list(const std::string& s);

// --version, --help, then body(); an error is one stderr line and exit 2 ("TOOL: error: CMD:
// WHAT; see TOOL --help" for a parser error). speak: false on ranks other than 0.
int run_tool(const char* tool, const char* usage, int argc, char** argv, const std::function<int()>& body,
             bool speak = true);

} // namespace dptrain
