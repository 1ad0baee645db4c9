// The Llama on a GPU behind the CPU Llama's Model interface: Llama's ops replaced by their CUDA
// twins in the same order on one stream, every activation on the device (fp32, llama_buffers'
// list), parameters and gradients there too when resident (else copied each step). In bf16 each
// matmul rounds its operands as the CPU's Bf16Operands does. Built only with CUDA.
// Not for: decoding (the CPU's LlamaDecoder) or the step (DeviceStep).
#pragma once

#include "dptrain/backend/cuda/ops.h"
#include "dptrain/model/llama.h"

#include <memory>
#include <vector>

namespace dptrain {
namespace cuda {
class Matmuls;
class HostGradients;
class InputSlots;
class OpEvents;
class LossReadback;
}

class CudaLlama : public Model, public cuda::Resident {
  public:
    // Llama(cfg, max_batch) on `device`, its matmuls in `precision` (set_precision may change it).
    CudaLlama(const GptConfig& cfg, int max_batch, int device, Precision precision = Precision::fp32);
    ~CudaLlama() override;

    const ParamLayout& layout() const override { return host_.layout(); }
    std::string signature() const override { return host_.signature(); }  // checkpoints move between CPU and GPU
    int terms_per_sample() const override { return host_.terms_per_sample(); }
    double flops_per_sample() const override { return host_.flops_per_sample(); }
    void init(float* params, uint64_t seed, bool (*stop)() = nullptr) const override {
        host_.init(params, seed, stop);
    }
    const GptConfig& config() const { return host_.config(); }  // resolved (llama_resolved)
    // Token checks and messages as Llama::forward; *correct from the loss kernel's argmax per row.
    double forward(const float* params, const ModelBatch& in, long* correct) override;
    void backward(float* grads, const float* params, const ModelBatch& in, float scale, GradHook* hook) override;
    void set_precision(Precision p) override;
    size_t activation_bytes() const override { return activation_bytes_; }  // Llama::activation_bytes
    size_t operand_bytes() const override;                                  // the bf16 operands, 2 bytes a value
    void stage(const ModelBatch& next) override;
    void unstage() override;
    void set_op_times(OpTimes* t) override;  // CUDA events around each op (cuda::OpEvents)
    void finish() override;                   // waits for the model's stream
    long staged_batches() const override;
    float* device_params() override { return params_; }
    float* device_grads() override { return grads_; }
    cuda::Context& context() override { return *ctx_; }
    bf16* rounded_params() override;
    void set_rounded_current(bool current) override;

  private:
    void release();  // every device buffer, the input slots and the bf16 room
    void** field(const char* name);  // the member holding llama_buffers' buffer `name`
    size_t kept(int l) const { return cfg_.recompute == Recompute::block ? 0 : (size_t)l; }
    size_t kept_att(int l) const { return cfg_.recompute == Recompute::none ? (size_t)l : 0; }
    // lm_matmul_forward's and lm_matmul_backward's twins: in bf16 the operands rounded, out16 and
    // dinp16 the result rounded too; the weight gradient added when `adds`.
    void matmul_fwd(float* out, const float* inp, size_t w, int IC, int OC, long BT, bool out16 = false);
    void matmul_bwd(float* dinp, size_t w, const float* dout, const float* inp, int IC, int OC, long BT, bool dinp16,
                    bool adds);
    void block_forward(int l, int B);
    void attention(int l, float* out, int B);
    void recompute_layer(int l, const float* residual, int B);
    void block_backward(int l, const float* residual, int B, bool adds);
    double head_forward(int B, long* correct);

    Llama host_;  // layout, init, signature, FLOPs: the CPU twin's (no activations)
    GptConfig cfg_;  // resolved
    int max_batch_, hs_ = 0, qkv_ = 0;
    std::unique_ptr<cuda::Context> ctx_;
    std::unique_ptr<cuda::Matmuls> mm_;
    std::unique_ptr<cuda::HostGradients> host_grads_;  // --gpu-state host
    std::unique_ptr<cuda::InputSlots> input_;
    std::unique_ptr<cuda::LossReadback> readback_;
    std::unique_ptr<cuda::OpEvents> ev_;  // --profile-ops
    std::vector<void*> allocs_;
    size_t activation_bytes_ = 0;
    bool precision_set_ = false;
    Precision precision_ = Precision::fp32;
    std::vector<Llama::LayerViews> lv_;
    size_t wte_ = 0, lnfw_ = 0, head_ = 0;
    // Device: Llama's activations, same names and shapes (llama_buffers).
    float *params_ = nullptr, *grads_ = nullptr;
    int* tokens_ = nullptr;  // the last forward's windows, in one of input_'s slots
    int *targets_ = nullptr, *argmax_ = nullptr;
    float *rope_cos_ = nullptr, *rope_sin_ = nullptr, *encoded_ = nullptr, *ln1_ = nullptr, *ln1_rstd_ = nullptr,
          *qkv3_ = nullptr, *atty_ = nullptr, *att_ = nullptr, *lse_ = nullptr, *residual2_ = nullptr, *ln2_ = nullptr,
          *ln2_rstd_ = nullptr, *gu_ = nullptr, *swi_ = nullptr, *residual3_ = nullptr, *lnf_ = nullptr,
          *lnf_rstd_ = nullptr, *logits_ = nullptr, *ce_stats_ = nullptr, *losses_ = nullptr, *scratch_ = nullptr,
          *dres_ = nullptr, *dbig_ = nullptr, *dsmall_ = nullptr, *datt_ = nullptr, *datty_ = nullptr,
          *delta_ = nullptr;
    int last_B_ = 0;
    // Host staging, allocated once.
    std::vector<int> host_targets_;
};

} // namespace dptrain
