// Communication's value types, without MPI so the option parser needs none.
// Not for: any transport (communicator.h).
#pragma once

#include <cstddef>

namespace dptrain {

enum class DType { f32, bf16 };
inline size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }
inline const char* dtype_name(DType t) { return t == DType::f32 ? "float32" : "bf16"; }

// --allreduce (allreduce.h)
enum class AllreduceAlgo { flat, hierarchical, automatic };

} // namespace dptrain
