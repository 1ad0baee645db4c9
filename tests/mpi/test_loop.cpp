// The step loop (train/loop.h) alone: a fake model (linear regression on the label) over an
// in-memory dataset, the one-rank host gradient path, SGD with momentum. Every rank runs each case
// on its own (MPI_COMM_SELF), and checks the loop against an independent computation of what it
// must do: one update per batch in the sampler's order, a skipped or stopping non-finite step,
// checkpoints at their steps, and an exact resume.
#include "helpers.h"
#include "../scratch_dir.h"

#include "dptrain/backend/device.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/config/options.h"
#include "dptrain/io/checkpoint.h"
#include "dptrain/train/loop.h"
#include "dptrain/data/prefetcher.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace dptrain;

namespace {

constexpr int D = 8;    // features
constexpr long N = 96;  // samples: 12 steps of 8 per epoch

float feature(long i, int j) { return (float)((i * 7 + j * 3) % 11 - 5) / 4.0f; }
int label(long i) { return (int)(i % 5); }

class MemoryData : public Dataset {
  public:
    long num_samples() const override { return N; }
    int floats_per_sample() const override { return D; }
    int ints_per_sample() const override { return 1; }
    void read(const long* idx, int n, long, float* x, int* y) override {
        for (int i = 0; i < n; ++i) {
            for (int j = 0; j < D; ++j) x[i * D + j] = feature(idx[i], j);
            y[i] = label(idx[i]);
        }
    }
    int num_shards() const override { return 1; }
    const std::string& shard_path(int) const override { return path_; }
    std::unique_ptr<Dataset> reopen() const override { return std::make_unique<MemoryData>(); }

  private:
    std::string path_ = "memory";
};

class MemoryTask : public Task {
  public:
    MemoryTask() {
        train_ = std::make_unique<MemoryData>();
        val_ = std::make_unique<MemoryData>();
    }
    ModelSpec model_spec(const Options&) const override { return ModelSpec(); }
    ModelBatch batch(const float* x, const int* y, int n) const override {
        ModelBatch b;
        b.B = n;
        b.x = x;
        b.labels = y;
        return b;
    }
    int eval_rows() const override { return 16; }
    std::string describe() const override { return "in memory"; }
    const char* unit() const override { return "sample"; }
    int tokens_per_sample() const override { return 0; }
    std::string load_node_memory() override { return ""; }
};

// prediction w.x + b; loss 0.5 (prediction - label)^2 per sample.
class LinearModel : public Model {
  public:
    LinearModel() {
        layout_.add("w", {D}, true);
        layout_.add("b", {1}, false);
    }
    const ParamLayout& layout() const override { return layout_; }
    std::string signature() const override { return "linear D=8"; }
    int terms_per_sample() const override { return 1; }
    double flops_per_sample() const override { return 6.0 * D; }
    void init(float* p, uint64_t, bool (*)() = nullptr) const override {
        for (int j = 0; j < D; ++j) p[j] = 0.1f * (float)(j - 3);
        p[D] = 0.0f;
    }
    double forward(const float* p, const ModelBatch& in, long* correct) override {
        r_.assign(in.B, 0.0);
        double sum = 0;
        for (int i = 0; i < in.B; ++i) {
            double pred = p[D];
            for (int j = 0; j < D; ++j) pred += (double)p[j] * in.x[i * D + j];
            r_[i] = pred - in.labels[i];
            sum += 0.5 * r_[i] * r_[i];
            if (correct && std::lround(pred) == in.labels[i]) ++*correct;
        }
        ++forwards;
        return sum;
    }
    void backward(float* g, const float*, const ModelBatch& in, float scale, GradHook* hook) override {
        for (int i = 0; i < in.B; ++i) {
            for (int j = 0; j < D; ++j) g[j] += scale * (float)r_[i] * in.x[i * D + j];
            g[D] += scale * (float)r_[i];
        }
        if (hook) hook->grads_ready_from(0);
    }
    void set_precision(Precision) override {}
    void set_op_times(OpTimes*) override {}
    long forwards = 0;

  private:
    ParamLayout layout_;
    std::vector<double> r_;
};

std::string fresh_dir() { return dptrain_test::scratch_dir("loop"); }

// One rank's run: the parts the set-up would make, over MPI_COMM_SELF.
struct Run {
    Options o;
    Topology topo;
    std::unique_ptr<MpiCommunicator> world;
    MemoryTask task;
    LinearModel model;
    std::vector<float> params;

    explicit Run(std::vector<std::string> args) {
        args.insert(args.begin(), "dptrain");
        std::vector<const char*> argv;
        for (auto& a : args) argv.push_back(a.c_str());
        o = parse_options((int)argv.size(), argv.data()).opts;
        topo = Topology::create(MPI_COMM_SELF, 0);
        world = std::make_unique<MpiCommunicator>(topo.world);
        params.assign(model.num_params(), 0.0f);
        model.init(params.data(), o.seed);
    }
    ~Run() { topo.destroy(); }

    // Set-up as the trainer's phases make it, then the loop. Returns its exit code.
    int train() {
        Optimizer opt(optimizer_settings(o), model.layout());
        Sampler sampler(N, o.batch_size, o.seed);
        LrSchedule sched{o.lr, o.min_lr_ratio, o.warmup_steps, o.steps};
        Device device;
        FaultPlan faults = FaultPlan::parse(o.inject_fault);
        GradientSpec spec;
        spec.optimizer = optimizer_settings(o);
        spec.grad_clip = o.grad_clip;
        spec.overlap = Overlap::off;
        std::unique_ptr<GradientPath> grads = make_host_gradients(model.layout(), params.data(), opt, spec, topo);
        Checkpoints ckpt(o, 0, RunIdentity{model.signature(), (long)o.batch_size, 1, (long)N, "", ""});
        ckpt.find(params, opt);
        const long start = ckpt.share(*world, params, opt);
        Reporter report(o, topo);
        report.open_metrics(start);
        RunFacts facts;
        facts.start_step = start;
        facts.resumed_from = ckpt.resumed_from();
        report.banner(facts);
        StepClock clock(0);
        Evaluator eval(task, model, *world, 0);
        StepLoop loop(LoopParts{o, topo, *world, task, model, params, opt, *grads, sampler, sched, device, faults, clock,
                                report, eval, ckpt, 0.0});
        return loop.run(start);
    }
};

// What the loop must compute, independently: SGD with momentum (buf = m buf + g; p -= lr buf) on
// the mean gradient of each global batch in the sampler's order, in double. skip: the 1-based step
// a non-finite gradient skips (parameters and momentum left alone), 0 for none.
std::vector<double> reference(const Options& o, long steps, long skip = 0) {
    LinearModel m;
    std::vector<float> p0(m.num_params());
    m.init(p0.data(), o.seed);
    std::vector<double> p(p0.begin(), p0.end()), buf(p.size(), 0.0), g(p.size());
    Sampler sampler(N, o.batch_size, o.seed);
    LrSchedule sched{o.lr, o.min_lr_ratio, o.warmup_steps, o.steps};
    std::vector<long> idx(o.batch_size);
    for (long s = 0; s < steps; ++s) {
        if (s + 1 == skip) continue;
        const int n = sampler.batch(s, idx.data());
        std::fill(g.begin(), g.end(), 0.0);
        for (int i = 0; i < n; ++i) {
            double pred = p[D];
            for (int j = 0; j < D; ++j) pred += p[j] * feature(idx[i], j);
            const double r = pred - label(idx[i]);
            for (int j = 0; j < D; ++j) g[j] += r * feature(idx[i], j) / n;
            g[D] += r / n;
        }
        const double lr = sched.at(s);
        for (size_t k = 0; k < p.size(); ++k) {
            buf[k] = o.momentum * buf[k] + g[k];
            p[k] -= lr * buf[k];
        }
    }
    return p;
}

void check_params(const std::vector<float>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < got.size(); ++k) {
        INFO("parameter " << k);
        CHECK(got[k] == Approx(want[k]).margin(1e-5).epsilon(1e-4));
    }
}

std::vector<std::string> base_args(const std::string& dir) {
    return {"--run-dir", dir, "--optimizer", "sgd", "--momentum", "0.5", "--lr", "0.05", "--warmup-steps", "2",
            "--min-lr-ratio", "0.2", "--grad-clip", "0", "--batch-size", "8", "--log-every", "100",
            "--eval-every", "0", "--prefetch", "2"};
}

std::vector<std::string> with(std::vector<std::string> a, std::initializer_list<std::string> more) {
    a.insert(a.end(), more);
    return a;
}

} // namespace

TEST_CASE("the loop takes one update per batch, in the sampler's order, and checkpoints on time", "[loop]") {
    const std::string dir = fresh_dir();
    Run r(with(base_args(dir), {"--steps", "13", "--checkpoint-every", "5", "--keep-checkpoints", "5"}));
    CHECK(r.train() == kExitOk);
    check_params(r.params, reference(r.o, 13));  // 13 steps cross an epoch boundary (12 per epoch)
    CHECK(r.model.forwards == 13 + N / 16);       // the steps, then one evaluation at the last step
    const std::vector<std::string> ck = list_checkpoints(dir + "/checkpoints");
    REQUIRE(ck.size() == 3);  // newest first
    CHECK(ck[0] == checkpoint_path(dir + "/checkpoints", 13));
    CHECK(ck[1] == checkpoint_path(dir + "/checkpoints", 10));
    CHECK(ck[2] == checkpoint_path(dir + "/checkpoints", 5));
    const CheckpointState last = load_checkpoint(ck[0]);
    CHECK(last.step == 13);
    CHECK(last.params == r.params);
}

TEST_CASE("a non-finite step is skipped, or ends the run before it touches the parameters", "[loop]") {
    {
        Run r(with(base_args(fresh_dir()), {"--steps", "9", "--inject-fault", "0:4:nan", "--on-nonfinite", "skip"}));
        CHECK(r.train() == kExitOk);
        check_params(r.params, reference(r.o, 9, /*skip=*/4));
    }
    {
        const std::string dir = fresh_dir();
        Run r(with(base_args(dir), {"--steps", "9", "--inject-fault", "0:4:nan", "--checkpoint-every", "2"}));
        CHECK(r.train() == kExitNonfinite);
        check_params(r.params, reference(r.o, 3));
        // The last checkpoint is step 2's: none is written for the step that stopped.
        const std::vector<std::string> ck = list_checkpoints(dir + "/checkpoints");
        REQUIRE(!ck.empty());
        CHECK(ck[0] == checkpoint_path(dir + "/checkpoints", 2));
    }
}

TEST_CASE("a run stopped and resumed from its checkpoint ends bit-identical to one that never stopped", "[loop]") {
    Run whole(with(base_args(fresh_dir()), {"--steps", "14"}));
    REQUIRE(whole.train() == kExitOk);
    const std::string dir = fresh_dir();
    {
        Run first(with(base_args(dir), {"--steps", "14", "--stop-after", "5"}));
        REQUIRE(first.train() == kExitOk);
        CHECK(first.model.forwards == 5);  // no evaluation before the last step
    }
    Run rest(with(base_args(dir), {"--steps", "14", "--resume", "auto"}));
    REQUIRE(rest.train() == kExitOk);
    CHECK(rest.model.forwards == 9 + N / 16);
    REQUIRE(rest.params.size() == whole.params.size());
    CHECK(std::memcmp(rest.params.data(), whole.params.data(), whole.params.size() * sizeof(float)) == 0);
}
