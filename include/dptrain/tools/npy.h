// Reading NumPy .npy (1.0-3.0), from a file or an .npz member, converted to features or labels.
// Not for: writing .npy, structured or object dtypes, or deciding which array is which (ingest.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dptrain::npy {

struct Array {
    std::string where;            // "FILE: member x.npy"; starts every error
    std::string descr;            // e.g. "<f4"
    char kind = 0;                // numpy's kind: 'f', 'i', 'u', 'b', 'c', ...
    int itemsize = 0;
    std::vector<uint64_t> shape;  // () for a scalar
    std::string bytes;            // the whole file; C order from `offset`
    size_t offset = 0;

    uint64_t count() const;
    const char* data() const { return bytes.data() + offset; }
};

// Throws UserError("WHERE: what; what to do"), e.g. for big-endian, Fortran order, non-numeric
// dtypes or short data.
Array parse(std::string bytes, const std::string& where);
Array read_file(const std::string& path);

std::string dtype_name(const Array& a);  // "<f4" -> "float32"

// As astype(np.float32). Float and integer dtypes only: the caller checks a.kind.
std::vector<float> to_float32(const Array& a);
// Integer dtypes; a uint64 above INT64_MAX is refused.
std::vector<int64_t> to_int64(const Array& a);
// Integer dtypes, to [0, limit) with no int64 copy between (it would double a big file's memory);
// the first outside calls bad(index, value), which throws.
std::vector<uint32_t> to_ids(const Array& a, long limit,
                             const std::function<void(size_t, const std::string&)>& bad);

} // namespace dptrain::npy
