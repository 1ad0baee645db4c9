// The MLP on a GPU behind the CPU Mlp's Model interface, its ops the CUDA twins; parameters and
// gradients on the device when resident, else copied each step. Built only with CUDA.
// Not for: speed (a small MLP's compute is less than the copies); it is a reference.
#pragma once

#include "dptrain/backend/cuda/ops.h"
#include "dptrain/model/model.h"

#include <memory>
#include <vector>

namespace dptrain {
namespace cuda {
class Matmuls;
class HostGradients;
class InputSlots;
class OpEvents;
}

class CudaMlp : public Model, public cuda::Resident {
  public:
    // Mlp(in, hidden, classes, act, max_batch) on `device`.
    CudaMlp(int in, std::vector<int> hidden, int classes, Activation act, int max_batch, int device);
    ~CudaMlp() override;

    const ParamLayout& layout() const override { return host_.layout(); }
    std::string signature() const override { return host_.signature(); }  // checkpoints move between CPU and GPU
    int terms_per_sample() const override { return 1; }
    double flops_per_sample() const override { return host_.flops_per_sample(); }
    void init(float* params, uint64_t seed, bool (*stop)() = nullptr) const override {
        host_.init(params, seed, stop);
    }
    double forward(const float* params, const ModelBatch& in, long* correct) override;
    void backward(float* grads, const float* params, const ModelBatch& in, float scale, GradHook* hook) override;
    void set_precision(Precision p) override;
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
    float* dev(size_t n);  // freed at destruction
    Mlp host_;             // layout, init, signature: the CPU twin's
    std::unique_ptr<cuda::Context> ctx_;
    std::unique_ptr<cuda::Matmuls> mm_;  // the model's matmuls in fp32 or bf16
    std::unique_ptr<cuda::HostGradients> host_grads_;  // --gpu-state host
    std::unique_ptr<cuda::InputSlots> input_;
    std::unique_ptr<cuda::OpEvents> ev_;               // --profile-ops
    std::vector<void*> allocs_;
    std::vector<int> dims_;
    float *params_ = nullptr, *grads_ = nullptr, *ce_stats_ = nullptr, *losses_ = nullptr;
    int* argmax_ = nullptr;
    float *dbuf_a_ = nullptr, *dbuf_b_ = nullptr;
    const float* x_ = nullptr;  // the last forward's batch, in one of input_'s slots
    const int* y_ = nullptr;
    std::vector<float*> pre_, post_;
    std::vector<float> host_losses_;
    std::vector<int> host_argmax_;
};

} // namespace dptrain
