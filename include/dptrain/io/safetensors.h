// Reading and writing safetensors files (Hugging Face's tensor format).
// Not for: what the tensors mean (hf_gpt2.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dptrain {

struct SafeTensor {
    std::string name;
    std::string dtype;           // as written: "F32", "BF16", ...
    std::vector<int64_t> shape;  // () for a scalar
    uint64_t begin = 0, end = 0;  // in the data section
    uint64_t count() const;
};

// Checked: each range lies in the file, fits dtype and shape, and overlaps no other.
class Safetensors {
  public:
    // Throws UserError("WHERE: what is wrong"); a header over 100 MB is refused.
    static Safetensors parse(std::string bytes, const std::string& where);
    static Safetensors read_file(const std::string& path);

    const std::string& where() const { return where_; }
    const std::vector<SafeTensor>& tensors() const { return tensors_; }  // in header order
    const SafeTensor* find(const std::string& name) const;               // null when absent
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // F32, BF16, F16 exactly, F64 rounded; other dtypes throw UserError naming the tensor.
    void to_float(const SafeTensor& t, float* out) const;

  private:
    std::string where_, bytes_;
    size_t data_ = 0;  // the data section's start in bytes_
    std::vector<SafeTensor> tensors_;
    std::map<std::string, std::string> metadata_;
};

enum class TensorDtype { f32, bf16 };
const char* name_of(TensorDtype d);  // "F32", "BF16"

struct TensorOut {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;  // row-major
};

// Atomic (temporary name, fsync, rename); bf16 rounds to nearest even. Throws UserError.
void write_safetensors(const std::string& path, const std::vector<TensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata, TensorDtype dtype);

// Atomic, as above.
void write_file_atomically(const std::string& path, const std::string& text);

} // namespace dptrain
