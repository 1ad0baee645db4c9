// Incremental decoding behind one interface, whichever device computes it: the CPU's Gpt
// (make_cpu_decoder) or the GPU's CudaGpt (made by Device::make_decoder in builds with CUDA).
// `dptrain generate` and `dptrain serve` hold a Decoder and never ask which one it is.
// Not for: training (Model), or choosing the rows of a call (app/completions.cpp).
#pragma once

#include "dptrain/model/gpt.h"

#include <memory>
#include <string>

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
    // Gpt::decode's contract: row i is token tok[i] at position pos[i] of cache slot slot[i];
    // logits (n, V), or with out_rows only those rows' (n_out, V). All in host memory.
    virtual void decode(const int* tok, const int* slot, const int* pos, int n, float* logits,
                        const int* out_rows = nullptr, int n_out = 0) = 0;
    // "the CPU", "the CPU, bf16 weights" or "GPU 0", for banners.
    virtual std::string where() const = 0;
};

// weights bf16: decode on a bf16 copy of the weights, rounded at each set_params (half the bytes a
// token reads; Gpt::set_decode_weights), the rest fp32.
std::unique_ptr<Decoder> make_cpu_decoder(const GptConfig& cfg, Precision weights = Precision::fp32);

} // namespace dptrain
