// run_training: the set-up phases, then the step loop (loop.cpp); not the step itself.
// Each phase ends in all_ok on every rank, so a user error anywhere exits 2 everywhere with one
// message. Phase order is collective order, the same on every rank:
//   1. stage --data to --stage-dir; 1b. --verify-data against SHA256SUMS
//   2. every rank has the same options (checksums compared)
//   3. local: threads, GPU health, the device; 3b. the MFU peak, summed, before the run allocates;
//      3c. local: the data, the memory plan (a run that does not fit is refused before the model
//      allocates), the model, the optimizer, the sampler
//   4. every rank sees the same dataset
//   5. the gradient path (GPU health agreed first; the shared window or NCCL made together)
//   6. --io memory: the node's copy of the training split; the extra readers
//   8. rank 0 finds the checkpoint to resume from; 9. every rank gets it
//  10. rank 0 opens the metrics file; 11. the banner; 12. node heartbeats
// Stop handlers come first: a stop signal in set-up exits 75 after its phase. The watchdog
// restarts per piece in staging and --verify-data, gives the rest of set-up --step-timeout plus
// --lock-wait, then watches every step. After set-up any error is fatal (MPI_Abort): peers may be
// inside a collective.
#include "dptrain/train/trainer.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/decoders.h"
#include "dptrain/backend/device.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/config/option_checks.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/checksum.h"
#include "dptrain/core/error.h"
#include "dptrain/core/memory.h"
#include "dptrain/data/stage.h"
#include "dptrain/data/verify.h"
#include "dptrain/io/promotion.h"
#include "dptrain/io/reliability.h"
#include "dptrain/train/loop.h"
#include "dptrain/train/memory_plan.h"
#include "dptrain/data/sampler.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

namespace dptrain {

namespace {

struct Setup {
    const Options& o;
    const Topology& topo;
    MpiCommunicator world;
    Reporter report;
    FaultPlan faults;
    std::unique_ptr<Device> device;
    std::unique_ptr<Task> task;
    std::unique_ptr<Model> model;
    std::vector<float> params;  // with a GPU-resident step, current only at checkpoints
    std::unique_ptr<Optimizer> opt;
    std::unique_ptr<Sampler> sampler;
    LrSchedule sched;
    std::unique_ptr<GradientPath> grads;
    std::unique_ptr<Checkpoints> ckpt;
    std::string io_note;
    MemoryPlan plan;
    size_t gpu_used_at_start = 0;  // before the model (0 on the CPU)
    std::string plan_text;
    double peak_gflops = 0;  // summed over the ranks
    long start_step = 0;

    Setup(const Options& o_, const Topology& t) : o(o_), topo(t), world(t.world), report(o_, t) {}

    // 2. Different options (per-node scripts, MPMD) would mismatch collectives and hang.
    void check_same_options() {
        const std::string ini = o.to_ini();
        unsigned long h[2] = {(unsigned long)checksum64(ini.data(), ini.size()), 0};
        h[1] = ~h[0];
        world.allreduce(h, 2, ReduceOp::max);
        if (h[0] != ~h[1])
            throw UserError("ranks were started with different options (the resolved options differ between ranks); "
                            "give every rank the same command line and --config");
    }

    void open_device() {
        report.open_gpu_health();
        const int threads = compute_threads();
        cpu::set_threads(threads);
        if (const std::string n = o.threads > 0 ? cpu::thread_note(threads) : ""; !n.empty())
            report.print("note: --threads " + std::to_string(threads) + ": " + n + "\n");
        device = make_device(o.device, topo);
        gpu_used_at_start = device->gpu_memory_used();  // the context's own, before the run allocates
    }

    // 3b. All ranks at once, so shared cores count as the run will use them; before the run
    // allocates, so the measurement's freed matrices stay below the run's peak.
    void measure_peak() {
        peak_gflops = o.peak_gflops > 0 ? o.peak_gflops : device->peak_gflops();
        world.allreduce(&peak_gflops, 1, ReduceOp::sum);
    }

    // A stop signal leaves the rest out (the phase's verdict then ends the run with exit 75): the
    // weights' initialization and the optimizer's allocation took tens of seconds at 200M.
    void make_local(size_t runtime) {
        task = Task::open(o, topo);
        if (preemption_requested()) return;
        plan_memory_use(runtime);  // before the model allocates: a run that does not fit is refused, not killed
        if (!plan.fits() && !o.force_memory)
            throw UserError(strfmt("memory: the run needs %.1f MiB on rank 0 and %.1f MiB are there (%s): it would be "
                                   "killed for lack of memory; %s, or train anyway with --force-memory (the plan, "
                                   "per part: dptrain plan with these options)",
                                   plan.bounded() / 1048576.0, plan.budget / 1048576.0, plan.budget_from.c_str(),
                                   plan.largest_batch > 0
                                       ? strfmt("--batch-size %d fits", plan.largest_batch).c_str()
                                       : "no --batch-size fits: --shard-optimizer, --recompute block or more memory"));
        model = device->make_model(task->model_spec(o));
        params.assign(model->num_params(), 0.0f);
        model->init(params.data(), o.seed, preemption_requested);
        if (preemption_requested()) return;
        const Span whole{0, model->layout().total};
        opt = std::make_unique<Optimizer>(optimizer_settings(o), model->layout(),
                                          o.shard_optimizer ? shard_span(whole.end, topo.rank, topo.size) : whole);
        const long global_batch = (long)o.batch_size * topo.size * o.grad_accum;
        sampler = std::make_unique<Sampler>(task->train().num_samples(), global_batch, o.seed,
                                            Sampler::epochs_for(o.io_threads), o.shuffle_block);
        sched.lr = o.lr;
        sched.min_ratio = o.min_lr_ratio;
        sched.warmup = o.warmup_steps;
        sched.total = o.steps;
        ckpt = std::make_unique<Checkpoints>(
            o, topo.rank,
            RunIdentity{model->signature(), global_batch, topo.size, task->train().num_samples(), task->tokenizer_kind(),
                        task->tokenizer_table()});
    }

    // Bound by the launcher: what it gave. Unbound: the host's cores split among all its ranks
    // (simulated nodes included, lest they oversubscribe).
    int compute_threads() const {
        if (o.threads > 0) return o.threads;
        bool bound = false;
        const int cores = cpu::usable_cores(&bound);
        return bound ? cores : std::max(1, cores / topo.host_size);
    }

    // 4. A node with stale shards would silently train on other data.
    void check_same_data() {
        const Dataset& tr = task->train();
        long lo[3] = {tr.num_samples(), (long)tr.floats_per_sample() + tr.ints_per_sample(), task->val().num_samples()};
        long hi[3] = {lo[0], lo[1], lo[2]};
        world.allreduce(lo, 3, ReduceOp::min);
        world.allreduce(hi, 3, ReduceOp::max);
        if (std::memcmp(lo, hi, sizeof lo) != 0)
            throw UserError(strfmt("--data %s: ranks see different datasets (%ld..%ld training samples); every node "
                                   "must read the same shards",
                                   o.data.c_str(), lo[0], hi[0]));
    }

    void make_gradients() {
        report.agree_gpu_health();
        GradientSpec g;
        g.algo = o.allreduce;
        g.bucket_mb = o.bucket_mb;
        g.overlap = o.overlap;
        g.wire = o.grad_dtype;
        g.gpu_state = o.gpu_state;
        g.grad_clip = o.grad_clip;
        g.optimizer = optimizer_settings(o);
        g.shard_optimizer = o.shard_optimizer;
        grads = device->make_gradients(*model, params.data(), *opt, g, topo);
    }

    // 6. Each of the node's ranks loads a share; the all_ok around this is the barrier before any
    // read. Extra readers come after, to share the copy.
    void load_data() {
        if (o.io == IoMode::memory) topo.require_one_host("--io memory");
        const std::string note = task->load_node_memory();
        if (topo.local_rank == 0) io_note = note;
        task->readers(o.io_threads);
    }

    // (3c) `runtime`: what the process held before the run allocated.
    void plan_memory_use(size_t runtime) {
        PlanFacts f = plan_facts(*task, o, topo.size, topo.local_size, runtime);
        f.gpu = device->gpu() >= 0;
        std::string from;
        const size_t budget = device->gpu() < 0 ? host_budget(topo.host_size, &from) : 0;
        plan = plan_memory(o, f, budget, from);
        plan_text = plan_table(plan, o, f);
    }

    RunFacts facts() const {
        RunFacts f;
        f.backend = device->describe(*grads);
        f.device_note = device->note();
        std::string why;
        if (device->gpu() < 0 && gpu_count(&why) == 0) f.no_gpu = why;
        f.data = task->describe();
        f.io_note = io_note;
        f.model = model->signature();
        f.params = model->num_params();
        f.activation_bytes = model->activation_bytes();
        f.global_batch = (long)o.batch_size * topo.size * o.grad_accum;
        f.steps_per_epoch = sampler->steps_per_epoch();
        f.gradients = grads->describe();
        f.gradient_notes = grads->notes();
        f.peak_gflops = peak_gflops;
        f.flops_per_sample = model->flops_per_sample();
        f.unit = task->unit();
        f.tokens_per_sample = task->tokens_per_sample();
        f.on_gpu = device->gpu() >= 0;
        f.resumed_from = ckpt->resumed_from();
        f.initialized_from = ckpt->initialized_from();
        f.memory_plan = plan_text;
        f.start_step = start_step;
        f.start_epoch = sampler->epoch_of(start_step);
        return f;
    }

    // 12. So that a rank timing out on its peers can name the node that went silent.
    void start_heartbeats(Watchdog& watchdog) {
        std::vector<std::string> nodes;
        for (const std::string& h : world.allgather_text(topo.host))
            if (std::find(nodes.begin(), nodes.end(), h) == nodes.end()) nodes.push_back(h);
        if (nodes.size() > 1) watchdog.heartbeats(o.run_dir + "/heartbeat", topo.host, topo.local_rank == 0, nodes);
    }
};

// all_ok, with this rank's wait for the others marked for the watchdog: the rank stuck in a phase
// (rank 0 reading a checkpoint) names itself first, and the waiting ranks say that they wait.
template <typename Fn>
bool agreed(Watchdog& dog, MPI_Comm w, Fn&& fn) {
    struct Done {
        Watchdog& dog;
        ~Done() { dog.waiting(false); }
    } done{dog};
    return all_ok(w, [&] {
        struct Mark {
            Watchdog& dog;
            ~Mark() { dog.waiting(true); }
        } mark{dog};
        fn();
    });
}

// Unwatched on leaving scope, however the watched work ended.
struct Unwatch {
    Watchdog& dog;
    ~Unwatch() { dog.allow(kUnwatched); }
};

// 1. --stage-dir: local rank 0 of each node copies --data to node-local storage while the node's
// other ranks wait in the collective; every rank then reads the copy.
bool stage_data(Options& o, const Topology& topo, Watchdog& dog, const FaultPlan& faults) {
    std::string src = o.data;
    while (src.size() > 1 && src.back() == '/') src.pop_back();
    // Named after the dataset directory's own name ("." or ".." resolved first).
    char* real = realpath(src.c_str(), nullptr);
    std::string name = real ? real : src;
    std::free(real);
    name = name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
    if (name.empty() || name == "." || name == "..") name = "data";
    const std::string dest = o.stage_dir + "/" + name;
    StageResult r;
    // The copier's watchdog restarts at every piece: a copy of any size passes, a stalled one names
    // the rank. Waiting ranks are unwatched (docs/RELIABILITY.md, "Failures").
    dog.allow(kUnwatched);
    const bool hang = faults.has(topo.rank, 1, Fault::Kind::stage_hang);
    const bool slow = faults.has(topo.rank, 1, Fault::Kind::stage_slow);
    const auto alive = [&dog, hang, slow] {
        dog.begin(0, Phase::setup);
        while (hang) std::this_thread::sleep_for(std::chrono::seconds(1));  // --inject-fault R:1:stage-hang
        if (slow) std::this_thread::sleep_for(std::chrono::seconds(2));     // --inject-fault R:1:stage-slow
    };
    const bool ok = all_ok(topo.world, [&] {
        if (topo.local_rank != 0) return;
        // However the copy ends, the wait for other nodes is unwatched.
        const Unwatch unwatch{dog};
        try {
            r = stage_directory(
                src, dest, 8, true,
                [&](const std::string& s) {
                    if (topo.rank == 0) std::printf("stage: %s\n", s.c_str());
                },
                preemption_requested,  // exit 75 (run_training)
                alive);
        } catch (const StopRequested& e) {
            throw StopRequested("--stage-dir " + o.stage_dir + ": " + e.what());
        } catch (const UserError& e) {
            throw UserError("--stage-dir " + o.stage_dir + ": " + e.what());
        }
    });
    if (!ok) return false;
    MpiCommunicator world(topo.world);
    long counts[2] = {topo.local_rank == 0 && !r.reused ? 1L : 0L, topo.local_rank == 0 && r.reused ? 1L : 0L};
    world.allreduce(counts, 2, ReduceOp::sum);
    const int slowest = world.max_loc(topo.local_rank == 0 && !r.reused ? r.seconds : -1.0).second;
    char report[512] = {};
    if (topo.rank == slowest)
        std::snprintf(report, sizeof report, "rank %d on %s: %s", topo.rank, topo.host.c_str(), r.summary().c_str());
    world.broadcast(report, sizeof report, slowest);
    if (topo.rank == 0) {
        std::printf("stage: %d node%s hold%s a verified copy in %s (copied on %ld, reused on %ld)%s%s\n", topo.num_nodes,
                    topo.num_nodes == 1 ? "" : "s", topo.num_nodes == 1 ? "s" : "", dest.c_str(), counts[0], counts[1],
                    counts[0] > 0 ? "; slowest copy: " : "", counts[0] > 0 ? report : "");
        std::fflush(stdout);
    }
    o.data = dest;
    return true;
}

// 1b. --verify-data: the manifest's files shared among each node's ranks (every node checks what
// it reads), watched as staging is.
bool verify_data(const Options& o, const Topology& topo, Watchdog& dog) {
    const double t0 = now_seconds();
    long hashed = 0;
    dog.allow(kUnwatched);
    const auto alive = [&dog] { dog.begin(0, Phase::setup); };
    if (!all_ok(topo.world, [&] {
            const Unwatch unwatch{dog};
            hashed = check_manifest(o.data, 2, topo.local_rank, topo.local_size, preemption_requested, alive);
        }))
        return false;
    MpiCommunicator(topo.world).allreduce(&hashed, 1, ReduceOp::sum);
    if (topo.rank == 0) {
        std::printf("verify-data: %s/SHA256SUMS: every shard listed, every file matches (%ld files hashed on %d node%s "
                    "in %.1f s)\n",
                    o.data.c_str(), hashed / std::max(1, topo.num_nodes), topo.num_nodes, topo.num_nodes == 1 ? "" : "s",
                    now_seconds() - t0);
        std::fflush(stdout);
    }
    return true;
}

// After each set-up phase, every rank: exit 2 when it failed anywhere, 75 when a stop signal
// reached any rank (SIGUSR1 too: nothing trained since the last checkpoint, nothing to save).
// --eval-task on every rank: its items read and checked, and a decoder on the run's device (its GPU
// or the CPU), fp32 as the checkpoints hold the parameters.
void add_eval_task(Evaluator& eval, const Options& o, const Task& task, const Device& device, const Topology& topo,
                   Reporter& report) {
    std::vector<ChoiceItem> items = read_choice_items(o.eval_task, "--eval-task");
    const GptConfig cfg = task.model_spec(o).gpt;
    const DeviceKind where = device.gpu() < 0 ? DeviceKind::cpu : DeviceKind::cuda;
    auto scorer = std::make_unique<ChoiceScorer>(cfg, tokenizer_from(task.tokenizer_kind(), task.tokenizer_table()),
                                                 make_decoder(where, cfg, Precision::fp32, topo.host_rank, topo.host_size));
    scorer->check(items, "--eval-task " + o.eval_task);
    report.print(strfmt("eval task: %s: %zu items scored by log-likelihood at each evaluation, on %s\n",
                        o.eval_task.c_str(), items.size(), scorer->where().c_str()));
    eval.set_task(std::move(items), std::move(scorer));
}

int setup_verdict(MPI_Comm w, int rank, bool ok, const std::string& run_dir) {
    int sig = preemption_signal();
    MpiCommunicator(w).allreduce(&sig, 1, ReduceOp::max);
    if (sig == 0) return ok ? kExitOk : kExitUser;
    if (rank == 0) {
        const bool usr1 = sig == SIGUSR1;
        write_stopped_by(run_dir, usr1 ? "SIGUSR1" : "SIGTERM");  // for the batch scripts
        std::printf("%s during set-up, before any step: nothing trained since the last checkpoint\nexit %d: %s\n",
                    usr1 ? "preempted: a rank received SIGUSR1 (a preemption notice)"
                         : "stopped: a rank received SIGTERM (scancel, a time limit or a deleted pod; or SIGHUP, a "
                           "lost terminal)",
                    kExitPreempted,
                    usr1 ? "requeue the job with --resume auto to continue" : "run again with --resume auto to continue");
        std::fflush(stdout);
    }
    return kExitPreempted;
}

// --batch-size auto: each rank plans with the data's shape against its own budget (its GPU's free
// memory, or its share of the host's), no more than its share of the training samples; the
// smallest choice is every rank's, and the micro-batches a step follow from it as from a given
// --batch-size. Before make_local, which sizes the readers, the model and the plan by it.
bool choose_batch(Setup& s, Options& opts, size_t runtime, Watchdog& dog) {
    const MPI_Comm w = s.topo.world;
    long mine = 0;
    std::string why;
    if (!agreed(dog, w, [&] {
            Options probe = opts;
            probe.batch_size = 1;  // the readers' rows while the batch is open
            const std::unique_ptr<Task> task = Task::open(probe, s.topo);
            PlanFacts f = plan_facts(*task, probe, s.topo.size, s.topo.local_size, runtime);
            f.gpu = s.device->gpu() >= 0;
            std::string from;
            size_t budget = 0;
            if (f.gpu) {
                budget = s.device->gpu_memory_free();
                from = strfmt("GPU %d's free memory", s.device->gpu());
            } else {
                budget = host_budget(s.topo.host_size, &from);
            }
            std::string reason;
            const int cap = auto_batch_cap(*task, f.gpu, s.topo.size, &reason);
            mine = auto_batch(probe, f, budget, from, f.gpu, cap, reason, &why);
        }))
        return false;
    long chosen = mine;
    s.world.allreduce(&chosen, 1, ReduceOp::min);
    opts.batch_size = (int)chosen;
    if (chosen < mine) why += strfmt("; every rank takes %ld, another rank's choice", chosen);
    s.report.print("note: " + why + "\n");
    return agreed(dog, w, [&] { resolve_grad_accum(opts, s.topo.size); });
}

} // namespace

int run_training(const Options& opts_in, const Topology& topo) {
    // First, so a stop in set-up exits 75 rather than by the signal's default action, whose exit
    // code no launcher requeues.
    install_preemption_handlers();
    Options opts = opts_in;
    const MPI_Comm w = topo.world;
    int code = kExitOk;
    auto go_on = [&](bool ok) { return (code = setup_verdict(w, topo.rank, ok, opts.run_dir)) == kExitOk; };
    FaultPlan faults;
    if (!go_on(all_ok(w, [&] {
            resolve_grad_accum(opts, topo.size);
            faults = FaultPlan::parse(opts.inject_fault);
            faults.check_fires(topo.size, opts.steps);
        })))
        return code;
    StepClock clock(opts.step_timeout);
    if (!opts.stage_dir.empty() && !go_on(stage_data(opts, topo, clock.watchdog(), faults))) return code;
    if (opts.verify_data && !go_on(verify_data(opts, topo, clock.watchdog()))) return code;
    clock.watchdog().begin(0, Phase::setup);
    clock.watchdog().allow(opts.lock_wait);
    Watchdog& dog = clock.watchdog();
    Setup s(opts, topo);
    s.faults = faults;
    if (!go_on(agreed(dog, w, [&] { s.check_same_options(); })) || !go_on(agreed(dog, w, [&] { s.open_device(); })))
        return code;
    s.measure_peak();
    // Before the run allocates: the libraries and the measurement's sgemm buffers.
    const size_t runtime = measure_runtime();
    if (opts.batch_size == kBatchAuto && !go_on(choose_batch(s, opts, runtime, dog))) return code;
    if (!go_on(agreed(dog, w, [&] { s.make_local(runtime); })) || !go_on(agreed(dog, w, [&] { s.check_same_data(); })) ||
        !go_on(agreed(dog, w, [&] { s.make_gradients(); })) || !go_on(agreed(dog, w, [&] { s.load_data(); })))
        return code;
    if (!go_on(agreed(dog, w, [&] { s.ckpt->find(s.params, *s.opt); }))) return code;
    s.start_step = s.ckpt->share(s.world, s.params, *s.opt);
    if (!go_on(agreed(dog, w, [&] { s.report.open_metrics(s.start_step); }))) return code;
    s.report.banner(s.facts());
    Evaluator eval(*s.task, *s.model, s.world, opts.eval_max);
    if (!opts.eval_task.empty() &&
        !go_on(agreed(dog, w, [&] { add_eval_task(eval, opts, *s.task, *s.device, topo, s.report); })))
        return code;
    if (!opts.promote_if.empty() && !go_on(agreed(dog, w, [&] {
            if (topo.rank == 0) open_promotion_log(opts.checkpoint_dir);
        })))
        return code;
    s.start_heartbeats(clock.watchdog());
    StepLoop loop(LoopParts{opts, topo, s.world, *s.task, *s.model, s.params, *s.opt, *s.grads, *s.sampler, s.sched,
                            *s.device, s.faults, clock, s.report, eval, *s.ckpt, s.peak_gflops, s.plan.total,
                            s.plan.gpu_total, s.plan.host_total, s.gpu_used_at_start});
    try {
        code = loop.run(s.start_step);
    } catch (const UserError& e) {
        fatal(e.what(), kExitUser);
    } catch (const std::exception& e) {
        fatal(strfmt("internal error: %s", e.what()), kExitFatal);
    }
    clock.watchdog().stop();
    return code;
}

} // namespace dptrain
