// Which device computes, decided in one place: callers hold a Device, never ask which, and get from
// it the model, the gradient path, page-locking and the peak. make_device is chosen at link time.
// Not for: the ops (backend/cpu, backend/cuda) or the step loop (train).
#pragma once

#include "dptrain/backend/gradient_path.h"
#include "dptrain/comm/topology.h"
#include "dptrain/comm/types.h"
#include "dptrain/config/options.h"
#include "dptrain/model/gpt.h"
#include "dptrain/model/model.h"
#include "dptrain/model/optim.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

struct ModelSpec {
    ModelKind kind = ModelKind::mlp;
    int in = 0, classes = 0;  // MLP: features in, classes out
    std::vector<int> hidden;  // MLP: hidden widths
    Activation activation = Activation::relu;
    int max_rows = 1;  // MLP: rows of the largest batch
    GptConfig gpt;     // GPT
    int batch = 1;     // GPT: windows per batch
    Precision precision = Precision::fp32;
};

struct GradientSpec {
    AllreduceAlgo algo = AllreduceAlgo::automatic;
    double bucket_mb = 4.0;
    Overlap overlap = Overlap::automatic;
    DType wire = DType::f32;  // the host path's payload on the wire
    GpuState gpu_state = GpuState::automatic;
    double grad_clip = 0.0;  // the global norm clipped to; 0: no clipping
    OptimizerSettings optimizer;
    bool shard_optimizer = false;  // each rank keeps its shard_span of the state
};

// Page-locked host memory, released when destroyed. note: why some could not be (copies slower), or "".
struct Pinned {
    virtual ~Pinned() = default;
    std::string note;
};

class Device {
  public:
    explicit Device(std::string note = "") : note_(std::move(note)) {}
    virtual ~Device() = default;

    // The CUDA device this rank computes on, -1 for the CPU.
    virtual int gpu() const { return -1; }
    // Why the model is on the CPU against --device auto or this build; "" otherwise.
    const std::string& note() const { return note_; }
    // The banner's backend text, e.g. "backend cpu, 2 threads per rank".
    virtual std::string describe(const GradientPath& grads) const;
    // How --profile-ops times each op here.
    virtual const char* op_timing() const { return "wall clock around each op"; }

    virtual std::unique_ptr<Model> make_model(const ModelSpec& spec) const;
    // Collective over topo.world. params and opt stay the host's (checkpoints'); UserError, the
    // same on every rank, for a combination it cannot train.
    virtual std::unique_ptr<GradientPath> make_gradients(Model& model, float* params, Optimizer& opt,
                                                         const GradientSpec& spec, const Topology& topo) const;
    // Page-locks what the GPU copies every step; null on the CPU.
    virtual std::unique_ptr<Pinned> pin(const std::vector<std::pair<void*, size_t>>& regions) const;
    // Peak GFLOP/s for MFU, measured by sgemm on the CPU; 0 on a GPU (--peak-gflops gives it).
    virtual double peak_gflops() const;
    // Bytes in use on this rank's GPU, every process's (total less free); 0 on the CPU.
    virtual size_t gpu_memory_used() const { return 0; }
    // Bytes free on this rank's GPU now (cudaMemGetInfo); 0 on the CPU.
    virtual size_t gpu_memory_free() const { return 0; }

  private:
    std::string note_;
};

// The host gradient path, every device's fallback; `note`: why the state is not on a GPU.
std::unique_ptr<GradientPath> make_host_gradients(const ParamLayout& layout, float* params, Optimizer& opt,
                                                  const GradientSpec& spec, const Topology& topo,
                                                  const std::string& note = "");

// ---- Defined once per build: src/backend/cuda/device.cpp, or src/backend/no_cuda.cpp

// --device cpu, cuda (an error without a GPU for this rank) or auto (else the CPU, with a note).
// Not collective.
std::unique_ptr<Device> make_device(DeviceKind want, const Topology& topo);
// What the build has, for banners: "CUDA 13.0 | NCCL 2.28.9 | OpenBLAS ..." or "no CUDA | ...".
std::string build_features();
// CUDA devices visible; -1 in a build without CUDA. *why: the reason for none.
int gpu_count(std::string* why);
// NCCL's version ("2.21.5"), "" in a build without NCCL.
std::string nccl_version();

} // namespace dptrain
