// The small value types of communication that options, tools and transports share: the payload
// type on the wire and the all-reduce algorithm. No MPI here, so the option parser needs none.
#pragma once

#include <cstddef>

namespace dptrain {

enum class DType { f32, bf16 };
inline size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }
inline const char* dtype_name(DType t) { return t == DType::f32 ? "float32" : "bf16"; }

// --allreduce: MPI over all ranks (flat), inside the node then across nodes (hierarchical), or
// chosen by topology and message size (automatic, "auto").
enum class AllreduceAlgo { flat, hierarchical, automatic };

} // namespace dptrain
