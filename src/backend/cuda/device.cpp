// The Device factory of builds with CUDA: --device picks this rank's GPU or the CPU, --gpu-state
// the DeviceStep or the host path. The one place outside the kernels that knows CUDA and NCCL exist.
#include "dptrain/backend/device.h"

#include "check.h"
#include "dptrain/backend/cuda/device_step.h"
#include "dptrain/backend/cuda/gpt.h"
#include "dptrain/backend/cuda/llama.h"
#include "dptrain/backend/cuda/mlp.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"

#include "dptrain/comm/nccl.h"

#include <cblas.h>

#include <memory>

namespace dptrain {

namespace {

// A DeviceStep; the control floats are summed beside it over MPI.
class DeviceGradients : public GradientPath {
  public:
    DeviceGradients(cuda::Resident& model, const ParamLayout& layout, float* params, Optimizer& opt,
                    const GradientSpec& spec, const Topology& topo)
        : model_(model), step_(model, layout, spec.optimizer, sum(spec, topo)), params_(params), opt_(opt),
          spec_(spec), world_(topo.world) {
        model.set_resident(true);
    }

    float* grads() override;
    float* control_floats() override;
    void begin_step(long) override;
    void poison() override;
    // No bucket may start before the poison lands, so a poisoned step's sums all start in reduce().
    GradHook* hook() override;
    void backward_done() override;
    double reduce() override;
    double norm() override;
    double update(double norm, double lr, long t) override;
    double take_comm_seconds() override;
    void upload_state() override;
    void download_state() override;
    void download_params() override;

    const char* where() const override;
    std::string describe() const override;
    std::vector<std::string> notes() const override;
    void set_tracer(Tracer*) override;
    size_t traced_per_step() const override;
    std::vector<std::pair<void*, size_t>> host_buffers() override;

  private:
    static DeviceStep::Sum sum(const GradientSpec& s, const Topology& topo);

    cuda::Resident& model_;
    DeviceStep step_;
    float* params_;
    Optimizer& opt_;
    GradientSpec spec_;
    MpiCommunicator world_;
    float control_[kControlFloats] = {};
    bool poisoned_ = false;
};

float* DeviceGradients::grads() { return nullptr; }  // backward keeps them on the device

float* DeviceGradients::control_floats() { return control_; }

void DeviceGradients::begin_step(long) { model_.begin_gradients(); }

void DeviceGradients::poison() { poisoned_ = true; }

GradHook* DeviceGradients::hook() { return poisoned_ || spec_.overlap == Overlap::off ? nullptr : &step_; }

void DeviceGradients::backward_done() {
    if (poisoned_) step_.poison();
    poisoned_ = false;
    step_.wait_backward();
}

double DeviceGradients::reduce() {
    const double t0 = now_seconds();
    step_.allreduce();
    world_.allreduce_sum(control_, kControlFloats);
    return now_seconds() - t0;
}

double DeviceGradients::norm() { return step_.norm(); }

double DeviceGradients::update(double norm, double lr, long t) { return step_.update(norm, spec_.grad_clip, lr, t); }

double DeviceGradients::take_comm_seconds() { return step_.take_comm_seconds(); }

void DeviceGradients::upload_state() { step_.upload(params_, opt_); }

void DeviceGradients::download_state() { step_.download(params_, opt_); }

void DeviceGradients::download_params() { step_.download_params(params_); }

const char* DeviceGradients::where() const { return "GPU"; }

std::string DeviceGradients::describe() const {
    const char* when = world_.size() == 1 ? "" : spec_.overlap == Overlap::off ? " after backward"
                                                                              : " started during backward";
    return strfmt("%s%s | parameters, gradients and %s state on the GPU", step_.describe().c_str(), when,
                  name_of(spec_.optimizer.kind));
}

std::vector<std::string> DeviceGradients::notes() const {
    if (spec_.shard_optimizer && spec_.algo == AllreduceAlgo::hierarchical && world_.size() > 1)
        return {"--allreduce hierarchical with --shard-optimizer on the GPU: the gradients go to their shards' "
                "owners by NCCL over all ranks (its own rings and trees span NVLink and the network)"};
    return {};
}

void DeviceGradients::set_tracer(Tracer*) {}  // NCCL's sums run on the GPU: not on the host's trace

size_t DeviceGradients::traced_per_step() const { return 0; }

std::vector<std::pair<void*, size_t>> DeviceGradients::host_buffers() { return {}; }

DeviceStep::Sum DeviceGradients::sum(const GradientSpec& s, const Topology& topo) {
    DeviceStep::Sum how;
    how.topo = &topo;
    how.algo = s.algo;
    how.bucket_mb = s.bucket_mb;
    how.shard = s.shard_optimizer;
    return how;
}

struct PinnedRegions : Pinned {
    std::vector<std::unique_ptr<cuda::PinnedHost>> regions;
};

// Every rank of a CUDA build holds one, on a GPU or the CPU (gpu < 0), so all of them take part in
// make_gradients' agreement.
class CudaBuildDevice : public Device {
  public:
    CudaBuildDevice(int gpu, std::string note);

    int gpu() const override;
    std::string describe(const GradientPath& grads) const override;
    const char* op_timing() const override;

    std::unique_ptr<Model> make_model(const ModelSpec& spec) const override;

    // The device path when every rank is on a GPU, decided together (NCCL's set-up is collective).
    // Without NCCL for several ranks, auto takes the host path and device refuses.
    std::unique_ptr<GradientPath> make_gradients(Model& model, float* params, Optimizer& opt, const GradientSpec& spec,
                                                 const Topology& topo) const override;

    // What is copied every step moves by DMA at full speed once page-locked.
    std::unique_ptr<Pinned> pin(const std::vector<std::pair<void*, size_t>>& regions) const override;

    double peak_gflops() const override;
    size_t gpu_memory_used() const override;
    size_t gpu_memory_free() const override;

  private:
    int gpu_;
};

CudaBuildDevice::CudaBuildDevice(int gpu, std::string note) : Device(std::move(note)), gpu_(gpu) {}

int CudaBuildDevice::gpu() const { return gpu_; }

std::string CudaBuildDevice::describe(const GradientPath& grads) const {
    if (gpu_ < 0) return Device::describe(grads);
    return strfmt("backend cuda (each rank on its local rank's GPU; parameters, all-reduce and optimizer on the %s)",
                  grads.where());
}

const char* CudaBuildDevice::op_timing() const {
    return gpu_ < 0 ? Device::op_timing() : "GPU time between CUDA events around each op on the model's stream";
}

std::unique_ptr<Model> CudaBuildDevice::make_model(const ModelSpec& spec) const {
    if (gpu_ < 0) return Device::make_model(spec);
    std::unique_ptr<Model> m;
    if (spec.kind == ModelKind::gpt) m = std::make_unique<CudaGpt>(spec.gpt, spec.batch, gpu_, spec.precision);
    else if (spec.kind == ModelKind::llama)
        m = std::make_unique<CudaLlama>(spec.gpt, spec.batch, gpu_, spec.precision);
    else m = std::make_unique<CudaMlp>(spec.in, spec.hidden, spec.classes, spec.activation, spec.max_rows, gpu_);
    m->set_precision(spec.precision);
    return m;
}

std::unique_ptr<GradientPath> CudaBuildDevice::make_gradients(Model& model, float* params, Optimizer& opt,
                                                              const GradientSpec& spec, const Topology& topo) const {
    int all_gpu = gpu_ >= 0 && spec.gpu_state != GpuState::host ? 1 : 0;
    MpiCommunicator(topo.world).allreduce(&all_gpu, 1, ReduceOp::min);
    std::string note;
    if (all_gpu && topo.size > 1 && spec.gpu_state == GpuState::automatic && nccl_library_version().empty()) {
        all_gpu = 0;
        note = "--gpu-state auto: this build has no NCCL to sum gradients on the GPUs: parameters and optimizer "
               "stay on the host";
    }
    auto* resident = dynamic_cast<cuda::Resident*>(&model);  // every model make_model puts on a GPU
    if (!all_gpu || !resident) return make_host_gradients(model.layout(), params, opt, spec, topo, note);
    return std::make_unique<DeviceGradients>(*resident, model.layout(), params, opt, spec, topo);
}

std::unique_ptr<Pinned> CudaBuildDevice::pin(const std::vector<std::pair<void*, size_t>>& regions) const {
    if (gpu_ < 0) return nullptr;
    auto p = std::make_unique<PinnedRegions>();
    for (auto& [ptr, bytes] : regions) {
        p->regions.push_back(std::make_unique<cuda::PinnedHost>(ptr, bytes));
        if (!p->regions.back()->ok() && p->regions.size() == 1) p->note = p->regions.back()->why();
    }
    return p;
}

double CudaBuildDevice::peak_gflops() const { return gpu_ < 0 ? Device::peak_gflops() : 0.0; }

size_t CudaBuildDevice::gpu_memory_free() const {
    if (gpu_ < 0) return 0;
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes;
}

size_t CudaBuildDevice::gpu_memory_used() const {
    if (gpu_ < 0) return 0;
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));  // of the current device: this rank's (bind_device)
    return total_bytes - free_bytes;
}

} // namespace

std::unique_ptr<Device> make_device(DeviceKind want, const Topology& topo) {
    if (want == DeviceKind::cpu) return std::make_unique<CudaBuildDevice>(-1, "");
    std::string why;
    if (cuda::device_count(&why) == 0) {
        const std::string reason = strfmt("no GPU (%s)", why.c_str());
        if (want == DeviceKind::cuda) throw UserError(strfmt("--device cuda: %s; use --device cpu", reason.c_str()));
        return std::make_unique<CudaBuildDevice>(-1, reason + ": the CPU backend trains");
    }
    try {
        // The host's GPUs, even on simulated nodes.
        return std::make_unique<CudaBuildDevice>(cuda::bind_device(topo.host_rank, topo.host_size), "");
    } catch (const UserError& e) {
        if (want == DeviceKind::cuda) throw;
        // More ranks on this host than GPUs.
        return std::make_unique<CudaBuildDevice>(-1, strfmt("%s: the CPU backend trains", e.what()));
    }
}

int gpu_count(std::string* why) { return cuda::device_count(why); }

std::string nccl_version() { return nccl_library_version(); }

std::string build_features() {
    int v = 0;
    const std::string cuda =
        cudaRuntimeGetVersion(&v) == cudaSuccess ? strfmt("CUDA %d.%d", v / 1000, v % 1000 / 10) : "CUDA";
    const std::string nccl = nccl_version();
    return strfmt("%s | %s | %s | OpenMP", cuda.c_str(), nccl.empty() ? "no NCCL" : ("NCCL " + nccl).c_str(),
                  openblas_get_config());
}

} // namespace dptrain
