// dptrain-data's subcommands that make token shards (token_commands.cpp: text and tokens), and the
// helpers every subcommand of dptrain-data shares (data_out.cpp). The tool's main (and synth,
// ingest, verify) stay in src/tools/dptrain_data.cpp.
#pragma once

#include "dptrain/comm/communicator.h"

#include <boost/program_options.hpp>

#include <functional>
#include <string>
#include <vector>

namespace dptrain {

// MPI for one subcommand that runs under mpirun (ingest, text, tokens): started when made,
// finalized when it goes, on every return path.
class MpiScope {
  public:
    MpiScope() { mpi_start(nullptr, nullptr); }
    ~MpiScope() { mpi_finish(); }
    MpiScope(const MpiScope&) = delete;
    MpiScope& operator=(const MpiScope&) = delete;
};

// Parses a subcommand's options; for --help prints the options and `epilogue` (when `print`:
// under mpirun only rank 0 does) and returns true.
bool parse_or_help(int argc, char** argv, const boost::program_options::options_description& desc,
                   const char* epilogue = "", bool print = true);

// Before any shard is written (under mpirun: by rank 0): --out exists and holds no shards of the
// splits about to be written (they would mix with ours, and they may be the user's only copy), or
// with --overwrite those shards are removed, and their lines from a SHA256SUMS there.
void prepare_out(const std::string& out, const std::vector<std::string>& splits, bool overwrite);
// After every shard is written (by rank 0): a SHA256SUMS in --out gets lines for the splits' new
// shards, so that it lists the whole set again without vouching for the files it did not write.
void complete_sums(const std::string& out, const std::vector<std::string>& splits);

// Runs `step` on every rank of MPI_COMM_WORLD and agrees on the outcome: when it threw anywhere,
// the lowest failing rank prints its one line and every rank returns false (the caller finalizes
// and exits 2), so a bad input ends the whole job cleanly instead of leaving ranks waiting in the
// next collective. `cmd` names the subcommand in the hint for a bad option.
bool agreed(const char* cmd, const std::function<void()>& step);

// The strings joined by single spaces.
std::string join(const std::vector<std::string>& v);

// dptrain-data text: token shards from text files, through one of the tokenizers.
int text_cmd(int argc, char** argv);
// dptrain-data tokens: token shards from ids tokenized elsewhere (nanoGPT, llm.c, .npy, HDF5).
int tokens_cmd(int argc, char** argv);

} // namespace dptrain
