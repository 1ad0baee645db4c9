// The GPT on a GPU behind the CPU Gpt's Model interface: Gpt's ops replaced by their CUDA twins,
// every activation on the device, parameters and gradients there too when resident (else copied
// each step). Built only with CUDA. Not for: decoding (CudaGptDecoder) or the step (DeviceStep).
#pragma once

#include "dptrain/backend/cuda/ops.h"
#include "dptrain/backend/gpu_sizes.h"
#include "dptrain/model/gpt_buffers.h"
#include "dptrain/model/gpt.h"

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

class CudaGpt : public Model, public cuda::Resident {
  public:
    // Gpt(cfg, max_batch) on `device`, allocated for `precision` (set_precision may change it).
    CudaGpt(const GptConfig& cfg, int max_batch, int device, Precision precision = Precision::fp32);
    ~CudaGpt() override;

    const ParamLayout& layout() const override { return host_.layout(); }
    std::string signature() const override { return host_.signature(); }  // checkpoints move between CPU and GPU
    int terms_per_sample() const override { return host_.terms_per_sample(); }
    double flops_per_sample() const override { return host_.flops_per_sample(); }
    void init(float* params, uint64_t seed, bool (*stop)() = nullptr) const override {
        host_.init(params, seed, stop);
    }
    // Token checks and messages as Gpt::forward; *correct from the loss kernel's argmax per row.
    double forward(const float* params, const ModelBatch& in, long* correct) override;
    void backward(float* grads, const float* params, const ModelBatch& in, float scale, GradHook* hook) override;
    void set_precision(Precision p) override;
    // In fp32 exactly Gpt::activation_bytes, in bf16 less.
    size_t activation_bytes() const override { return fixed_activation_bytes_ + kept_activation_bytes_; }
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
    // n floats cudaMalloc'd into `into`; `what` says the whole need on failure.
    float* dev(size_t n, const std::string& what, std::vector<void*>& into);
    void release();  // every device buffer, the input slots and the bf16 room
    // Layer l's slot of an activation of n values a layer, fp32 or (half) bf16.
    static float* slot(float* base, size_t l, size_t n, bool half) {
        return half ? reinterpret_cast<float*>(reinterpret_cast<bf16*>(base) + l * n) : base + l * n;
    }
    // --recompute's slots, as Gpt::kept and Gpt::kept_att.
    size_t kept(int l) const { return cfg_.recompute == Recompute::block ? 0 : (size_t)l; }
    size_t kept_att(int l) const { return cfg_.recompute == Recompute::none ? (size_t)l : 0; }
    // forward's parts (gpt_forward.cpp); in bf16 LayerNorm writes out rounded and a matmul's input is.
    void layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, size_t w, size_t b, long BT);
    void residual_layernorm_fwd(float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                size_t w, size_t bias, long BT);
    void matmul_fwd(float* out, const float* inp, size_t w, const float* bias, int IC, int OC, long BT);
    void block_forward(int l, const float* residual, int B);
    void attention_fwd(int l, int B, float* out, bf16* out16);
    double head_forward(int B, long* correct);
    void recompute_layer(int l, const float* residual, int B);  // Gpt::recompute_layer's
    // backward's parts (gpt.cpp).
    void layernorm_bwd(float* dw, float* db, const float* dout, const float* inp, size_t w, const float* mean,
                       const float* rstd, bool rounded_next, long BT, bool adds);
    void mlp_backward(int l, int B, bool adds);
    void attention_bwd(int l, int B, const float* residual, bool adds);
    Gpt host_;             // layout, init, signature, FLOPs: the CPU twin's (no activations)
    GptConfig cfg_;
    int max_batch_;
    std::unique_ptr<cuda::Context> ctx_;
    std::unique_ptr<cuda::Matmuls> mm_;  // the model's matmuls in fp32 or bf16
    std::unique_ptr<cuda::HostGradients> host_grads_;  // --gpu-state host
    std::unique_ptr<cuda::InputSlots> input_;
    std::unique_ptr<cuda::LossReadback> readback_;
    std::unique_ptr<cuda::OpEvents> ev_;               // --profile-ops
    std::vector<void*> allocs_;
    std::vector<void*> kept_;  // the activations whose size depends on the precision (set_precision)
    bool precision_set_ = false;
    size_t fixed_activation_bytes_ = 0;  // the constructor's
    size_t kept_activation_bytes_ = 0;   // set_precision's
    Precision precision_ = Precision::fp32;
    using LayerViews = Gpt::LayerViews;
    std::vector<LayerViews> lv_;  // host_'s
    size_t wte_ = 0, wpe_ = 0, lnfw_ = 0, lnfb_ = 0;
    void** field(const char* name);  // the member holding gpt_buffers' buffer `name`
    // set_precision's buffers (gpt_buffers' by_precision ones).
    std::vector<GptBuffer> kept_plan(Precision p) const;
    double kept_bytes(Precision p) const;
    // gpu_logits_stride; the padding is never written or read.
    int logits_stride(Precision p) const { return (int)gpu_logits_stride((size_t)cfg_.vocab_size, p); }
    // Device: Gpt's activations, same names and shapes (sizes: gpt_buffers). Which hold bf16 and
    // which scratch is free when: docs/GPU.md, "Note [CudaGpt scratch]".
    float *params_ = nullptr, *grads_ = nullptr;
    int *tokens_ = nullptr;   // the last forward's windows, in one of input_'s slots
    int *targets_ = nullptr;  // their last T tokens, packed
    float *encoded_ = nullptr, *ln1_ = nullptr, *ln1_mean_ = nullptr, *ln1_rstd_ = nullptr, *qkv_ = nullptr,
          *atty_ = nullptr, *att_ = nullptr, *residual2_ = nullptr, *ln2_ = nullptr, *ln2_mean_ = nullptr,
          *ln2_rstd_ = nullptr, *fch_ = nullptr, *fch_gelu_ = nullptr, *residual3_ = nullptr, *lnf_ = nullptr,
          *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr, *logits_ = nullptr, *losses_ = nullptr,
          *scratch_ = nullptr, *lse_ = nullptr, *ce_stats_ = nullptr;
    int* argmax_ = nullptr;  // the accuracy count's argmax per row, at evaluation
    bf16* atty16_ = nullptr;  // bf16: attention's output rounded for its projection, kept for backward
    bf16* dfc16_ = nullptr;   // bf16: fc's output gradient (B, T, 4C), from GELU's backward
    float *dres_ = nullptr, *dbig_ = nullptr, *dsmall_ = nullptr, *datt_ = nullptr,
          *datty_ = nullptr, *delta_ = nullptr;
    int last_B_ = 0;
    // Host staging, allocated once.
    std::vector<int> host_targets_;
};

} // namespace dptrain
