// How dptrain's programs read a command line of options alone: names whole, no stray words.
// Not for: declaring options, or subcommands with positional arguments (tools/cli.h).
#pragma once

#include <boost/program_options.hpp>

#include <string>

namespace dptrain {

// Without guessing: a prefix (--ranks for --ranks-per-node, where `plan` has its own --ranks)
// took the option it starts, which the INI file refuses.
constexpr int kWholeOptionNames = boost::program_options::command_line_style::default_style &
                                  ~boost::program_options::command_line_style::allow_guessing;

// A stray word (a mistyped subcommand, an INI file without --config) was silently dropped: it
// is refused by name, `hint` after it. Throws po::error.
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
