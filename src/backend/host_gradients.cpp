// The host gradient path: GradSync's buckets over the AllreduceEngine's buffer (sharded: reduce-
// scattered, then the parameters all-gathered), the Optimizer on the host parameters. The control
// floats ride in the first bucket. Not for: GPU-resident state (backend/cuda/device_step.cpp).
#include "dptrain/backend/device.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/comm/allreduce.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/comm/gradsync.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/core/trace.h"
#include "dptrain/model/optim.h"

#include <cmath>
#include <memory>

namespace dptrain {

namespace {

class HostGradients : public GradientPath {
  public:
    HostGradients(const ParamLayout& layout, float* params, Optimizer& opt, const GradientSpec& spec,
                  const Topology& topo, const std::string& note)
        : layout_(layout), params_(params), opt_(opt), spec_(spec), world_(topo.world) {
        if (!note.empty()) notes_.push_back(note);
        engine_ = std::make_unique<AllreduceEngine>(spec.algo, topo, layout.total + kControlFloats,
                                                    AllreduceEngine::kDefaultThreshold, spec.wire == DType::bf16);
        if (spec.shard_optimizer) shard_state(topo);
        // The communication thread calls MPI while the main thread does not: SERIALIZED suffices.
        // auto: only with a core of its own. Why: docs/BENCHMARKS.md, "Step time: 1 rank against 2 ranks".
        const bool thread_level_ok = mpi_thread_level() >= MPI_THREAD_SERIALIZED;
        bool bound = false;
        const int cores = cpu::usable_cores(&bound);
        const bool spare_core =
            bound ? cores > cpu::get_threads() : cores >= topo.host_size * (cpu::get_threads() + 1);
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
    float* control_floats() override;
    void begin_step(long step) override;
    void poison() override;
    GradHook* hook() override;
    void backward_done() override;
    double reduce() override;
    double norm() override;
    double update(double norm, double lr, long t) override;
    double take_comm_seconds() override;
    void upload_state() override;
    void download_state() override;
    void download_params() override {}

    const char* where() const override;
    std::string describe() const override;
    std::vector<std::string> notes() const override;
    size_t traced_per_step() const override;
    void set_tracer(Tracer* t) override;
    std::vector<std::pair<void*, size_t>> host_buffers() override;

  private:
    void shard_state(const Topology& topo);

    const ParamLayout& layout_;
    float* params_;
    Optimizer& opt_;
    GradientSpec spec_;
    MpiCommunicator world_;
    std::unique_ptr<AllreduceEngine> engine_;  // owns the gradient buffer
    std::unique_ptr<GradSync> sync_;
    std::vector<std::string> notes_;
    // Sharded: this rank's shard, its summed gradients, every rank's squares, the all-gathers' wait.
    Span shard_;
    std::vector<float> shard_grads_;
    std::vector<double> squares_;
    double gather_seconds_ = 0;
    Tracer* tracer_ = nullptr;
    long step_ = 0;
};

void HostGradients::shard_state(const Topology& topo) {
    shard_ = shard_span(layout_.total, topo.rank, topo.size);
    const Span held = opt_.shard();
    if (held.begin != shard_.begin || held.end != shard_.end)
        fatal(strfmt("the optimizer holds floats %zu..%zu, the gradient path shards %zu..%zu", held.begin, held.end,
                     shard_.begin, shard_.end));
    shard_grads_.assign(std::max<size_t>(1, shard_.size()), 0.0f);
    squares_.assign((size_t)topo.size, 0.0);
    engine_->shard(layout_.total, shard_grads_.data());
}

float* HostGradients::grads() { return sync_->grads(); }

float* HostGradients::control_floats() { return sync_->control(); }

void HostGradients::begin_step(long step) {
    step_ = step;
    sync_->begin_step(step);
}

void HostGradients::poison() { sync_->grads()[0] = NAN; }  // before backward adds to it

GradHook* HostGradients::hook() { return sync_.get(); }

void HostGradients::backward_done() {}

double HostGradients::reduce() { return sync_->finish(); }  // the control floats ride along

double HostGradients::norm() {
    if (!spec_.shard_optimizer) return global_norm(sync_->grads(), layout_.total);
    // Added in rank order: every rank computes the same norm, so all clip (or skip) alike.
    const double mine = sum_squares(shard_grads_.data(), shard_.size());
    world_.allgather(&mine, sizeof mine, squares_.data());
    double sum = 0.0;
    for (double q : squares_) sum += q;
    return std::sqrt(sum);
}

double HostGradients::update(double norm, double lr, long t) {
    if (!spec_.shard_optimizer) {
        clip_to_norm(sync_->grads(), layout_.total, norm, spec_.grad_clip);
        opt_.step(params_, sync_->grads(), lr, t);
        return 0.0;
    }
    clip_to_norm(shard_grads_.data(), shard_.size(), norm, spec_.grad_clip);
    opt_.step(params_ + shard_.begin, shard_grads_.data(), lr, t);
    const double t0 = now_seconds();
    engine_->gather_shards(params_);
    const double t1 = now_seconds();
    if (tracer_)
        tracer_->comm("allgather", step_, t0, t1, layout_.total * sizeof(float),
                      engine_->algo() == AllreduceAlgo::flat ? "flat" : "hierarchical");
    gather_seconds_ += t1 - t0;
    return t1 - t0;
}

double HostGradients::take_comm_seconds() {
    const double s = gather_seconds_;
    gather_seconds_ = 0;
    return sync_->take_comm_seconds() + s;
}

void HostGradients::upload_state() {}

void HostGradients::download_state() {}

const char* HostGradients::where() const { return "host"; }

std::string HostGradients::describe() const {
    const size_t n = sync_->num_buckets();
    const std::string how =
        spec_.shard_optimizer
            ? strfmt("reduce-scatter + all-gather, %s, optimizer state sharded: floats %zu..%zu (%.1f of %.1f MiB a "
                     "moment) on this rank",
                     engine_->describe().c_str(), shard_.begin, shard_.end, shard_.size() * 4.0 / (1 << 20),
                     layout_.total * 4.0 / (1 << 20))
            : engine_->describe();
    return strfmt("%s | %zu bucket%s of <= %g MiB, %s | %s on the wire", how.c_str(), n,
                  n == 1 ? "" : "s", spec_.bucket_mb,
                  sync_->overlapped() ? "overlapped with backward" : "after backward", dtype_name(spec_.wire));
}

std::vector<std::string> HostGradients::notes() const { return notes_; }

size_t HostGradients::traced_per_step() const { return sync_->num_buckets() + (spec_.shard_optimizer ? 1 : 0); }

void HostGradients::set_tracer(Tracer* t) {
    tracer_ = t;
    sync_->set_tracer(t);
}

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
