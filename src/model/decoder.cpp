// The CPU's Decoder: a Gpt without training's activations, decoding on the caller's parameters.
#include "dptrain/model/decoder.h"

namespace dptrain {

namespace {

class CpuDecoder : public Decoder {
  public:
    explicit CpuDecoder(const GptConfig& cfg) : gpt_(cfg, 0) {}
    void reserve(int slots, int max_rows) override { gpt_.reserve_decode(slots, max_rows); }
    void set_params(const float* params) override { params_ = params; }
    void decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows,
                int n_out) override {
        gpt_.decode(params_, tok, slot, pos, n, logits, out_rows, n_out);
    }
    std::string where() const override { return "the CPU"; }

  private:
    Gpt gpt_;
    const float* params_ = nullptr;
};

} // namespace

std::unique_ptr<Decoder> make_cpu_decoder(const GptConfig& cfg) { return std::make_unique<CpuDecoder>(cfg); }

} // namespace dptrain
