// NumPy's .npy format (versions 1.0, 2.0 and 3.0): the header ('descr', 'fortran_order',
// 'shape') and the raw array bytes, from a file or from an .npz member, and their conversion to
// the float32 features and integer labels of a dataset.
// Not for: writing .npy, structured or object dtypes, or deciding which array is which (ingest.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dptrain::npy {

struct Array {
    std::string where;            // "FILE" or "FILE: member x.npy", the start of every error
    std::string descr;            // as written, e.g. "<f4"
    char kind = 0;                // 'f' float, 'i' signed, 'u' unsigned, 'b' bool, 'c' complex, ...
    int itemsize = 0;             // bytes per element
    std::vector<uint64_t> shape;  // () for a scalar
    std::string bytes;            // the whole file; the array starts at `offset`, C order
    size_t offset = 0;

    uint64_t count() const;  // elements: product of shape
    const char* data() const { return bytes.data() + offset; }
};

// Parses a whole .npy image; throws UserError("WHERE: what is wrong; what to do") for a wrong
// magic, an unknown version, a header it cannot read, a big-endian or Fortran-order array (of
// more than one dimension), a dtype that is not a plain number, or data shorter than the shape.
Array parse(std::string bytes, const std::string& where);
Array read_file(const std::string& path);

// NumPy's name of a descr ("<f4" -> "float32", "<c8" -> "complex64"), for messages.
std::string dtype_name(const Array& a);

// Elements converted to float32 as numpy's astype(np.float32) does (round to nearest). Float and
// integer dtypes only; the caller checks a.kind first.
std::vector<float> to_float32(const Array& a);
// Integer dtypes only; a uint64 value above INT64_MAX is refused (UserError naming the element).
std::vector<int64_t> to_int64(const Array& a);
// Integer dtypes only: the elements as ids in [0, limit), 4 bytes each with no wider copy between
// (a file of 20M ids would hold 160 MB more as int64). The first element outside calls
// bad(index, its value as text), which throws.
std::vector<uint32_t> to_ids(const Array& a, long limit,
                             const std::function<void(size_t, const std::string&)>& bad);

} // namespace dptrain::npy
