// `dptrain-data tokens`' readers of ids tokenized elsewhere: nanoGPT, llm.c, .npy, HDF5.
// Not for: writing token shards (dptrain_data.cpp) or reading them (data/tokens.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dptrain::token_files {

enum class Format { automatic, nanogpt, llmc, npy, hdf5 };
Format parse_format(const std::string& name);  // throws UserError naming the choices
const char* format_name(Format f);

// Every id checked below vocab_size. automatic: by signature or llm.c's magic, else nanoGPT's raw
// uint16. Throws UserError naming the file and what is wrong (an id with its position).
std::vector<uint32_t> read(const std::string& path, Format f, long vocab_size, Format* used = nullptr,
                           const std::string& hdf5_dataset = "/tokens");

} // namespace dptrain::token_files
