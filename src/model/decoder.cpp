// The CPU's Decoder: a Gpt without training's activations, decoding on the caller's parameters
// (or, with bf16 weights, on its own rounded copy of them).
#include "dptrain/model/decoder.h"

#include "dptrain/core/bf16.h"

#include <vector>

namespace dptrain {

namespace {

class CpuDecoder : public Decoder {
  public:
    CpuDecoder(const GptConfig& cfg, Precision weights) : gpt_(cfg, 0) {
        if (weights == Precision::bf16) {
            w16_.resize(gpt_.num_params());
            gpt_.set_decode_weights(w16_.data());
        }
    }
    void reserve(int slots, int max_rows) override { gpt_.reserve_decode(slots, max_rows); }
    void set_params(const float* params) override {
        params_ = params;
        if (!w16_.empty()) to_bf16(w16_.data(), params, w16_.size());
    }
    void decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows,
                int n_out) override {
        gpt_.decode(params_, tok, slot, pos, n, logits, out_rows, n_out);
    }
    std::string where() const override { return w16_.empty() ? "the CPU" : "the CPU, bf16 weights"; }

  private:
    Gpt gpt_;
    const float* params_ = nullptr;
    std::vector<bf16> w16_;  // with bf16 weights: params_ rounded, at the same offsets
};

} // namespace

std::unique_ptr<Decoder> make_cpu_decoder(const GptConfig& cfg, Precision weights) {
    return std::make_unique<CpuDecoder>(cfg, weights);
}

} // namespace dptrain
