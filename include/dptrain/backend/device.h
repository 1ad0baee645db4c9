// Which device computes, decided in one place: the Device factory. make_device() is defined once
// per build, chosen at link time: by src/backend/cuda/device.cpp in builds with CUDA (a GPU per
// rank when --device asks for one and the host has them, with NCCL or without), and by
// src/backend/no_cuda.cpp otherwise. Callers hold a Device and never ask which one it is: it makes
// the model, the gradient path, page-locks what the GPU copies, and knows its peak.
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

// The model to make: an MLP classifier or a GPT, at a matmul precision.
struct ModelSpec {
    ModelKind kind = ModelKind::mlp;
    int in = 0, classes = 0;  // MLP: features in, classes out
    std::vector<int> hidden;  // MLP: hidden widths
    Activation activation = Activation::relu;
    int max_rows = 1;  // MLP: rows of the largest batch (training or evaluation)
    GptConfig gpt;     // GPT
    int batch = 1;     // GPT: windows per batch
    Precision precision = Precision::fp32;
};

// How gradients are summed over the ranks and applied.
struct GradientSpec {
    AllreduceAlgo algo = AllreduceAlgo::automatic;
    double bucket_mb = 4.0;
    Overlap overlap = Overlap::automatic;
    DType wire = DType::f32;  // the host path's payload on the wire
    GpuState gpu_state = GpuState::automatic;
    double grad_clip = 0.0;  // the global norm clipped to; 0: no clipping
    OptimizerSettings optimizer;
    bool shard_optimizer = false;  // each rank keeps the optimizer's shard_span of the state (host path)
};

// Host memory page-locked for a GPU's copies, released when destroyed. note: why some of it could
// not be locked (the copies still work, slower), "" when all of it was.
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
    // Why --device auto (or this build) left the model on the CPU; "" otherwise.
    const std::string& note() const { return note_; }
    // The banner's backend text, e.g. "backend cpu, 2 threads per rank".
    virtual std::string describe(const GradientPath& grads) const;
    // How --profile-ops times each op here.
    virtual const char* op_timing() const { return "wall clock around each op"; }

    virtual std::unique_ptr<Model> make_model(const ModelSpec& spec) const;
    // Collective over topo.world. The parameters and optimizer state stay in `params` and `opt`
    // (the host's, as checkpoints hold them); a GPU path copies them with upload_state and
    // download_state. Throws UserError (the same on every rank) for a combination it cannot train.
    virtual std::unique_ptr<GradientPath> make_gradients(Model& model, float* params, Optimizer& opt,
                                                         const GradientSpec& spec, const Topology& topo) const;
    // Page-locks host regions the GPU copies every step; null where nothing needs it (the CPU).
    virtual std::unique_ptr<Pinned> pin(const std::vector<std::pair<void*, size_t>>& regions) const;
    // This rank's peak GFLOP/s for MFU, measured (sgemm on the CPU); 0 where it cannot be measured
    // (a GPU's peak depends on the precision: --peak-gflops gives it).
    virtual double peak_gflops() const;
    // Bytes in use on this rank's GPU now (cudaMemGetInfo's total less free: every process's, this
    // one's context included); 0 on the CPU. The trainer takes it before the model is made and at
    // the run's end, so the difference is what the run allocated there, beside the plan's.
    virtual size_t gpu_memory_used() const { return 0; }

  private:
    std::string note_;
};

// The host gradient path (host_gradients.cpp), which every device can fall back to. `note`, when
// given, is the first of its notes (why the state is not on a GPU).
std::unique_ptr<GradientPath> make_host_gradients(const ParamLayout& layout, float* params, Optimizer& opt,
                                                  const GradientSpec& spec, const Topology& topo,
                                                  const std::string& note = "");

// ---- Defined once per build (src/backend/cuda/device.cpp, or src/backend/no_cuda.cpp) ---------

// The device for --device: cpu, cuda (an error without a GPU for this rank) or auto (a GPU when
// this rank's host has one for it, else the CPU with a note). Not collective.
std::unique_ptr<Device> make_device(DeviceKind want, const Topology& topo);
// "CUDA 13.0 | NCCL 2.28.9 | OpenBLAS 0.3.21 ... | OpenMP" ("no CUDA | no NCCL | ..." in a
// build without them): what the build has, for banners; whether a GPU is present is said apart.
std::string build_features();
// CUDA devices visible to this process; -1 in a build without CUDA. *why: the reason for none.
int gpu_count(std::string* why);
// NCCL's version ("2.21.5"), "" in a build without NCCL.
std::string nccl_version();

} // namespace dptrain
