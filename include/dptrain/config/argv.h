// How dptrain's programs read a command line of options alone (Boost.Program_options), in one
// place: option names whole, and no stray words. Not for: declaring options (each program's own),
// or the tools' subcommands with positional arguments (tools/cli.h, with the same style).
#pragma once

#include <boost/program_options.hpp>

#include <string>

namespace dptrain {

// Boost's default style, less its guessing: it took a prefix for the one option it starts
// (--batch for --batch-size; --ranks for --ranks-per-node, where `plan` has a --ranks of its own),
// which the INI file refuses. An option is named whole.
constexpr int kWholeOptionNames = boost::program_options::command_line_style::default_style &
                                  ~boost::program_options::command_line_style::allow_guessing;

// argv (argv[0] the program's or subcommand's name) against desc. A word that is no option's value
// (a mistyped subcommand, an INI file given without --config) was dropped and the program ran
// without it: it is refused by name, `hint` after it. Throws po::error.
inline boost::program_options::parsed_options parse_argv(int argc, const char* const* argv,
                                                         const boost::program_options::options_description& desc,
                                                         const std::string& hint) {
    namespace po = boost::program_options;
    po::parsed_options parsed = po::command_line_parser(argc, argv).options(desc).style(kWholeOptionNames).run();
    for (const po::option& o : parsed.options)
        if (o.position_key >= 0 || o.string_key.empty())
            throw po::error("unexpected argument '" + (o.original_tokens.empty() ? std::string() : o.original_tokens[0]) +
                            "'; " + hint);
    return parsed;
}

} // namespace dptrain
