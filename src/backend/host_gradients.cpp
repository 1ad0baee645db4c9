// The host gradient path: gradients in the AllreduceEngine's buffer (the node's shared window where
// the hierarchical all-reduce may run), summed in GradSync's buckets (on a communication thread
// during backward when a core is free for it), clipped and applied by the Optimizer to the host
// parameters. The control floats ride in the first bucket, after the gradients.
#include "dptrain/backend/device.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/comm/allreduce.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/comm/gradsync.h"
#include "dptrain/core/error.h"
#include "dptrain/model/optim.h"

#include <cmath>
#include <memory>

namespace dptrain {

namespace {

class HostGradients : public GradientPath {
  public:
    HostGradients(const ParamLayout& layout, float* params, Optimizer& opt, const GradientSpec& spec,
                  const Topology& topo, const std::string& note)
        : layout_(layout), params_(params), opt_(opt), spec_(spec) {
        if (!note.empty()) notes_.push_back(note);
        engine_ = std::make_unique<AllreduceEngine>(spec.algo, topo, layout.total + kControlFloats);
        // The communication thread calls MPI while the main thread does not: SERIALIZED suffices.
        // auto: a communication thread only pays when it has a core of its own; sharing the
        // compute threads' cores it slowed 2 ranks on 2 cores by 8% of the step (BENCHMARKS.md).
        const bool thread_level_ok = mpi_thread_level() >= MPI_THREAD_SERIALIZED;
        bool bound = false;
        const int cores = cpu::usable_cores(&bound);
        const bool spare_core =
            bound ? cores > cpu::get_threads() : cores >= topo.local_size * (cpu::get_threads() + 1);
        const bool overlap =
            (spec.overlap == Overlap::on || (spec.overlap == Overlap::automatic && spare_core)) && thread_level_ok;
        sync_ = std::make_unique<GradSync>(*engine_, layout, spec.bucket_mb, spec.wire, overlap, kControlFloats);
        if (spec.overlap != Overlap::off && !thread_level_ok)
            notes_.push_back("note: the MPI library lacks MPI_THREAD_SERIALIZED; gradients are reduced after backward");
        else if (spec.overlap == Overlap::automatic && !sync_->overlapped() && topo.size > 1)
            notes_.push_back("note: --overlap auto: no spare core per rank for a communication thread; gradients are "
                             "reduced after backward (--overlap on forces it)");
    }

    float* grads() override;
    float* control() override;
    void begin_step(long step) override;
    void poison() override;
    GradHook* hook() override;
    void backward_done() override;
    double reduce() override;
    double norm() override;
    void update(double, double lr, long t) override;
    double take_comm_seconds() override;
    void upload_state() override;
    void download_state() override;

    const char* where() const override;
    std::string describe() const override;
    std::vector<std::string> notes() const override;
    size_t traced_per_step() const override;
    void set_tracer(Tracer* t) override;
    std::vector<std::pair<void*, size_t>> host_buffers() override;

  private:
    const ParamLayout& layout_;
    float* params_;
    Optimizer& opt_;
    GradientSpec spec_;
    std::unique_ptr<AllreduceEngine> engine_;  // owns the gradient buffer
    std::unique_ptr<GradSync> sync_;
    std::vector<std::string> notes_;
};

float* HostGradients::grads() { return sync_->grads(); }

float* HostGradients::control() { return sync_->control(); }

void HostGradients::begin_step(long step) { sync_->begin_step(step); }

void HostGradients::poison() { sync_->grads()[0] = NAN; }  // before backward adds to it

GradHook* HostGradients::hook() { return sync_.get(); }

void HostGradients::backward_done() {}

double HostGradients::reduce() { return sync_->finish(); }  // the control floats ride along

double HostGradients::norm() { return global_norm(sync_->grads(), layout_.total); }

void HostGradients::update(double, double lr, long t) {
    clip_grad_norm(sync_->grads(), layout_.total, spec_.grad_clip);
    opt_.step(params_, sync_->grads(), lr, t);
}

double HostGradients::take_comm_seconds() { return sync_->take_comm_seconds(); }

void HostGradients::upload_state() {}

void HostGradients::download_state() {}

const char* HostGradients::where() const { return "host"; }

std::string HostGradients::describe() const {
    const size_t n = sync_->num_buckets();
    return strfmt("%s | %zu bucket%s of <= %g MiB, %s | %s on the wire", engine_->describe().c_str(), n,
                  n == 1 ? "" : "s", spec_.bucket_mb,
                  sync_->overlapped() ? "overlapped with backward" : "after backward", dtype_name(spec_.wire));
}

std::vector<std::string> HostGradients::notes() const { return notes_; }

size_t HostGradients::traced_per_step() const { return sync_->num_buckets(); }

void HostGradients::set_tracer(Tracer* t) { sync_->set_tracer(t); }

std::vector<std::pair<void*, size_t>> HostGradients::host_buffers() {
    return {{params_, layout_.total * sizeof(float)}, {sync_->grads(), layout_.total * sizeof(float)}};
}

} // namespace

std::unique_ptr<GradientPath> make_host_gradients(const ParamLayout& layout, float* params, Optimizer& opt,
                                                  const GradientSpec& spec, const Topology& topo,
                                                  const std::string& note) {
    return std::make_unique<HostGradients>(layout, params, opt, spec, topo, note);
}

} // namespace dptrain
