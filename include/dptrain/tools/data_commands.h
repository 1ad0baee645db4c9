// dptrain-data's token subcommands (text, tokens) and the helpers all its subcommands share.
// Not for: the tool's main, synth, ingest or verify (src/tools/dptrain_data.cpp).
#pragma once

#include "dptrain/comm/communicator.h"

#include <boost/program_options.hpp>

#include <functional>
#include <string>
#include <vector>

namespace dptrain {

// Finalizes MPI on every return path.
class MpiScope {
  public:
    MpiScope() { mpi_start(nullptr, nullptr); }
    ~MpiScope() { mpi_finish(); }
    MpiScope(const MpiScope&) = delete;
    MpiScope& operator=(const MpiScope&) = delete;
};

// true for --help, after printing (print: false on ranks other than 0).
bool parse_or_help(int argc, char** argv, const boost::program_options::options_description& desc,
                   const char* epilogue = "", bool print = true);

// Rank 0, before any write: old shards of these splits are refused (they would mix with ours and
// may be the user's only copy), or with --overwrite removed with their SHA256SUMS lines.
void prepare_out(const std::string& out, const std::vector<std::string>& splits, bool overwrite);
// Rank 0, after: adds the new shards' lines, vouching for no file it did not write.
void complete_sums(const std::string& out, const std::vector<std::string>& splits);

// As all_ok over the world: a bad input ends every rank (exit 2) instead of leaving ranks waiting
// in the next collective. cmd: for a bad option's hint.
bool agreed(const char* cmd, const std::function<void()>& step);

std::string join(const std::vector<std::string>& v);  // by single spaces

int text_cmd(int argc, char** argv);
int tokens_cmd(int argc, char** argv);  // ids tokenized elsewhere

} // namespace dptrain
