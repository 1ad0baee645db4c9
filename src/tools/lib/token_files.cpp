// token_files: nanoGPT, llm.c and NumPy token files read and checked.
// Not for: writing token shards.
#include "dptrain/tools/token_files.h"

#include "dptrain/core/error.h"
#include "dptrain/data/h5.h"
#include "dptrain/tools/npy.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace dptrain::token_files {

namespace {

constexpr int32_t kLlmcMagic = 20240520;  // llm.c's data files
constexpr size_t kLlmcHeader = 256 * sizeof(int32_t);

std::string read_all(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        throw UserError(strfmt("%s: a directory; give the token file (.bin, .npy or .h5) itself", path.c_str()));
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UserError(strfmt("%s: cannot open it: %s", path.c_str(), std::strerror(errno)));
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw UserError(strfmt("%s: read failed", path.c_str()));
    return bytes;
}

int32_t le32(const std::string& b, size_t at) {
    uint32_t v = 0;
    for (int k = 3; k >= 0; --k) v = (v << 8) | (unsigned char)b[at + (size_t)k];
    return (int32_t)v;
}

// Each checked below vocab_size.
std::vector<uint32_t> ids_of(const std::string& path, const std::string& b, size_t at, size_t n, int width,
                             long vocab_size) {
    std::vector<uint32_t> ids(n);
    for (size_t i = 0; i < n; ++i) {
        uint32_t v = 0;
        for (int k = width - 1; k >= 0; --k) v = (v << 8) | (unsigned char)b[at + i * (size_t)width + (size_t)k];
        if ((long)v >= vocab_size)
            throw UserError(strfmt("%s: token %zu is %u, not below --vocab-size %ld; give the tokenizer's vocabulary "
                                   "size (GPT-2's is 50257)",
                                   path.c_str(), i, v, vocab_size));
        ids[i] = v;
    }
    return ids;
}

std::vector<uint32_t> read_llmc(const std::string& path, const std::string& b, long vocab_size) {
    if (b.size() < kLlmcHeader || le32(b, 0) != kLlmcMagic)
        throw UserError(strfmt("%s: not an llm.c token file (no header with magic %d)", path.c_str(), kLlmcMagic));
    const int32_t version = le32(b, 4), count = le32(b, 8);
    if (version != 1 && version != 2)
        throw UserError(strfmt("%s: llm.c header version %d is unknown (1: uint16 ids, 2: uint32 ids)", path.c_str(),
                               version));
    const int width = version == 1 ? 2 : 4;
    if (count < 0 || b.size() != kLlmcHeader + (size_t)count * (size_t)width)
        throw UserError(strfmt("%s: the llm.c header says %d tokens of %d bytes, but %zu bytes follow it (truncated "
                               "or not this format)",
                               path.c_str(), count, width, b.size() - kLlmcHeader));
    return ids_of(path, b, kLlmcHeader, (size_t)count, width, vocab_size);
}

std::vector<uint32_t> read_nanogpt(const std::string& path, const std::string& b, long vocab_size) {
    if (b.size() % 2 != 0)
        throw UserError(strfmt("%s: %zu bytes, an odd count: nanoGPT's files are uint16 ids (2 bytes each)", path.c_str(),
                               b.size()));
    return ids_of(path, b, 0, b.size() / 2, 2, vocab_size);
}

std::vector<uint32_t> read_npy(const std::string& path, std::string b, long vocab_size) {
    const npy::Array a = npy::parse(std::move(b), path);
    if (a.kind != 'i' && a.kind != 'u')
        throw UserError(strfmt("%s: dtype %s; token ids are integers", path.c_str(), npy::dtype_name(a).c_str()));
    if (a.shape.size() != 1)
        throw UserError(strfmt("%s: %zu dimensions; token ids are one array of shape (N,)", path.c_str(), a.shape.size()));
    return npy::to_ids(a, vocab_size, [&](size_t i, const std::string& v) {
        throw UserError(strfmt("%s: token %zu is %s, not in [0, --vocab-size %ld)", path.c_str(), i, v.c_str(), vocab_size));
    });
}

// Read as int64 (HDF5 converts any integer type) 1M ids a slab, kept as 4 bytes an id.
std::vector<uint32_t> read_hdf5(const std::string& path, const std::string& name, long vocab_size) {
    std::lock_guard<std::mutex> g(h5::lock());
    const std::string hint = "name the dataset of ids with --dataset NAME";
    h5::Hid f = h5::open_file(path, "a readable HDF5 file of token ids");
    h5::Hid d = h5::open_dataset(f.get(), path, name, hint);
    const h5::TypeInfo t = h5::type_of(d.get());
    const std::vector<hsize_t> dims = h5::dims(d.get());
    if (t.cls != H5T_INTEGER || dims.size() != 1)
        throw UserError(strfmt("%s: dataset %s is %s with %zu dimensions; token ids are one integer array of shape "
                               "(N,)",
                               path.c_str(), name.c_str(), t.name.c_str(), dims.size()));
    std::vector<uint32_t> ids((size_t)dims[0]);
    std::vector<int64_t> slab(std::min<size_t>(ids.size(), size_t(1) << 20));
    h5::Hid file_space(H5Dget_space(d.get()), H5Sclose);
    for (hsize_t at = 0; at < dims[0]; at += slab.size()) {
        const hsize_t count = std::min<hsize_t>(slab.size(), dims[0] - at);
        h5::Hid mem_space(H5Screate_simple(1, &count, nullptr), H5Sclose);
        if (H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &at, nullptr, &count, nullptr) < 0 ||
            H5Dread(d.get(), H5T_NATIVE_INT64, mem_space.get(), file_space.get(), H5P_DEFAULT, slab.data()) < 0)
            throw UserError(strfmt("%s: reading dataset %s failed (truncated or corrupt?)", path.c_str(), name.c_str()));
        for (hsize_t k = 0; k < count; ++k) {
            const int64_t v = slab[k];
            if (v < 0 || v >= vocab_size)
                throw UserError(strfmt("%s: %s[%llu] is %lld, not in [0, --vocab-size %ld)", path.c_str(), name.c_str(),
                                       (unsigned long long)(at + k), (long long)v, vocab_size));
            ids[at + k] = (uint32_t)v;
        }
    }
    return ids;
}

} // namespace

Format parse_format(const std::string& name) {
    if (name == "auto") return Format::automatic;
    if (name == "nanogpt") return Format::nanogpt;
    if (name == "llmc") return Format::llmc;
    if (name == "npy") return Format::npy;
    if (name == "hdf5") return Format::hdf5;
    throw UserError(strfmt("--format '%s' is unknown; use auto, nanogpt, llmc, npy or hdf5", name.c_str()));
}

const char* format_name(Format f) {
    switch (f) {
    case Format::automatic: return "auto";
    case Format::nanogpt: return "nanogpt";
    case Format::llmc: return "llmc";
    case Format::npy: return "npy";
    case Format::hdf5: return "hdf5";
    }
    return "?";
}

std::vector<uint32_t> read(const std::string& path, Format f, long vocab_size, Format* used,
                           const std::string& hdf5_dataset) {
    std::string b = f == Format::hdf5 ? std::string() : read_all(path);
    if (f == Format::automatic) {
        if (b.compare(0, 8, "\x89HDF\r\n\x1a\n") == 0) f = Format::hdf5;
        else if (b.compare(0, 6, "\x93NUMPY") == 0) f = Format::npy;
        else if (b.size() >= kLlmcHeader && le32(b, 0) == kLlmcMagic) f = Format::llmc;
        else f = Format::nanogpt;
    }
    if (used) *used = f;
    switch (f) {
    case Format::llmc: return read_llmc(path, b, vocab_size);
    case Format::npy: return read_npy(path, std::move(b), vocab_size);
    case Format::hdf5: return read_hdf5(path, hdf5_dataset, vocab_size);
    default: return read_nanogpt(path, b, vocab_size);
    }
}

} // namespace dptrain::token_files
