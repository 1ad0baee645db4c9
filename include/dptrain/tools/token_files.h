// Token ids tokenized elsewhere, as the tools that made them write them: nanoGPT's raw uint16
// files (train.bin, val.bin), llm.c's .bin files (a 256-int32 header with magic 20240520, the
// version and the token count, then uint16 or uint32 ids), NumPy .npy arrays of integers, and a
// 1-D integer dataset of an HDF5 file, under any name.
// For `dptrain-data tokens`. Not for: writing token shards (dptrain_data.cpp) or reading them
// (data/tokens.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dptrain::token_files {

enum class Format { automatic, nanogpt, llmc, npy, hdf5 };
// "auto" | "nanogpt" | "llmc" | "npy" | "hdf5"; throws UserError naming the choices.
Format parse_format(const std::string& name);
const char* format_name(Format f);

// The ids of one file, every one checked below vocab_size. automatic: .npy and HDF5 by their
// signatures, llm.c by its header's magic, otherwise nanoGPT's raw uint16. hdf5_dataset names
// the dataset of an HDF5 file (default /tokens). Throws UserError naming the file and what is
// wrong (a bad header, a size that does not fit the format, an id at or above vocab_size with its
// position, a negative or non-integer array, a missing dataset). *used gets the format read.
std::vector<uint32_t> read(const std::string& path, Format f, long vocab_size, Format* used = nullptr,
                           const std::string& hdf5_dataset = "/tokens");

} // namespace dptrain::token_files
