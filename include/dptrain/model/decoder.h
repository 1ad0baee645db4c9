// Incremental decoding behind one interface, whichever device computes it: the CPU's GptDecoder
// (make_cpu_decoder) or the GPU's CudaGptDecoder (in builds with CUDA). Generating and serving
// hold a Decoder and never ask which one it is; each has its own key/value cache and nothing of
// training. Not for: training (Model), or choosing the rows of a call.
#pragma once

#include "dptrain/model/gpt.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

class Decoder {
  public:
    virtual ~Decoder() = default;
    // A key/value cache for `slots` sequences and room for max_rows rows a call, allocated once.
    virtual void reserve(int slots, int max_rows) = 0;
    // The parameters to decode with: read by every later call (the CPU keeps the pointer: the
    // caller keeps them alive and unchanged; with bf16 weights it also rounds a copy of them now)
    // or copied now (a GPU's memory).
    virtual void set_params(const float* params) = 0;
    // The forward of n rows: row i is token tok[i] at position pos[i] of cache slot slot[i], and its
    // keys and values join the cache. A slot's rows come in position order, each after every
    // earlier position of that slot (in an earlier call or earlier in this one); position 0 starts
    // the slot afresh. logits (n, V), or with out_rows only those rows' (n_out, V) (a prompt needs
    // its last). A row's logits are the same bits whatever other rows share the call, as long as a
    // prompt's rows come together. All in host memory.
    virtual void decode(const int* tok, const int* slot, const int* pos, int n, float* logits,
                        const int* out_rows = nullptr, int n_out = 0) = 0;
    // "the CPU", "the CPU, bf16 weights" or "GPU 0", for banners.
    virtual std::string where() const = 0;
};

// A run of at least this many consecutive rows of one slot (a prompt) is multiplied by one sgemm
// (cuBLAS call) of its own; shorter runs row by row. Why: docs/SERVING.md, "Note [decode products]".
constexpr int kDecodePromptRows = 32;
// Those runs among n rows of the given slots, as [begin, end) row ranges in order (runs is cleared
// first): the CPU decoder's and its GPU twin's.
void decode_prompt_runs(const int* slot, int n, std::vector<std::pair<int, int>>& runs);

// weights bf16: decode on a bf16 copy of the weights, rounded at each set_params (half the bytes a
// token reads), the rest fp32 (GptDecoder).
std::unique_ptr<Decoder> make_cpu_decoder(const GptConfig& cfg, Precision weights = Precision::fp32);

} // namespace dptrain
