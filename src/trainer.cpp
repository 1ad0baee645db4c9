// The training loop. Set-up runs in phases that every rank finishes before the next one starts
// (all_ok): a user error in one of them ends the job with one message and exit code 2 on every
// rank. After set-up, any error is fatal (MPI_Abort), since other ranks may be inside a collective.
#include "dptrain/trainer.h"

#include "dptrain/allreduce.h"
#include "dptrain/backend.h"
#include "dptrain/checkpoint.h"
#include "dptrain/comm.h"
#include "dptrain/data.h"
#include "dptrain/error.h"
#include "dptrain/gpt.h"
#include "dptrain/gpu_health.h"
#ifdef DPTRAIN_HAVE_CUDA
#include "dptrain/cuda_gpt.h"
#include "dptrain/cuda_mlp.h"
#include "dptrain/device_step.h"
#endif
#include "dptrain/gradsync.h"
#include "dptrain/metrics.h"
#include "dptrain/model.h"
#include "dptrain/optim.h"
#include "dptrain/reliability.h"
#include "dptrain/stage.h"
#include "dptrain/tokens.h"
#include "dptrain/trace.h"
#include "dptrain/version.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include <unistd.h>

namespace dptrain {

class DeviceStep;  // device_step.h, in builds with CUDA

namespace {

constexpr int kEvalRows = 512;  // validation rows per forward pass
constexpr size_t kControl = 2;  // control floats summed with the gradients (see train_loop)
// The phases from Phase::data to Phase::optimizer are the parts of a step the breakdown times.
static_assert((int)Phase::optimizer - (int)Phase::data + 1 == kStepPhases, "step phases and Phase disagree");

// Whether rank 0's output reaches a terminal. Under mpirun, a rank's stdout is a pseudo-terminal
// that the launcher forwards wherever its own output goes, so it is the launcher's stdout
// (the parent process's) that tells.
bool output_is_terminal() {
    const char* term = std::getenv("TERM");
    if (!isatty(1) || (term && std::strcmp(term, "dumb") == 0)) return false;
    if (!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMIX_RANK") && !std::getenv("SLURM_STEP_ID")) return true;
    char link[256];
    std::string fd = strfmt("/proc/%d/fd/1", (int)getppid());
    ssize_t n = readlink(fd.c_str(), link, sizeof link - 1);
    if (n <= 0) return false;
    link[n] = 0;
    return std::strncmp(link, "/dev/pts/", 9) == 0 || std::strncmp(link, "/dev/tty", 8) == 0;
}

struct Run {
    const Options& o;
    const Topology& topo;
    MpiCommunicator comm;
    int W, rank;
    long global_batch;
    std::unique_ptr<Dataset> train, val;
    std::vector<std::unique_ptr<Dataset>> extra_readers;  // --io-threads > 1: more handles on the training shards
    std::unique_ptr<Model> model;
    bool lm = false;  // a language model on token windows
    int eval_rows = kEvalRows;
    std::string data_desc;
    Tokenizer tok;
    double peak_gflops = 0;  // summed over ranks, for MFU
    std::unique_ptr<Optimizer> opt;
    std::unique_ptr<Sampler> sampler;
    std::vector<float> params;  // the parameters; with a DeviceStep a host copy, current at checkpoints
#ifdef DPTRAIN_HAVE_CUDA
    std::unique_ptr<DeviceStep> dev;  // --gpu-state device: the step on the GPU's own buffers
#endif
    std::unique_ptr<AllreduceEngine> engine;  // owns the gradient buffer
    std::unique_ptr<GradSync> sync;
    LrSchedule sched;
    long start_step = 0;
    std::string resumed_from;
    JsonlWriter jsonl;
    std::string last_checkpoint;

    Run(const Options& o_, const Topology& t)
        : o(o_), topo(t), comm(t.world), W(t.size), rank(t.rank), global_batch((long)o_.batch_size * t.size) {}

    void print(const std::string& s) const {
        if (rank == 0) {
            if (status_shown) std::fputs("\r\x1b[K", stdout);  // the in-place progress line goes first
            status_shown = false;
            std::fputs(s.c_str(), stdout);
            std::fflush(stdout);
        }
    }

    // GPU health (--gpu-health): this rank's GPU in NVML, -1 for none; on when any rank has one.
    GpuHealth nvml;
    int gpu_index = -1;
    bool gpu_health = false;
    std::string gpu_health_note;
    void setup_gpu_health() {
        if (o.gpu_health == "off") return;
        std::string why;
        if (nvml.open(&why)) {
            gpu_index = nvml.index_for_cuda_device(topo.host_rank);  // the GPU choose_device binds
            if (gpu_index < 0) why = strfmt("NVML sees %d GPUs, none for local rank %d", nvml.count(), topo.host_rank);
        }
        if (gpu_index < 0 && o.gpu_health == "on") throw UserError(strfmt("--gpu-health on: %s", why.c_str()));
        if (gpu_index < 0) gpu_health_note = why;
    }

    // --device: the CUDA device this rank computes on (its local rank's GPU), or -1 for the CPU.
    // device_note says why auto chose the CPU.
    int gpu_device = -1;
    std::string device_note;
    int choose_device() {
        if (o.device == "cpu") return -1;
#ifdef DPTRAIN_HAVE_CUDA
        std::string why;
        int n = cuda::device_count(&why);
        if (n == 0) {
            std::string reason = strfmt("no GPU (%s)", why.c_str());
            if (o.device == "cuda") throw UserError(strfmt("--device cuda: %s; use --device cpu", reason.c_str()));
            device_note = reason + ": the CPU backend trains";
            return -1;
        }
        try {
            gpu_device = cuda::bind_device(topo.host_rank, topo.host_size);  // the host's GPUs, even on simulated nodes
        } catch (const UserError& e) {
            if (o.device == "cuda") throw;
            device_note = strfmt("%s: the CPU backend trains", e.what());  // auto: more ranks than GPUs
            return -1;
        }
        return gpu_device;
#else
        if (o.device == "cuda")
            throw UserError("--device cuda: this build has no CUDA (build with nvcc present, or make CUDA=1)");
        device_note = "built without CUDA: the CPU backend trains";
        return -1;
#endif
    }

    // Phase 1, local on every rank: threads, data, model, optimizer.
    void setup_local() {
        setup_gpu_health();
        faults = FaultPlan::parse(o.inject_fault);
        if (rank == 0 && o.async_checkpoint) async_ckpt = std::make_unique<AsyncCheckpointer>();
        int threads = o.threads;
        if (threads == 0) {
            // Bound by the launcher (mpirun binds each rank to cores): use what it was given.
            // Unbound: share the node's cores among its ranks.
            bool bound = false;
            int cores = cpu::usable_cores(&bound);
            threads = bound ? cores : std::max(1, cores / topo.local_size);
        }
        cpu::set_threads(threads);

        const Precision precision = parse_precision(o.precision);
        lm = o.model == "gpt";
        if (lm) {
            int gpu = choose_device();
            (void)gpu;  // used only by builds with CUDA
            IoMode io = parse_io_mode(o.io);
            auto tr = std::make_unique<TokenShardSet>(TokenShardSet::open(o.data, "train", o.block_size, o.seed, true,
                                                                          io, io == IoMode::memory ? topo.node
                                                                                                   : MPI_COMM_NULL));
            auto va = std::make_unique<TokenShardSet>(TokenShardSet::open(o.data, "val", o.block_size, o.seed, false));
            if (va->tokenizer().kind != tr->tokenizer().kind || va->tokenizer().chars != tr->tokenizer().chars)
                throw UserError(strfmt("--data %s: validation and training shards have different vocabularies; "
                                       "regenerate them together",
                                       o.data.c_str()));
            tok = tr->tokenizer();
            GptConfig cfg;
            cfg.vocab_size = o.vocab_size > 0 ? o.vocab_size : tok.vocab_size();
            if (cfg.vocab_size < tok.vocab_size())
                throw UserError(strfmt("--vocab-size %d is smaller than the data's vocabulary of %d", o.vocab_size,
                                       tok.vocab_size()));
            cfg.block_size = o.block_size;
            cfg.n_layer = o.n_layer;
            cfg.n_head = o.n_head;
            cfg.n_embd = o.n_embd;
            cfg.flash_attention = o.attention == "flash";
            eval_rows = o.batch_size;  // activations are sized for the training batch
            data_desc = strfmt("%ld training tokens in %d shard%s (%ld windows of %d + 1), %ld validation windows, %s "
                               "vocabulary of %d",
                               tr->num_tokens(), tr->num_shards(), tr->num_shards() == 1 ? "" : "s", tr->num_samples(),
                               o.block_size, va->num_samples(), tok.kind.c_str(), tok.vocab_size());
#ifdef DPTRAIN_HAVE_CUDA
            if (gpu >= 0) model = std::make_unique<CudaGpt>(cfg, o.batch_size, gpu, precision);
#endif
            if (!model) model = std::make_unique<Gpt>(cfg, o.batch_size);
            train = std::move(tr);
            val = std::move(va);
        } else {
            IoMode io = parse_io_mode(o.io);
            MPI_Comm io_comm = io == IoMode::memory ? topo.node : io == IoMode::collective ? topo.world : MPI_COMM_NULL;
            auto tr = std::make_unique<ShardSet>(ShardSet::open(o.data, "train", o.batch_size, io, io_comm));
            auto va = std::make_unique<ShardSet>(ShardSet::open(o.data, "val", kEvalRows));
            if (va->dim() != tr->dim() || va->num_classes() != tr->num_classes())
                throw UserError(strfmt("--data %s: validation shards have %d features / %d classes, training shards %d / "
                                       "%d; regenerate them together",
                                       o.data.c_str(), va->dim(), va->num_classes(), tr->dim(), tr->num_classes()));
            Activation act = o.activation == "gelu" ? Activation::gelu : Activation::relu;
            int gpu = choose_device();
            (void)gpu;  // used only by builds with CUDA
#ifdef DPTRAIN_HAVE_CUDA
            if (gpu >= 0)
                model = std::make_unique<CudaMlp>(tr->dim(), o.hidden_sizes, tr->num_classes(), act,
                                                  std::max(o.batch_size, kEvalRows), gpu);
#endif
            if (!model)
                model = std::make_unique<Mlp>(tr->dim(), o.hidden_sizes, tr->num_classes(), act,
                                              std::max(o.batch_size, kEvalRows));
            data_desc = strfmt("%ld training samples in %d shards, %ld validation samples, %d features, %d classes",
                               tr->num_samples(), tr->num_shards(), va->num_samples(), tr->dim(), tr->num_classes());
            train = std::move(tr);
            val = std::move(va);
        }
        model->set_precision(precision);
        params.assign(model->num_params(), 0.0f);
        model->init(params.data(), o.seed);
        opt = std::make_unique<Optimizer>(o.optimizer == "sgd" ? Optimizer::Kind::sgd : Optimizer::Kind::adamw,
                                          model->layout(), o.beta1, o.beta2, o.eps, o.momentum, o.weight_decay);
        sampler = std::make_unique<Sampler>(train->num_samples(), global_batch, o.seed, o.io_threads > 1 ? 2 : 1,
                                            o.shuffle_block);
        sched.lr = o.lr;
        sched.min_ratio = o.min_lr_ratio;
        sched.warmup = o.warmup_steps;
        sched.total = o.steps;
    }

    // Phase 2, collective: the all-reduce engine (its shared window is allocated by the ranks of
    // each node together) and the gradient buckets over its buffer.
    // --io memory: the node's ranks load the training rows into one shared buffer, each a share;
    // the all_ok around this is the barrier before anyone reads.
    // The extra readers of --io-threads are made afterwards, so that they share the loaded copy.
    void load_memory() {
        auto* shards = dynamic_cast<ShardSet*>(train.get());
        auto* tokens = dynamic_cast<TokenShardSet*>(train.get());
        if (shards && shards->mode() == IoMode::memory) {
            double t0 = now_seconds();
            shards->load_node_memory();
            if (topo.local_rank == 0)
                io_note = strfmt("io memory: %.1f MiB of training rows loaded into node-shared memory in %.2f s",
                                 shards->memory_bytes() / 1048576.0, now_seconds() - t0);
        }
        if (tokens && tokens->mode() == IoMode::memory) {
            double t0 = now_seconds();
            tokens->load_node_memory();
            if (topo.local_rank == 0)
                io_note = strfmt("io memory: %.1f MiB of training tokens loaded into node-shared memory in %.2f s",
                                 tokens->memory_bytes() / 1048576.0, now_seconds() - t0);
        }
        for (int k = 1; k < o.io_threads; ++k) extra_readers.push_back(train->reopen());
    }
    std::string io_note;

    void setup_comm() {
        int any = gpu_index >= 0;
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, topo.world));
        gpu_health = any != 0;
        engine = std::make_unique<AllreduceEngine>(o.allreduce, topo, model->num_params() + kControl);
        DType wire = o.grad_dtype == "bf16" ? DType::bf16 : DType::f32;
        int level = 0;
        MPI_CHECK(MPI_Query_thread(&level));
        // The communication thread calls MPI while the main thread does not: SERIALIZED suffices.
        // auto: a communication thread only pays when it has a core of its own; sharing the
        // compute threads' cores it slowed 2 ranks on 2 cores by 8% of the step (BENCHMARKS.md).
        bool bound = false;
        int cores = cpu::usable_cores(&bound);
        spare_core = bound ? cores > cpu::get_threads() : cores >= topo.local_size * (cpu::get_threads() + 1);
        overlap = (o.overlap == "on" || (o.overlap == "auto" && spare_core)) && level >= MPI_THREAD_SERIALIZED;
        thread_level_ok = level >= MPI_THREAD_SERIALIZED;
        sync = std::make_unique<GradSync>(*engine, model->layout(), o.bucket_mb, wire, overlap, kControl);
        overlap = sync->overlapped();
        // --gpu-state device or auto: when every rank trains on a GPU, the step runs on the model's
        // device buffers (all ranks decide together: NCCL's set-up below is collective). Several
        // ranks need NCCL for it; auto falls back to the host path without it, device refuses.
        int all_gpu = gpu_device >= 0 && o.gpu_state != "host" ? 1 : 0;
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &all_gpu, 1, MPI_INT, MPI_MIN, topo.world));
#ifdef DPTRAIN_HAVE_CUDA
#ifndef DPTRAIN_HAVE_NCCL
        if (all_gpu && W > 1 && o.gpu_state == "auto") {
            all_gpu = 0;
            gpu_state_note = "this build has no NCCL to sum gradients on the GPUs: parameters and optimizer stay on "
                             "the host";
        }
#endif
        auto* resident = dynamic_cast<cuda::Resident*>(model.get());
        if (all_gpu && resident) {
            DeviceStep::Hyper h;
            h.kind = opt->kind();
            h.beta1 = o.beta1;
            h.beta2 = o.beta2;
            h.eps = o.eps;
            h.momentum = o.momentum;
            h.weight_decay = o.weight_decay;
            DeviceStep::Sum how;
            how.topo = &topo;
            how.algo = o.allreduce;
            how.bucket_mb = o.bucket_mb;
            dev = std::make_unique<DeviceStep>(*resident, model->layout(), h, how);
            resident->set_resident(true);
        }
#endif
    }
    bool overlap = false, spare_core = false, thread_level_ok = true;
    std::string gpu_state_note;  // why --gpu-state auto kept the state on the host

    // Phase 3, collective: every rank must see the same dataset (a node with stale shards would
    // silently train on other data).
    // Phase 3b, collective: the MFU denominator. Every rank measures sgemm at once (so shared
    // cores and memory are counted as they will be used), and the peaks add up.
    void measure_peak() {
        // On a GPU the peak is the user's to give (--peak-gflops); the CPU's sgemm says nothing of it.
        double mine = o.peak_gflops > 0 ? o.peak_gflops : gpu_device >= 0 ? 0.0 : cpu::measure_sgemm_gflops(512, 0.2);
        MPI_CHECK(MPI_Allreduce(&mine, &peak_gflops, 1, MPI_DOUBLE, MPI_SUM, topo.world));
    }

    // Ranks launched with different options (per-node scripts, MPMD) would issue mismatched
    // collectives and hang: a checksum of every resolved option is compared before any other
    // collective, the datasets' sizes before the collectives that depend on them.
    void check_same_options() {
        std::string ini = o.to_ini();
        unsigned long h[2] = {(unsigned long)checksum64(ini.data(), ini.size()), 0};
        h[1] = ~h[0];
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, h, 2, MPI_UNSIGNED_LONG, MPI_MAX, topo.world));
        if (h[0] != ~h[1])
            throw UserError("ranks were started with different options (the resolved options differ between ranks); "
                            "give every rank the same command line and --config");
    }
    void check_same_data() {
        long mine[3] = {train->num_samples(), (long)train->floats_per_sample() + train->ints_per_sample(),
                        val->num_samples()};
        long lo[3], hi[3];
        MPI_CHECK(MPI_Allreduce(mine, lo, 3, MPI_LONG, MPI_MIN, topo.world));
        MPI_CHECK(MPI_Allreduce(mine, hi, 3, MPI_LONG, MPI_MAX, topo.world));
        if (std::memcmp(lo, hi, sizeof lo) != 0)
            throw UserError(strfmt("--data %s: ranks see different datasets (%ld..%ld training samples); every node "
                                   "must read the same shards",
                                   o.data.c_str(), lo[0], hi[0]));
    }

    // Phase 4, on rank 0: find and verify the checkpoint to resume from.
    CheckpointState ck;
    bool have_ck = false;
    void load_rank0() {
        if (rank != 0) return;
        prepare_checkpoint_dir(o.checkpoint_dir);
        if (o.resume == "none") {
            // A fresh run next to another run's checkpoints would rotate its own away (they sort
            // by step) and leave --resume auto to pick a stranger's: refuse unless told.
            auto old = list_checkpoints(o.checkpoint_dir);
            if (!old.empty() && !o.overwrite_checkpoints)
                throw UserError(strfmt("--checkpoint-dir %s already holds %zu checkpoints (newest %s); continue that run "
                                       "with --resume auto, delete them with --overwrite-checkpoints, or choose another "
                                       "--checkpoint-dir",
                                       o.checkpoint_dir.c_str(), old.size(), old[0].c_str()));
            for (auto& p : old) std::remove(p.c_str());
            return;
        }
        std::vector<std::string> warnings;
        if (o.resume == "auto") {
            have_ck = load_latest(o.checkpoint_dir, &ck, &resumed_from, &warnings);
            for (auto& w : warnings) std::fprintf(stderr, "dptrain: warning: %s\n", w.c_str());
        } else {
            ck = load_checkpoint(o.resume);
            resumed_from = o.resume;
            have_ck = true;
        }
        if (!have_ck) return;
        const std::string fix = "start a fresh run with another --checkpoint-dir, or --resume none";
        if (ck.model != model->signature())
            throw UserError(strfmt("%s: checkpoint is from another model (%s; this run: %s); %s", resumed_from.c_str(),
                                   ck.model.c_str(), model->signature().c_str(), fix.c_str()));
        if (ck.optimizer != o.optimizer)
            throw UserError(strfmt("%s: checkpoint has %s optimizer state, this run uses --optimizer %s; %s",
                                   resumed_from.c_str(), ck.optimizer.c_str(), o.optimizer.c_str(), fix.c_str()));
        if (ck.global_batch != global_batch)
            throw UserError(strfmt("%s: checkpoint was trained with global batch %ld, this run has %ld (--batch-size %d x "
                                   "%d ranks); keep the global batch: --batch-size %ld",
                                   resumed_from.c_str(), ck.global_batch, global_batch, o.batch_size, W,
                                   ck.global_batch % W == 0 ? ck.global_batch / W : 0L));
        if (ck.seed != o.seed)
            throw UserError(strfmt("%s: checkpoint was trained with --seed %llu, this run has --seed %lu; resume with "
                                   "the same seed so the sample order continues",
                                   resumed_from.c_str(), (unsigned long long)ck.seed, o.seed));
        // The sample order also depends on --shuffle-block (checkpoints from before the option: 1).
        long ck_block = 1;
        size_t at = ck.options.find("\nshuffle-block = ");
        if (at != std::string::npos) ck_block = std::atol(ck.options.c_str() + at + 17);
        if (ck_block != o.shuffle_block)
            throw UserError(strfmt("%s: checkpoint was trained with --shuffle-block %ld, this run has --shuffle-block %ld; "
                                   "resume with the same value so the sample order continues",
                                   resumed_from.c_str(), ck_block, o.shuffle_block));
        if (ck.params.size() != params.size() || ck.opt_m.size() != opt->m().size() ||
            ck.opt_v.size() != opt->v().size())
            throw UserError(strfmt("%s: checkpoint tensors do not match the model's sizes; %s", resumed_from.c_str(), fix.c_str()));
    }

    // Phase 6, on rank 0: the metrics file. A fresh run starts it anew; a resumed run keeps the
    // records up to its checkpoint's step and drops the later ones of the run that stopped (they
    // are trained again).
    void open_metrics() {
        if (rank != 0) return;
        if (start_step > 0) truncate_jsonl_after(o.metrics, start_step);
        std::string job = o.job_name;
        const char* slurm_job = std::getenv("SLURM_JOB_ID");
        if (job.empty() && slurm_job) job = slurm_job;
        if (job.empty()) {
            std::string d = o.run_dir;
            while (d.size() > 1 && d.back() == '/') d.pop_back();
            job = d.substr(d.rfind('/') == std::string::npos ? 0 : d.rfind('/') + 1);
        }
        jsonl.open(o.metrics, start_step > 0, o.metrics_format == "emf", o.metrics_namespace, job);
    }

    // Phase 5, collective: rank 0's checkpoint (if any) to every rank.
    void share_checkpoint() {
        long hdr[2] = {have_ck ? 1L : 0L, have_ck ? ck.step : 0L};
        comm.broadcast(hdr, sizeof hdr, 0);
        if (!hdr[0]) return;
        if (rank == 0) {
            params = ck.params;
            opt->m() = ck.opt_m;
            opt->v() = ck.opt_v;
        }
        comm.broadcast(params.data(), params.size() * sizeof(float), 0);
        comm.broadcast(opt->m().data(), opt->m().size() * sizeof(float), 0);
        comm.broadcast(opt->v().data(), opt->v().size() * sizeof(float), 0);
        start_step = hdr[1];
    }

    void banner() {
        // Every rank's host, on rank 0, to name stragglers.
        char mine[64] = {};
        std::snprintf(mine, sizeof mine, "%s", topo.host.c_str());
        std::vector<char> all(rank == 0 ? (size_t)W * sizeof mine : 0);
        MPI_CHECK(MPI_Gather(mine, sizeof mine, MPI_CHAR, all.data(), sizeof mine, MPI_CHAR, 0, topo.world));
        for (int r = 0; rank == 0 && r < W; ++r) hosts.emplace_back(&all[(size_t)r * sizeof mine]);
        tty = rank == 0 && (o.progress == "tty" || (o.progress == "auto" && output_is_terminal()));
        std::string t = topo.table();
        std::string backend =
            gpu_device >= 0 ? strfmt("backend cuda (each rank on its local rank's GPU; parameters, all-reduce and "
                                     "optimizer on the %s)",
                                     device_step() ? "GPU" : "host")
                            : strfmt("backend cpu, %d threads per rank", cpu::get_threads());
        print(strfmt("dptrain %s | %s | %s\n", DPTRAIN_VERSION, build_features().c_str(), backend.c_str()));
        if (!device_note.empty()) print(strfmt("--device %s: %s\n", o.device.c_str(), device_note.c_str()));
        print(t);
        print(strfmt("data %s: %s\n", o.data.c_str(), data_desc.c_str()));
        print(strfmt("input: --io %s, %d reader thread%s, %d batches ahead%s\n", o.io.c_str(), o.io_threads,
                     o.io_threads == 1 ? "" : "s", std::max(o.prefetch, o.io_threads),
                     o.io == "collective" ? " (collective reads run in the training thread: no prefetch)" : ""));
        if (!io_note.empty()) print(io_note + "\n");
        if (o.gpu_health != "off")
            print(gpu_health ? "GPU health: NVML, every rank's GPU at each step line (metrics: \"gpu\" records)\n"
                             : strfmt("GPU health: off (%s)\n", gpu_health_note.c_str()));
        print(strfmt("model %s: %zu parameters | %s matmuls%s | optimizer %s | global batch %ld (%d per rank) | %ld steps "
                     "per epoch\n",
                     model->signature().c_str(), model->num_params(), o.precision.c_str(),
                     o.attention == "flash" ? " | flash attention" : "", o.optimizer.c_str(),
                     global_batch, o.batch_size, sampler->steps_per_epoch()));
#ifdef DPTRAIN_HAVE_CUDA
        if (dev)
            print(strfmt("gradients: %s%s | parameters, gradients and %s state on the GPU\n", dev->describe().c_str(),
                         W == 1 ? "" : o.overlap == "off" ? " after backward" : " started during backward",
                         o.optimizer.c_str()));
        else
#endif
            print(strfmt("gradients: %s | %zu bucket%s of <= %g MiB, %s | %s on the wire\n", engine->describe().c_str(),
                         sync->num_buckets(), sync->num_buckets() == 1 ? "" : "s", o.bucket_mb,
                         overlap ? "overlapped with backward" : "after backward", o.grad_dtype.c_str()));
        if (!gpu_state_note.empty()) print(strfmt("--gpu-state auto: %s\n", gpu_state_note.c_str()));
        // The host path's overlap notes (NCCL on device buffers has no communication thread).
        if (!device_step() && o.overlap != "off" && !thread_level_ok)
            print("note: the MPI library lacks MPI_THREAD_SERIALIZED; gradients are reduced after backward\n");
        else if (!device_step() && o.overlap == "auto" && !overlap && topo.size > 1)
            print("note: --overlap auto: no spare core per rank for a communication thread; gradients are reduced "
                  "after backward (--overlap on forces it)\n");
        if (peak_gflops > 0)
            print(strfmt("MFU peak: %d rank%s x %.1f GFLOP/s %s; model %.3g GFLOP per %s (forward + backward)\n", W,
                         W == 1 ? "" : "s", peak_gflops / W,
                         o.peak_gflops > 0 ? "(--peak-gflops)" : "(sgemm measured at start; --peak-gflops sets it)",
                         model->flops_per_sample() / 1e9, lm ? "window" : "sample"));
        else
            print(strfmt("MFU: not shown on the GPU without --peak-gflops (the GPU's peak for this precision); model "
                         "%.3g GFLOP per %s\n",
                         model->flops_per_sample() / 1e9, lm ? "window" : "sample"));
        if (!resumed_from.empty() || start_step > 0)
            print(strfmt("resumed from %s at step %ld (epoch %ld)\n", resumed_from.c_str(), start_step,
                         sampler->epoch_of(start_step)));
    }

    ModelBatch model_batch(const float* x, const int* y, int n) const {
        ModelBatch in;
        in.B = n;
        if (lm) {
            in.tokens = y;
            in.stride = o.block_size + 1;
        } else {
            in.x = x;
            in.labels = y;
        }
        return in;
    }

    // Mean loss and accuracy per loss term (sample, or token of a window) over the validation
    // samples (the first --eval-max of them), split evenly over the ranks.
    EvalStats evaluate(long step) {
        long N = o.eval_max > 0 ? std::min(o.eval_max, val->num_samples()) : val->num_samples();
        long lo = N * rank / W, hi = N * (rank + 1) / W;
        std::vector<long> idx(eval_rows);
        std::vector<float> x((size_t)eval_rows * val->floats_per_sample());
        std::vector<int> y((size_t)eval_rows * val->ints_per_sample());
        double sums[3] = {0, 0, 0};  // loss, correct, samples
        for (long s = lo; s < hi; s += eval_rows) {
            int n = (int)std::min<long>(eval_rows, hi - s);
            for (int i = 0; i < n; ++i) idx[i] = s + i;
            val->read(idx.data(), n, 0, x.data(), y.data());
            long correct = 0;
            sums[0] += model->forward(params.data(), model_batch(x.data(), y.data(), n), &correct);
            sums[1] += correct;
            sums[2] += n;
        }
        comm.allreduce_sum(sums, 3);
        double terms = std::max(1.0, sums[2] * model->terms_per_sample());
        EvalStats e;
        e.step = step;
        e.samples = (long)sums[2];
        e.loss = sums[0] / terms;
        e.accuracy = sums[1] / terms;
        return e;
    }

    // Rank 0 writes the checkpoint of `step` (every replica is identical). With
    // --async-checkpoint the state is copied to host buffers and written by a background thread;
    // the next checkpoint (or the end of the run) waits for it. A failure ends the job: the
    // previous checkpoints are intact (save_checkpoint writes a temporary file, then renames).
    void checkpoint(long step, bool final_one) {
        phase(Phase::checkpoint, step, true);
#ifdef DPTRAIN_HAVE_CUDA
        if (dev && rank == 0) dev->download(params.data(), *opt);  // every rank holds the same values
#endif
        if (rank == 0) {
            try {
                CheckpointState& s = async_ckpt ? async_ckpt->next() : sync_ckpt;
                s.step = step;
                s.epoch = sampler->epoch_of(step);
                s.epoch_offset = (step % sampler->steps_per_epoch()) * global_batch;
                s.global_batch = global_batch;
                s.seed = o.seed;
                s.world_size = W;
                s.model = model->signature();
                s.optimizer = o.optimizer;
                s.options = o.to_ini();
                s.tokenizer = lm ? tok.kind : "";
                s.vocab = lm ? tok.table() : "";
                s.params.assign(params.begin(), params.end());
                s.opt_m.assign(opt->m().begin(), opt->m().end());
                s.opt_v.assign(opt->v().begin(), opt->v().end());
                bool corrupt = faults.has(0, step, Fault::Kind::corrupt_checkpoint);
                if (async_ckpt) {
                    async_ckpt->start(o.checkpoint_dir, o.keep_checkpoints);
                    last_checkpoint = checkpoint_path(o.checkpoint_dir, step);
                    if (final_one || corrupt) async_ckpt->wait();
                } else {
                    last_checkpoint = save_checkpoint(o.checkpoint_dir, s, o.keep_checkpoints);
                }
                if (corrupt) corrupt_checkpoint_file(last_checkpoint);
            } catch (const UserError& e) {
                fatal(e.what(), kExitUser);
            }
        }
    }

    // One step's fault injection on this rank (--inject-fault).
    void inject_before_step(long done) {
        if (faults.has(rank, done, Fault::Kind::kill)) raise(SIGKILL);
        if (faults.has(rank, done, Fault::Kind::hang)) {
            phase(Phase::forward, done);
            for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
        }
    }

    // The step's gradient path: the host's (GradSync's buffer and MPI, the Optimizer on params) or,
    // with a DeviceStep, the GPU's (the model's device buffers, NCCL, the update kernels). These
    // keep train_loop one loop for both.
#ifdef DPTRAIN_HAVE_CUDA
    DeviceStep* device_step() const { return dev.get(); }
    void poison_device_gradient() { dev->poison(); }
    void wait_device_backward() {
        if (dev) dev->wait_backward();
    }
    // Who hears of finished gradients during backward: GradSync, or the DeviceStep (which starts
    // NCCL buckets on the GPU) unless --overlap off, or nobody on a step whose device gradient is
    // poisoned after backward (its sums must all start after the poison).
    GradHook* gradient_hook(bool poison) {
        if (!dev) return sync.get();
        return poison || o.overlap == "off" ? nullptr : dev.get();
    }
#else
    GradHook* gradient_hook(bool) { return sync.get(); }
    DeviceStep* device_step() const { return nullptr; }
    void poison_device_gradient() {}
    void wait_device_backward() {}
#endif
    // Sums the gradients and the control floats over the ranks; returns the exposed seconds.
    double reduce_gradients(float* ctl) {
#ifdef DPTRAIN_HAVE_CUDA
        if (dev) {
            double t0 = now_seconds();
            dev->allreduce();
            MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ctl, (int)kControl, MPI_FLOAT, MPI_SUM, topo.world));
            return now_seconds() - t0;
        }
#endif
        (void)ctl;  // the host path sums them with the gradients
        return sync->finish();
    }
    double gradient_norm(const float* grads, size_t P) {
#ifdef DPTRAIN_HAVE_CUDA
        if (dev) return dev->norm();
#endif
        return global_norm(grads, P);
    }
    // Clips (when --grad-clip is exceeded) and takes the optimizer step t.
    void update(float* grads, size_t P, double norm, double lr, long t) {
#ifdef DPTRAIN_HAVE_CUDA
        if (dev) return dev->update(norm, o.grad_clip, lr, t);
#endif
        (void)norm;
        clip_grad_norm(grads, P, o.grad_clip);
        opt->step(params.data(), grads, lr, t);
    }
    double comm_seconds() {
#ifdef DPTRAIN_HAVE_CUDA
        if (dev) return dev->take_comm_seconds();
#endif
        return sync->take_comm_seconds();
    }

    int train_loop() {
        long end = o.steps;
        if (o.stop_after > 0) end = std::min(end, start_step + o.stop_after);
        if (start_step >= end) {
            print(strfmt("nothing to train: the checkpoint is at step %ld and --steps is %ld\n", start_step, o.steps));
            return kExitOk;
        }
        long io_fail = -1;  // the 0-based step whose read fails, when injected on this rank
        for (long s = start_step; s < end; ++s)
            if (faults.has(rank, s + 1, Fault::Kind::io_error)) io_fail = s;
        std::vector<Dataset*> readers{train.get()};
        for (auto& d : extra_readers) readers.push_back(d.get());
        Prefetcher pf(readers, *sampler, rank, W, o.batch_size, o.prefetch, start_step, end, io_fail,
                      o.io == "collective", faults.slow_read_from(rank));
        const size_t P = model->num_params();
#ifdef DPTRAIN_HAVE_CUDA
        // On a GPU: the batches (and, with host-resident state, the parameters and gradients) are
        // copied to and from the device every step, so they are page-locked (DMA at full speed);
        // released before the ring is freed.
        std::vector<std::unique_ptr<cuda::PinnedHost>> pinned;
        if (gpu_device >= 0) {
            std::vector<std::pair<void*, size_t>> regions = pf.buffers();
            if (!dev) {
                regions.emplace_back(params.data(), params.size() * sizeof(float));
                regions.emplace_back(sync->grads(), P * sizeof(float));
            }
            for (auto& [p, n] : regions) {
                pinned.push_back(std::make_unique<cuda::PinnedHost>(p, n));
                if (!pinned.back()->ok() && rank == 0 && pinned.size() == 1)
                    print(strfmt("note: %s\n", pinned.back()->why().c_str()));
            }
        }
        if (dev) dev->upload(params.data(), *opt);  // the starting point, fresh or resumed, moves to the GPU
#endif
        // However the loop ends, a batch being staged to the GPU has arrived before the ring's
        // memory is unpinned and freed (declared after both, so destroyed first).
        struct Unstage {
            Model& m;
            ~Unstage() { m.unstage(); }
        } unstage{*model};
        if (!o.trace.empty()) {
            // About 8 events a step (phases, evaluation, checkpoint) plus the buckets; capped.
            size_t per_step = 8 + sync->num_buckets();
            tracer.enable(std::min<size_t>(4u << 20, (size_t)(end - start_step) * per_step + 64));
            sync->set_tracer(&tracer);
        }
        times.reserve(std::min(o.log_every, end - start_step));
        if (o.profile_ops > 0 && (o.profile_ops <= start_step || o.profile_ops > end))
            print(strfmt("note: --profile-ops %ld: that step is not in this run (steps %ld..%ld); no op times\n",
                         o.profile_ops, start_step + 1, end));

        double t_run = now_seconds(), t_int = t_run;
        // Interval sums since the last step line. Evaluation and checkpoint time (int_other) is
        // left out of ms/step and samples/s: they measure training alone.
        // int_loss sums this rank's share of each step's global mean loss (its loss sum / the
        // global batch); the ranks' shares add up to the global mean at the step line.
        double int_loss = 0, int_exposed = 0, int_other = 0, last_norm = 0, last_lr = 0, final_loss = 0;
        long int_steps = 0, int_samples = 0, skipped = 0;
        bool evaluated = false;
        EvalStats last_eval;
        int code = kExitOk;
        long done = start_step;
        last_logged = start_step;
        for (long step = start_step; step < end; ++step) {
            done = step + 1;
            phase(Phase::data, done, true);
            inject_before_step(done);
            const Batch& b = pf.next();
            // The data phase is the wait for the batch alone; clearing the gradients counts as compute.
            phase(Phase::forward, done);
            float* grads = sync->grads();
            if (!device_step()) sync->begin_step(done);  // on the GPU, backward writes the gradients whole
            // Control floats, summed with the gradients: [0] > 0 when any rank was signalled,
            // [1] non-finite when any rank's loss was.
            float* ctl = sync->control();
            ctl[0] = preemption_requested() ? 1.0f : 0.0f;
            const ModelBatch in = model_batch(b.x.data(), b.y.data(), b.n);
            const double terms = (double)b.global_n * model->terms_per_sample();
            const bool profiled = done == o.profile_ops && rank == 0;  // rank 0 prints them
            if (profiled) model->set_op_times(&op_times);
            double loss_sum = model->forward(params.data(), in, nullptr);
            if (faults.slow(rank, done)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
            ctl[1] = std::isfinite(loss_sum) ? 0.0f : NAN;
            // --inject-fault nan poisons the summed gradient: on the host before backward adds to the
            // buffer (its buckets may leave during backward), on the GPU after backward writes it.
            const bool poison = faults.has(rank, done, Fault::Kind::nan);
            if (poison && !device_step()) grads[0] = NAN;
            // The next batch, when the reader has it: a GPU model copies it on its input stream
            // while this step's backward runs (the CPU models ignore it).
            if (const Batch* nb = pf.peek()) model->stage(model_batch(nb->x.data(), nb->y.data(), nb->n));
            phase(Phase::backward, done);
            model->backward(grads, params.data(), in, (float)(1.0 / terms), gradient_hook(poison));
            if (poison && device_step()) poison_device_gradient();
            if (profiled) {
                model->set_op_times(nullptr);  // waits for the GPU's timed ops
                print_op_times(done);
            }
            wait_device_backward();
            int global_n = b.global_n;
            pf.release();
            phase(Phase::allreduce, done);
            int_exposed += reduce_gradients(ctl);

            // Every rank sees the same summed gradient and control floats, so every decision
            // below is the same on all ranks without another collective.
            phase(Phase::optimizer, done);
            bool stop_requested = ctl[0] > 0.0f;
            last_norm = gradient_norm(grads, P);
            bool finite = std::isfinite(last_norm) && std::isfinite(ctl[1]);
            last_lr = sched.at(step);
            if (finite) {
                update(grads, P, last_norm, last_lr, step + 1);
                int_loss += loss_sum / terms;
                ++int_steps;
            } else if (o.on_nonfinite == "stop") {
                if (rank == 0) {
                    std::fprintf(stderr, "dptrain: error: step %ld: non-finite %s (gradient norm %g); stopping before the "
                                         "parameters are touched. Resume from the last checkpoint with a lower --lr, or "
                                         "pass --on-nonfinite skip to skip such steps\n",
                                 done, std::isfinite(ctl[1]) ? "gradient" : "loss", last_norm);
                    std::fflush(stderr);
                }
                code = kExitNonfinite;
                break;
            } else {
                ++skipped;
                print(strfmt("warning: step %ld: non-finite %s; step skipped, parameters unchanged (%ld skipped so far)\n",
                             done, std::isfinite(ctl[1]) ? "gradient" : "loss", skipped));
            }
            int_samples += global_n;
            double t_end = end_step_times();

            if (done % o.log_every == 0 || done == end || stop_requested) {
                double t = t_end, dt = t - t_int - int_other;
                double shares[3] = {pf.take_wait_seconds() / dt, int_exposed / dt, comm_seconds() / dt};
                MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, shares, 3, MPI_DOUBLE, MPI_MAX, topo.world));
                MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &int_loss, 1, MPI_DOUBLE, MPI_SUM, topo.world));
                StepBreakdown bd = gather_breakdown(times.take_interval(), topo.world);
                StepStats st;
                st.step = done;
                st.total = o.steps;
                st.loss = int_steps ? int_loss / int_steps : NAN;
                final_loss = st.loss;
                st.grad_norm = last_norm;
                st.lr = last_lr;
                long n_steps = done - last_logged;
                st.ms_per_step = 1000.0 * dt / std::max(1L, n_steps);
                st.samples_per_s = int_samples / dt;
                st.tokens_per_sample = lm ? o.block_size : 0;
                st.mfu = peak_gflops > 0 ? st.samples_per_s * model->flops_per_sample() / (peak_gflops * 1e9) : -1;
                st.data_wait_pct = 100.0 * shares[0];
                st.comm_pct = 100.0 * shares[1];
                st.comm_total_pct = 100.0 * shares[2];
                st.eta_s = (t - t_run) / (double)(done - start_step) * (double)(end - done);
                print(format_step_line(st) + "\n");
                std::vector<double> gpus = gather_gpu_health();
                if (rank == 0) {
                    jsonl.write(step_record(st).raw("phases", breakdown_json(bd)));
                    write_gpu_records(gpus, done, st);
                    if (jsonl.emf()) write_rank_records(bd, done);
                    if (done - start_step > o.log_every) warn_bottleneck(st, bd);
                }
                int_loss = int_exposed = int_other = 0;
                int_steps = int_samples = 0;
                t_int = now_seconds();
                last_logged = done;
            } else if (tty && t_end - last_status >= 0.25) {
                // Between step lines, on a terminal: one line updated in place.
                last_status = t_end;
                double per_step = (t_end - t_int - int_other) / (double)(done - last_logged);
                std::printf("\r\x1b[Kstep %ld/%ld %.0f%% | %.1f ms/step | ETA %s", done, o.steps, std::floor(100.0 * done / o.steps),
                            1e3 * per_step, human_duration((t_end - t_run) / (double)(done - start_step) * (double)(end - done)).c_str());
                std::fflush(stdout);
                status_shown = true;
            }
            double t_other = now_seconds();
            if ((o.eval_every > 0 && done % o.eval_every == 0) || done == o.steps) {
                phase(Phase::eval, done, true);
                last_eval = evaluate(done);
                evaluated = true;
                print(format_eval_line(last_eval) + "\n");
                if (rank == 0) jsonl.write(eval_record(last_eval));
            }
            bool last = done == end || stop_requested;
            if ((o.checkpoint_every > 0 && done % o.checkpoint_every == 0) || last) checkpoint(done, last);
            int_other += now_seconds() - t_other;
            if (stop_requested) {
                code = kExitPreempted;
                break;
            }
        }
        phase(Phase::done, done, true);
        // The whole run's breakdown; every rank took the same path here, so all of them gather.
        StepBreakdown whole = gather_breakdown(times.run(), topo.world);
        if (whole.steps > 0) {
            print(format_breakdown(whole, hosts));
            if (rank == 0)
                jsonl.write(Record("summary").integer("step", done).integer("steps", whole.steps)
                                .metric("seconds", now_seconds() - t_run, "Seconds").raw("phases", breakdown_json(whole)));
        }
        if (tracer.on()) {
            try {
                tracer.write(Tracer::rank_path(o.trace, rank), rank, topo.host);
            } catch (const UserError& e) {
                fatal(e.what(), kExitUser);
            }
        }
        if (rank == 0 && async_ckpt) {
            try {
                async_ckpt->wait();
            } catch (const UserError& e) {
                fatal(e.what(), kExitUser);
            }
        }
        double secs = now_seconds() - t_run;
        if (code == kExitNonfinite) return code;
        if (code == kExitPreempted) {
            print(strfmt("preempted: a rank received a stop signal (SIGTERM/SIGUSR1); stopped after step %ld with a "
                         "checkpoint\ncheckpoint: %s\nexit %d: requeue the job with --resume auto to continue\n",
                         done, last_checkpoint.c_str(), kExitPreempted));
            return code;
        }
        std::string tail = evaluated ? strfmt(" | val loss %.4f | val accuracy %.2f%%", last_eval.loss, 100.0 * last_eval.accuracy) : "";
        if (skipped) tail += strfmt(" | %ld non-finite steps skipped", skipped);
        if (model->staged_batches() >= 0)
            tail += strfmt(" | %ld of %ld batches copied to the GPU during the step before", model->staged_batches(),
                           end - start_step);
        print(strfmt("done: steps %ld..%ld in %.1f s | train loss %.4f (last interval)%s\n", start_step + 1, end, secs, final_loss,
                     tail.c_str()));
        if (rank == 0) print(strfmt("checkpoint: %s\nmetrics: %s\n", last_checkpoint.c_str(), o.metrics.c_str()));
        return kExitOk;
    }
    // --profile-ops: rank 0's forward and backward of one step, op kind by op kind.
    OpTimes op_times;
    void print_op_times(long step) {
        print(strfmt("ops of step %ld on rank 0, forward + backward%s:\n%s", step,
                     gpu_device >= 0 ? " (GPU time between CUDA events around each op on the model's stream)"
                                     : " (wall clock around each op)",
                     op_times.table().c_str()));
    }
    // Once per run, from the second step line on: a warning naming the bottleneck when waiting
    // for data or for the network takes a large share of the step.
    bool warned_data = false, warned_comm = false;
    void warn_bottleneck(const StepStats& st, const StepBreakdown& bd) {
        const PhaseAcross& d = bd.phase[0];
        if (!warned_data && st.data_wait_pct > 5.0) {
            warned_data = true;
            print(strfmt("warning: waiting for data takes %.1f%% of the step (slowest rank %d on %s: %.3f ms per step): "
                         "the input pipeline is the bottleneck. Raise --io-threads (and --prefetch); --io memory reads "
                         "a split that fits in memory once per node; shards on a slow or busy filesystem can be copied "
                         "to node-local storage with --stage-dir\n",
                         st.data_wait_pct, d.slowest_rank, hosts[d.slowest_rank].c_str(), d.max_ms));
        }
        const PhaseAcross& c = bd.phase[3];
        if (!warned_comm && st.comm_pct > 25.0 && W > 1) {
            warned_comm = true;
            print(strfmt("warning: waiting for the gradient all-reduce takes %.1f%% of the step (longest on rank %d on "
                         "%s): either the network is the bottleneck (try --grad-dtype bf16, a larger --batch-size, or "
                         "--overlap on where a core is free for it) or the ranks wait for a slower one (the step "
                         "breakdown names the slowest rank of each phase)\n",
                         st.comm_pct, c.slowest_rank, hosts[c.slowest_rank].c_str()));
        }
    }
    // With more than one host: node heartbeats beside the checkpoints, so that a rank that times
    // out waiting for its peers can name the node that went silent (watchdog, reliability.h).
    void start_heartbeats() {
        char mine[64] = {};
        std::snprintf(mine, sizeof mine, "%s", topo.host.c_str());
        std::vector<char> all((size_t)W * sizeof mine);
        MPI_CHECK(MPI_Allgather(mine, sizeof mine, MPI_CHAR, all.data(), sizeof mine, MPI_CHAR, topo.world));
        std::vector<std::string> nodes;
        for (int r = 0; r < W; ++r) {
            std::string h(&all[(size_t)r * sizeof mine]);
            if (std::find(nodes.begin(), nodes.end(), h) == nodes.end()) nodes.push_back(h);
        }
        if (nodes.size() > 1) watchdog->heartbeats(o.run_dir + "/heartbeat", topo.host, topo.local_rank == 0, nodes);
    }
    // Every rank's GPU reading at a step line, gathered on rank 0: kGpuVals values per rank,
    // util < 0 where a rank has no GPU. Empty when GPU health is off (every rank agrees).
    static constexpr int kGpuVals = 5;  // util %, memory used MiB, memory total MiB, temperature C, power W
    std::vector<double> gather_gpu_health() {
        if (!gpu_health) return {};
        double mine[kGpuVals] = {-1, 0, 0, 0, 0};
        GpuSample s;
        if (gpu_index >= 0 && nvml.sample(gpu_index, &s, nullptr)) {
            mine[0] = s.util_pct, mine[1] = s.mem_used_mib, mine[2] = s.mem_total_mib, mine[3] = s.temp_c;
            mine[4] = s.power_w;
        }
        std::vector<double> all(rank == 0 ? (size_t)W * kGpuVals : 0);
        MPI_CHECK(MPI_Gather(mine, kGpuVals, MPI_DOUBLE, all.data(), kGpuVals, MPI_DOUBLE, 0, topo.world));
        return all;
    }
    // Rank 0: a "gpu" record per rank, and once per run a warning when a GPU idles (under 50%)
    // while its job waits for data or for the network.
    bool warned_gpu_data = false, warned_gpu_comm = false;
    void write_gpu_records(const std::vector<double>& all, long step, const StepStats& st) {
        if (all.empty()) return;
        int idlest = -1;
        for (int r = 0; r < W; ++r) {
            const double* v = &all[(size_t)r * kGpuVals];
            if (v[0] < 0) continue;
            if (idlest < 0 || v[0] < all[(size_t)idlest * kGpuVals]) idlest = r;
            Record rec("gpu");
            rec.integer("step", step);
            rec.metric("gpu_util_pct", v[0], "Percent").metric("gpu_mem_used_mib", v[1], "Megabytes");
            rec.value("gpu_mem_total_mib", v[2]).metric("gpu_temp_c", v[3]).metric("gpu_power_w", v[4]);
            jsonl.write_rank(rec.text("host", hosts[r]).integer("rank_id", r), r, hosts[r]);
        }
        // The warnings need the GPU to be the one training: on the CPU backend it idles by design.
        if (idlest < 0 || gpu_device < 0 || step - start_step <= o.log_every) return;
        double util = all[(size_t)idlest * kGpuVals];
        if (util >= 50.0) return;
        if (!warned_gpu_data && st.data_wait_pct > 5.0) {
            warned_gpu_data = true;
            print(strfmt("warning: the GPU of rank %d on %s is %.0f%% busy while waiting for data takes %.1f%% of the step: "
                         "the job is input-bound (see the data-wait warning for what to change)\n",
                         idlest, hosts[idlest].c_str(), util, st.data_wait_pct));
        }
        if (!warned_gpu_comm && st.comm_pct > 25.0) {
            warned_gpu_comm = true;
            print(strfmt("warning: the GPU of rank %d on %s is %.0f%% busy while waiting for the all-reduce takes %.1f%% "
                         "of the step: the job is network-bound (or waits for a straggler)\n",
                         idlest, hosts[idlest].c_str(), util, st.comm_pct));
        }
    }
    // EMF: each rank's mean phase times over the interval, with rank and node as dimensions.
    void write_rank_records(const StepBreakdown& bd, long step) {
        for (int r = 0; r < W; ++r) {
            Record rec("rank");
            rec.integer("step", step);
            for (int p = 0; p < kStepPhases; ++p) {
                static const char* names[kStepPhases] = {"data_ms", "forward_ms", "backward_ms", "allreduce_ms", "optimizer_ms"};
                rec.metric(names[p], bd.rank_mean_ms[(size_t)r * kStepPhases + p], "Milliseconds");
            }
            jsonl.write_rank(rec, r, hosts[r]);
        }
    }
    long last_logged = 0;
    std::vector<std::string> hosts;  // rank 0: every rank's host
    bool tty = false;                // rank 0: progress updates in place
    mutable bool status_shown = false;
    double last_status = 0;
    PhaseTimes times;
    int part = -1;        // the timed part of the step in progress (index from Phase::data), -1: none
    double part_t0 = 0;
    // Closes the step's last timed part and commits the step's times; returns the time.
    double end_step_times() {
        double t = now_seconds();
        if (part >= 0) times.add(part, t - part_t0);
        part = -1;
        times.end_step();
        return t;
    }
    CheckpointState sync_ckpt;  // reused by every synchronous checkpoint
    std::unique_ptr<AsyncCheckpointer> async_ckpt;
    std::unique_ptr<Watchdog> watchdog;
    Tracer tracer;
    // The watchdog's clock and the trace follow the same phase marks. restart: a new step (or a
    // long phase with its own timeout).
    void phase(Phase p, long step, bool restart = false) {
        if (restart) watchdog->begin(step, p);
        else watchdog->phase(p);
        double t = now_seconds();
        if (part >= 0) times.add(part, t - part_t0);
        int i = (int)p - (int)Phase::data;
        part = i >= 0 && i < kStepPhases ? i : -1;
        part_t0 = t;
        if (p == Phase::done) tracer.close();
        else tracer.mark(phase_name(p), step);
    }
    FaultPlan faults;
};

} // namespace

// --stage-dir: local rank 0 of every node copies --data to node-local storage; the node's other
// ranks wait in the collective. Every rank then reads the copy. Rank 0 reports its node's copy
// and the slowest node's time.
static bool stage_data(Options& o, const Topology& topo) {
    std::string src = o.data;
    while (src.size() > 1 && src.back() == '/') src.pop_back();
    // The copy is named after the dataset directory's own name ("." or ".." resolved first).
    char* real = realpath(src.c_str(), nullptr);
    std::string name = real ? real : src;
    std::free(real);
    name = name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
    if (name.empty() || name == "." || name == "..") name = "data";
    std::string dest = o.stage_dir + "/" + name;
    StageResult r;
    bool ok = all_ok(topo.world, [&] {
        if (topo.local_rank == 0)
            r = stage_directory(src, dest, 8, true, [&](const std::string& s) {
                if (topo.rank == 0) std::printf("stage: %s\n", s.c_str());
            });
    });
    if (!ok) return false;
    // Which nodes copied and which reused a copy, and the slowest copy's report.
    long counts[2] = {topo.local_rank == 0 && !r.reused ? 1L : 0L, topo.local_rank == 0 && r.reused ? 1L : 0L};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_LONG, MPI_SUM, topo.world));
    struct {
        double seconds;
        int rank;
    } slowest{topo.local_rank == 0 && !r.reused ? r.seconds : -1.0, topo.rank};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &slowest, 1, MPI_DOUBLE_INT, MPI_MAXLOC, topo.world));
    char report[512] = {};
    if (topo.rank == slowest.rank)
        std::snprintf(report, sizeof report, "rank %d on %s: %s", topo.rank, topo.host.c_str(), r.summary().c_str());
    MPI_CHECK(MPI_Bcast(report, sizeof report, MPI_CHAR, slowest.rank, topo.world));
    if (topo.rank == 0) {
        std::printf("stage: %d node%s hold%s a verified copy in %s (copied on %ld, reused on %ld)%s%s\n", topo.num_nodes,
                    topo.num_nodes == 1 ? "" : "s", topo.num_nodes == 1 ? "s" : "", dest.c_str(), counts[0], counts[1],
                    counts[0] > 0 ? "; slowest copy: " : "", counts[0] > 0 ? report : "");
        std::fflush(stdout);
    }
    o.data = dest;
    return true;
}

int run_training(const Options& opts_in, const Topology& topo) {
    Options opts = opts_in;
    if (!opts.stage_dir.empty() && !stage_data(opts, topo)) return 2;
    Run run(opts, topo);
    if (!all_ok(topo.world, [&] { run.check_same_options(); })) return 2;
    if (!all_ok(topo.world, [&] { run.setup_local(); })) return 2;
    if (!all_ok(topo.world, [&] { run.check_same_data(); })) return 2;
    if (!all_ok(topo.world, [&] { run.setup_comm(); })) return 2;
    if (!all_ok(topo.world, [&] { run.load_memory(); })) return 2;
    run.measure_peak();
    if (!all_ok(topo.world, [&] { run.load_rank0(); })) return 2;
    run.share_checkpoint();
    if (!all_ok(topo.world, [&] { run.open_metrics(); })) return 2;
    run.banner();
    install_preemption_handlers();
    run.watchdog = std::make_unique<Watchdog>(opts.step_timeout);
    run.start_heartbeats();
    int code = kExitOk;
    try {
        code = run.train_loop();
    } catch (const UserError& e) {
        fatal(e.what(), kExitUser);
    } catch (const std::exception& e) {
        fatal(strfmt("internal error: %s", e.what()), kExitFatal);
    }
    run.watchdog->stop();
    return code;
}

} // namespace dptrain
