// The tools' command lines, as dptrain's own: Boost.Program_options over one subcommand's
// arguments, --help printing the usage, and any bad argument ending the tool with one line
// ("TOOL: error: CMD: WHAT; see TOOL --help") and exit 2.
// Not for: dptrain's training options (config/options.h).
#pragma once

#include <boost/program_options.hpp>

#include <functional>
#include <string>
#include <vector>

namespace dptrain {

// Parses argv[1..] (argv[0] is the subcommand's name) against desc, the `positional` names taking
// the bare arguments in order (a name may repeat: "input" "input" ... for a list). Throws the
// parser's error for an unknown option, a bad value, or too many bare arguments.
boost::program_options::variables_map parse_subcommand(int argc, char** argv,
                                                       const boost::program_options::options_description& desc,
                                                       const std::vector<std::string>& positional = {},
                                                       int repeat_last = 1);

// The non-empty items of a comma-separated list ("1,,4" -> {"1", "4"}).
std::vector<std::string> split_list(const std::string& s);

// Runs a tool's main: --version as the first argument prints "TOOL VERSION" and --help or -h
// anywhere prints `usage` (exit 0); otherwise body(), whose errors end the tool with one line on
// stderr (when `speak`: under mpirun, rank 0 alone) and exit 2: a parser error as
// "TOOL: error: CMD: WHAT; see TOOL --help" (TOOL as runnable() names it), any other as
// "TOOL: error: WHAT".
int run_tool(const char* tool, const char* usage, int argc, char** argv, const std::function<int()>& body,
             bool speak = true);

} // namespace dptrain
