// safetensors, the tensor file of Hugging Face and PyTorch users: an 8-byte little-endian header
// length N, N bytes of JSON ({"NAME": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {string: string}}), then the tensors' little-endian bytes, offsets counted from
// the end of the header. Not for: what the tensors mean (hf_gpt2.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dptrain {

struct SafeTensor {
    std::string name;
    std::string dtype;           // as written: "F32", "BF16", "F16", "F64", "I64", ...
    std::vector<int64_t> shape;  // () for a scalar
    uint64_t begin = 0, end = 0;  // byte range in the data section
    uint64_t count() const;       // elements: product of shape
};

// A whole safetensors file, parsed and checked: every tensor's byte range lies inside the file,
// matches its dtype and shape, and overlaps no other.
class Safetensors {
  public:
    // Throws UserError("WHERE: what is wrong") for a short file, a header length beyond the file or
    // over 100 MB, a header that is not a JSON object of tensor entries, an unknown dtype, a
    // negative or huge shape, or offsets that do not fit.
    static Safetensors parse(std::string bytes, const std::string& where);
    static Safetensors read_file(const std::string& path);

    const std::string& where() const { return where_; }
    const std::vector<SafeTensor>& tensors() const { return tensors_; }  // in header order
    const SafeTensor* find(const std::string& name) const;               // null when absent
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // t's elements as float32: F32 as stored, BF16 and F16 widened exactly, F64 rounded to
    // nearest. out holds t.count() floats. Throws UserError naming the tensor for other dtypes.
    void to_float(const SafeTensor& t, float* out) const;

  private:
    std::string where_, bytes_;
    size_t data_ = 0;  // where the data section starts in bytes_
    std::vector<SafeTensor> tensors_;
    std::map<std::string, std::string> metadata_;
};

enum class TensorDtype { f32, bf16 };
const char* name_of(TensorDtype d);  // "F32", "BF16"

struct TensorOut {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;  // row-major, shape's product of elements
};

// Writes tensors in order, converted to dtype (bf16: rounded to nearest even), with the metadata,
// atomically: a temporary name, fsync, rename. Throws UserError naming the path.
void write_safetensors(const std::string& path, const std::vector<TensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata, TensorDtype dtype);

// Writes text to path atomically (temporary name, fsync, rename). Throws UserError naming the path.
void write_file_atomically(const std::string& path, const std::string& text);

} // namespace dptrain
