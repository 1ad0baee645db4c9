// run_training: the set-up phases, then the step loop. Set-up runs in phases that every rank
// finishes before the next one starts (all_ok): a user error in one of them ends the job with one
// message and exit code 2 on every rank. The order of the phases is the order of their
// collectives, the same on every rank:
//   1. stage the data to node-local storage (--stage-dir), check it against SHA256SUMS (--verify-data)
//   2. every rank has the same options (checksums compared)
//   3. local: threads, GPU health, the device; 3b. the MFU peak, summed over the ranks, before the
//      run allocates (then what the process holds is measured: the plan's runtime row);
//      3c. local: the data, the model, the optimizer, the sampler
//   4. every rank sees the same dataset
//   5. the gradient path (GPU health agreed first; the shared window or NCCL made together)
//   6. --io memory: the node's copy of the training split; the extra readers
//   7. local: the memory plan (the start-up table)
//   8. rank 0 finds the checkpoint to resume from; 9. every rank gets it
//  10. rank 0 opens the metrics file; 11. the banner; 12. node heartbeats
// The stop signals' handlers come first: a stop signal during set-up ends every rank with exit 75
// after the phase it arrived in (staging, the manifest's check and the lock wait stop at once).
// The watchdog watches staging and --verify-data while they move (each piece copied or hashed
// restarts it), the rest of set-up with --step-timeout plus --lock-wait, then every step. After set-up, any error is fatal (MPI_Abort),
// since other ranks may be inside a collective.
#include "dptrain/train/trainer.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/device.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/config/option_checks.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/checksum.h"
#include "dptrain/core/error.h"
#include "dptrain/core/memory.h"
#include "dptrain/data/stage.h"
#include "dptrain/data/verify.h"
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

// The run's parts, made by the set-up phases in order (the numbers above).
struct Setup {
    const Options& o;
    const Topology& topo;
    MpiCommunicator world;
    Reporter report;
    FaultPlan faults;
    std::unique_ptr<Device> device;
    std::unique_ptr<Task> task;
    std::unique_ptr<Model> model;
    std::vector<float> params;  // the host parameters; with a GPU-resident step, current at checkpoints
    std::unique_ptr<Optimizer> opt;
    std::unique_ptr<Sampler> sampler;
    LrSchedule sched;
    std::unique_ptr<GradientPath> grads;
    std::unique_ptr<Checkpoints> ckpt;
    std::string io_note;
    MemoryPlan plan;        // this rank's memory, planned, and its table
    size_t gpu_used_at_start = 0;  // this rank's GPU memory in use before the model (0 on the CPU)
    std::string plan_text;
    double peak_gflops = 0;  // summed over the ranks
    long start_step = 0;

    Setup(const Options& o_, const Topology& t) : o(o_), topo(t), world(t.world), report(o_, t) {}

    // 2. Ranks launched with different options (per-node scripts, MPMD) would issue mismatched
    // collectives and hang: a checksum of every resolved option is compared before any other
    // collective.
    void check_same_options() {
        const std::string ini = o.to_ini();
        unsigned long h[2] = {(unsigned long)checksum64(ini.data(), ini.size()), 0};
        h[1] = ~h[0];
        world.allreduce(h, 2, ReduceOp::max);
        if (h[0] != ~h[1])
            throw UserError("ranks were started with different options (the resolved options differ between ranks); "
                            "give every rank the same command line and --config");
    }

    // 3. Local on every rank: the device, and the threads it computes with.
    void open_device() {
        report.open_gpu_health();
        cpu::set_threads(compute_threads());
        device = make_device(o.device, topo);
        gpu_used_at_start = device->gpu_memory_used();  // the context's own, before the run allocates
    }

    // 3b. Collective: the MFU denominator. Every rank measures at once (so shared cores and memory
    // are counted as they will be used), and the peaks add up. Before the run allocates: the
    // measurement's matrices, freed after it, then stay below the run's peak memory.
    void measure_peak() {
        peak_gflops = o.peak_gflops > 0 ? o.peak_gflops : device->peak_gflops();
        world.allreduce(&peak_gflops, 1, ReduceOp::sum);
    }

    // 3c. Local on every rank: the data, the model and its state.
    void make_local() {
        task = Task::open(o, topo);
        model = device->make_model(task->model_spec(o));
        params.assign(model->num_params(), 0.0f);
        model->init(params.data(), o.seed);
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

    // Bound by the launcher (mpirun binds each rank to cores): what it was given. Unbound: the
    // host's cores shared among all its ranks (simulated nodes share them too: sized by the
    // simulated node, 4 one-rank nodes on 2 cores ran 8 threads and took 14x as long). --threads
    // overrides both.
    int compute_threads() const {
        if (o.threads > 0) return o.threads;
        bool bound = false;
        const int cores = cpu::usable_cores(&bound);
        return bound ? cores : std::max(1, cores / topo.host_size);
    }

    // 4. Every rank must see the same dataset (a node with stale shards would silently train on
    // other data): its sizes compared before the collectives that depend on them.
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

    // 5. Collective.
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

    // 6. --io memory: the node's ranks load the training split into one shared buffer, each a
    // share; the all_ok around this is the barrier before anyone reads. The extra readers of
    // --io-threads come after, so that they share the loaded copy.
    void load_data() {
        if (o.io == IoMode::memory) topo.require_one_host("--io memory");
        const std::string note = task->load_node_memory();
        if (topo.local_rank == 0) io_note = note;
        task->readers(o.io_threads);
    }

    // 7. Local: what this rank's parts take, from the model's shape (the start-up table, and the
    // end's peak beside it). `runtime`: what the process held before the run allocated.
    void plan_memory_use(size_t runtime) {
        PlanFacts f = plan_facts(*task, o, topo.size, topo.local_size, runtime);
        f.gpu = device->gpu() >= 0;
        std::string from;
        const size_t budget = device->gpu() < 0 ? host_budget(topo.host_size, &from) : 0;  // the host's memory
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

    // 12. With more than one host: node heartbeats beside the checkpoints, so that a rank that
    // times out waiting for its peers can name the node that went silent (reliability.h).
    void start_heartbeats(Watchdog& watchdog) {
        std::vector<std::string> nodes;
        for (const std::string& h : world.allgather_text(topo.host))
            if (std::find(nodes.begin(), nodes.end(), h) == nodes.end()) nodes.push_back(h);
        if (nodes.size() > 1) watchdog.heartbeats(o.run_dir + "/heartbeat", topo.host, topo.local_rank == 0, nodes);
    }
};

// 1. --stage-dir: local rank 0 of every node copies --data to node-local storage; the node's other
// ranks wait in the collective. Every rank then reads the copy. Rank 0 reports its node's copy
// and the slowest node's time.
// all_ok, with this rank's wait for the others (once its own part is done, or has failed) marked
// for the watchdog: the rank stuck in a phase (rank 0 reading a checkpoint) names itself first,
// and the ranks that wait for it say that they wait.
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

// Leaves the watchdog unwatched when it goes, however the watched work before it ended.
struct Unwatch {
    Watchdog& dog;
    ~Unwatch() { dog.allow(kUnwatched); }
};

bool stage_data(Options& o, const Topology& topo, Watchdog& dog, const FaultPlan& faults) {
    std::string src = o.data;
    while (src.size() > 1 && src.back() == '/') src.pop_back();
    // The copy is named after the dataset directory's own name ("." or ".." resolved first).
    char* real = realpath(src.c_str(), nullptr);
    std::string name = real ? real : src;
    std::free(real);
    name = name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
    if (name.empty() || name == "." || name == "..") name = "data";
    const std::string dest = o.stage_dir + "/" + name;
    StageResult r;
    // A copy is watched while it moves: its copier's watchdog starts again at every piece, so a copy
    // of any size passes and one that stops for --step-timeout (a filesystem that hangs) ends the
    // job naming the rank. The ranks that wait for their node's copy, and a copier done before
    // the other nodes' (waiting in the collective), are not watched meanwhile.
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
        // However the copy ends (done, failed, stopped), the wait for the other nodes' is unwatched:
        // a failed copy's error is printed once every node has agreed.
        const Unwatch unwatch{dog};
        try {
            r = stage_directory(
                src, dest, 8, true,
                [&](const std::string& s) {
                    if (topo.rank == 0) std::printf("stage: %s\n", s.c_str());
                },
                preemption_requested,  // a stop signal: exit 75 (run_training)
                alive);
        } catch (const StopRequested& e) {
            throw StopRequested("--stage-dir " + o.stage_dir + ": " + e.what());  // the option the copy came from
        } catch (const UserError& e) {
            throw UserError("--stage-dir " + o.stage_dir + ": " + e.what());
        }
    });
    if (!ok) return false;
    // Which nodes copied and which reused a copy, and the slowest copy's report.
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

// 1b. --verify-data: --data (or the staged copy) against its SHA256SUMS, the files of the manifest
// shared among each node's ranks (every node checks what it reads). Watched as staging is: each
// rank's hashing restarts the watchdog at every piece, so a filesystem that stops answering ends
// the job naming the rank; a rank done with its share waits for the others unwatched.
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

// After each set-up phase, every rank: exit 2 when it failed anywhere, exit 75 when a stop signal
// reached any rank (SIGUSR1 before training asks for a requeue just the same: nothing has trained
// since the last checkpoint, so there is nothing to save), else 0: go on.
int setup_verdict(MPI_Comm w, int rank, bool ok, const std::string& run_dir) {
    int sig = preemption_signal();
    MpiCommunicator(w).allreduce(&sig, 1, ReduceOp::max);
    if (sig == 0) return ok ? kExitOk : kExitUser;
    if (rank == 0) {
        const bool usr1 = sig == SIGUSR1;
        write_stopped_by(run_dir, usr1 ? "SIGUSR1" : "SIGTERM");  // for the batch scripts, as a stop in training
        std::printf("%s during set-up, before any step: nothing trained since the last checkpoint\nexit %d: %s\n",
                    usr1 ? "preempted: a rank received SIGUSR1 (a preemption notice)"
                         : "stopped: a rank received SIGTERM (scancel, a time limit or a deleted pod)",
                    kExitPreempted,
                    usr1 ? "requeue the job with --resume auto to continue" : "run again with --resume auto to continue");
        std::fflush(stdout);
    }
    return kExitPreempted;
}

} // namespace

int run_training(const Options& opts_in, const Topology& topo) {
    // First: a stop signal during set-up (staging, the wait for the checkpoint directory's lock,
    // loading) ends the run with exit 75 at the next phase, not by the signal's default action,
    // whose exit code no launcher requeues.
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
    // The watchdog from here: a copy to --stage-dir that stops moving (stage_data), then a shard
    // that never answers, a device or NCCL that hangs. The rest of set-up as a whole gets
    // --step-timeout plus --lock-wait, for the checkpoint directory's lock.
    StepClock clock(opts.step_timeout);
    if (!opts.stage_dir.empty() && !go_on(stage_data(opts, topo, clock.watchdog(), faults))) return code;
    if (opts.verify_data && !go_on(verify_data(opts, topo, clock.watchdog()))) return code;
    clock.watchdog().begin(0, Phase::setup);
    clock.watchdog().allow(opts.lock_wait);
    Watchdog& dog = clock.watchdog();
    Setup s(opts, topo);
    s.faults = faults;  // parsed (and checked) once, above
    if (!go_on(agreed(dog, w, [&] { s.check_same_options(); })) || !go_on(agreed(dog, w, [&] { s.open_device(); })))
        return code;
    s.measure_peak();
    // What the process holds before the run allocates: the libraries, with the buffers the
    // measurement's sgemm touched.
    const size_t runtime = measure_runtime();
    if (!go_on(agreed(dog, w, [&] { s.make_local(); })) || !go_on(agreed(dog, w, [&] { s.check_same_data(); })) ||
        !go_on(agreed(dog, w, [&] { s.make_gradients(); })) || !go_on(agreed(dog, w, [&] { s.load_data(); })))
        return code;
    s.plan_memory_use(runtime);
    if (!go_on(agreed(dog, w, [&] { s.ckpt->find(s.params, *s.opt); }))) return code;
    s.start_step = s.ckpt->share(s.world, s.params, *s.opt);
    if (!go_on(agreed(dog, w, [&] { s.report.open_metrics(s.start_step); }))) return code;
    s.report.banner(s.facts());
    s.start_heartbeats(clock.watchdog());
    Evaluator eval(*s.task, *s.model, s.world, opts.eval_max);
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
