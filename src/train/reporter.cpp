// The Reporter: rank 0's lines and records, and the GPU health readings behind them.
// Not for: deciding anything about training.
#include "dptrain/train/reporter.h"

#include "dptrain/backend/device.h"
#include "dptrain/backend/gpu_sizes.h"
#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/core/trace.h"
#include "dptrain/core/version.h"
#include "dptrain/data/prefetcher.h"
#include "dptrain/io/reliability.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

namespace dptrain {

namespace {

double mib(size_t bytes) { return bytes / 1048576.0; }

// Activation bytes per rank, and what the other --recompute choice would keep, by the running
// model's sizes (CUDA keeps bf16 values at 2 bytes).
std::string activation_line(size_t bytes, const Options& o, const std::string& signature, bool on_gpu) {
    GptConfig cfg;
    if (!parse_gpt_signature(signature, &cfg)) return strfmt("activations: %.1f MiB per rank", mib(bytes));
    cfg.flash_attention = o.attention == AttentionKind::flash;
    const char* where = on_gpu ? " on the GPU" : "";
    auto other = [&](Recompute r) {
        cfg.recompute = r;
        return mib(on_gpu && cfg.arch == DecoderArch::gpt2 ? gpu_gpt_activation_bytes(cfg, o.batch_size, o.precision)
                                                           : lm_activation_bytes(cfg, o.batch_size));
    };
    if (o.recompute == Recompute::none)
        return strfmt("activations: %.1f MiB per rank%s (--recompute block would keep %.1f MiB)", mib(bytes), where,
                      other(Recompute::block));
    return strfmt("activations: %.1f MiB per rank%s with --recompute %s (%.1f MiB without recomputation)", mib(bytes),
                  where, name_of(o.recompute), other(Recompute::none));
}

constexpr int kGpuVals = 5;  // per rank: util %, memory used MiB, memory total MiB, temperature C, power W

// Under mpirun a rank's stdout is a pseudo-terminal forwarded wherever the launcher's goes, so the
// parent's stdout tells whether output reaches a terminal.
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

// The metrics record's values, and each phase's share of the step (mean over ranks).
std::vector<std::pair<std::string, float>> tensorboard_scalars(const StepStats& st, const StepBreakdown& bd) {
    std::vector<std::pair<std::string, float>> v = {{"train/loss", (float)st.loss},
                                                    {"train/lr", (float)st.lr},
                                                    {"train/grad_norm", (float)st.grad_norm},
                                                    {"train/world_size", (float)st.world_size}};
    if (st.tokens_per_sample > 0) v.emplace_back("train/tokens_per_s", (float)(st.samples_per_s * st.tokens_per_sample));
    else v.emplace_back("train/samples_per_s", (float)st.samples_per_s);
    if (st.mfu >= 0) v.emplace_back("train/mfu_pct", (float)(100.0 * st.mfu));
    v.emplace_back("time/ms_per_step", (float)st.ms_per_step);
    v.emplace_back("time/data_wait_pct", (float)st.data_wait_pct);
    v.emplace_back("time/comm_exposed_pct", (float)st.comm_pct);
    double step_ms = 0;
    for (int p = 0; p < kStepPhases; ++p) step_ms += bd.phase[p].mean_ms;
    for (int p = 0; p < kStepPhases && step_ms > 0; ++p)
        v.emplace_back(std::string("phase/") + kStepPhaseNames[p] + "_pct", (float)(100.0 * bd.phase[p].mean_ms / step_ms));
    return v;
}

} // namespace

Reporter::Reporter(const Options& o, const Topology& topo)
    : o_(o), topo_(topo), world_(topo.world), rank_(topo.rank), W_(topo.size) {}

void Reporter::print(const std::string& s) {
    if (rank_ != 0) return;
    if (status_shown_) std::fputs("\r\x1b[K", stdout);  // clear the progress line
    status_shown_ = false;
    std::fputs(s.c_str(), stdout);
    std::fflush(stdout);
}

void Reporter::open_gpu_health() {
    if (o_.gpu_health == GpuHealthMode::off) return;
    std::string why;
    if (nvml_.open(&why)) {
        gpu_index_ = nvml_.index_for_cuda_device(topo_.host_rank);  // the GPU the device factory binds
        if (gpu_index_ < 0) why = strfmt("NVML sees %d GPUs, none for local rank %d", nvml_.count(), topo_.host_rank);
    }
    if (gpu_index_ < 0 && o_.gpu_health == GpuHealthMode::on) throw UserError(strfmt("--gpu-health on: %s; use --gpu-health auto (reads it where NVML sees the GPU) or off", why.c_str()));
    if (gpu_index_ < 0) gpu_health_note_ = why;
}

void Reporter::agree_gpu_health() {
    int any = gpu_index_ >= 0;
    world_.allreduce(&any, 1, ReduceOp::max);
    gpu_health_ = any != 0;
}

void Reporter::open_metrics(long start_step) {
    // An unwritable trace path stops the run before it trains, not at its end. The probe neither
    // empties an earlier run's trace nor leaves an empty file behind.
    if (!o_.trace.empty()) {
        const std::string path = Tracer::rank_path(o_.trace, topo_.rank, start_step);
        const size_t slash = path.rfind('/');
        if (slash != std::string::npos && slash > 0) make_directories(path.substr(0, slash), "--trace");
        const bool there = ::access(path.c_str(), F_OK) == 0;
        FILE* f = std::fopen(path.c_str(), "a");
        if (!f) throw UserError(strfmt("--trace %s: cannot write %s: %s", o_.trace.c_str(), path.c_str(), std::strerror(errno)));
        std::fclose(f);
        if (!there) std::remove(path.c_str());
    }
    if (rank_ != 0) return;
    std::remove((o_.run_dir + "/stopped-by").c_str());  // an earlier run's
    // A resumed run drops records past its checkpoint (a discarded timeline). EMF is append-only:
    // the CloudWatch agent re-ships a rewritten file from the start; dptrain-report keeps the newer
    // record of a repeated step.
    if (start_step > 0 && o_.metrics_format != MetricsFormat::emf) truncate_jsonl_after(o_.metrics, start_step);
    std::string job = o_.job_name;
    const char* slurm_job = std::getenv("SLURM_JOB_ID");
    if (job.empty() && slurm_job) job = slurm_job;
    if (job.empty()) {
        std::string d = o_.run_dir;
        while (d.size() > 1 && d.back() == '/') d.pop_back();
        job = d.substr(d.rfind('/') == std::string::npos ? 0 : d.rfind('/') + 1);
    }
    jsonl_.open(o_.metrics, start_step > 0, o_.metrics_format == MetricsFormat::emf, o_.metrics_namespace, job);
    jsonl_.set_required(o_.metrics_required);
    if (o_.tensorboard) tb_.open(o_.run_dir, topo_.host, start_step);
}

void Reporter::banner(const RunFacts& f) {
    facts_ = f;
    hosts_ = world_.gather_text(topo_.host, 0);
    tty_ = rank_ == 0 && (o_.progress == ProgressMode::tty ||
                          (o_.progress == ProgressMode::automatic && output_is_terminal()));
    const std::string table = topo_.table();  // collective
    banner_machine(f, table);
    banner_model(f);
    banner_start(f);
}

void Reporter::banner_machine(const RunFacts& f, const std::string& table) {
    print(strfmt("dptrain %s | %s | %s\n", DPTRAIN_VERSION, build_features().c_str(), f.backend.c_str()));
    // One calm line when the machine has no GPU, not a failure per part.
    if (!f.device_note.empty()) print(strfmt("--device %s: %s\n", name_of(o_.device), f.device_note.c_str()));
    else if (!f.no_gpu.empty()) print(strfmt("no GPU here: %s; the CPU backend trains\n", f.no_gpu.c_str()));
    print(table);
    print(strfmt("data %s: %s\n", o_.data.c_str(), f.data.c_str()));
    const int slots = Prefetcher::slots_for(o_.prefetch, o_.grad_accum, o_.io_threads);
    print(strfmt("input: --io %s, %d reader thread%s, %d %sbatches ahead%s\n", name_of(o_.io), o_.io_threads,
                 o_.io_threads == 1 ? "" : "s", slots, o_.grad_accum > 1 ? "micro-" : "",
                 o_.io == IoMode::collective ? " (collective reads run in the training thread: no prefetch)" : ""));
    if (!f.io_note.empty()) print(f.io_note + "\n");
    // GPU health off is news only beside a GPU.
    if (gpu_health_)
        print("GPU health: NVML, every rank's GPU at each step line (metrics: \"gpu\" records)\n");
    else if (o_.gpu_health != GpuHealthMode::off && f.no_gpu.empty() && f.device_note.empty())
        print(strfmt("GPU health: off (%s)\n", gpu_health_note_.c_str()));
}

void Reporter::banner_model(const RunFacts& f) {
    const std::string per_rank = o_.grad_accum > 1 ? strfmt("%d per rank x %d micro-batches", o_.batch_size, o_.grad_accum)
                                                   : strfmt("%d per rank", o_.batch_size);
    print(strfmt("model %s: %zu parameters | %s matmuls%s | optimizer %s | global batch %ld (%s) | %ld steps per "
                 "epoch\n",
                 f.model.c_str(), f.params, name_of(o_.precision),
                 o_.attention == AttentionKind::flash ? " | flash attention" : "", name_of(o_.optimizer),
                 f.global_batch, per_rank.c_str(), f.steps_per_epoch));
    if (rank_ == 0) {
        const std::string unused = ignored_options(o_);
        if (!unused.empty()) print("note: " + unused + "\n");
    }
    if (f.activation_bytes > 0 && language_model(o_.model))
        print(activation_line(f.activation_bytes, o_, f.model, f.on_gpu) + "\n");
    if (!f.memory_plan.empty()) print(f.memory_plan);
    print(strfmt("gradients: %s\n", f.gradients.c_str()));
    for (const std::string& n : f.gradient_notes) print(n + "\n");
}

void Reporter::banner_start(const RunFacts& f) {
    if (f.peak_gflops > 0)
        print(strfmt("MFU peak: %d rank%s x %.1f GFLOP/s %s; model %.3g GFLOP per %s (forward + backward)\n", W_,
                     W_ == 1 ? "" : "s", f.peak_gflops / W_,
                     o_.peak_gflops > 0 ? "(--peak-gflops)" : "(sgemm measured at start; --peak-gflops sets it)",
                     f.flops_per_sample / 1e9, f.unit));
    else
        print(strfmt("MFU: not shown on the GPU without --peak-gflops (the GPU's peak for this precision); model "
                     "%.3g GFLOP per %s\n",
                     f.flops_per_sample / 1e9, f.unit));
    if (!f.initialized_from.empty()) print(strfmt("weights from %s\n", f.initialized_from.c_str()));
    if (!f.resumed_from.empty() || f.start_step > 0)
        print(strfmt("resumed from %s at step %ld (epoch %ld)\n", f.resumed_from.c_str(), f.start_step, f.start_epoch));
}

void Reporter::step_line(const StepStats& st, const StepBreakdown& bd) {
    print(format_step_line(st) + "\n");
    if (st.mfu > 1.0 && !warned_mfu_) {
        warned_mfu_ = true;
        print(o_.peak_gflops > 0
                  ? strfmt("warning: MFU %.0f%% is above 100%%: --peak-gflops %g is below what each rank reaches\n",
                           100.0 * st.mfu, o_.peak_gflops)
                  : strfmt("warning: MFU %.0f%% is above 100%%: the sgemm peak measured at start-up (%.1f GFLOP/s "
                           "per rank) was low, the cores being busy then; give the peak with --peak-gflops\n",
                           100.0 * st.mfu, facts_.peak_gflops / W_));
    }
    std::vector<double> gpus = gather_gpu_health();
    if (rank_ != 0) return;
    jsonl_.write(step_record(st).object("phases", breakdown_json(bd)));
    if (tb_.is_open()) tb_.scalars(st.step, tensorboard_scalars(st, bd));
    write_gpu_records(gpus, st.step, st);
    if (jsonl_.emf()) write_rank_records(bd, st.step);
    if (st.step - facts_.start_step > o_.log_every) warn_bottleneck(st, bd);
}

void Reporter::progress(long done, double now, double per_step_s, double eta_s) {
    if (!tty_ || now - last_status_ < 0.25) return;
    last_status_ = now;
    std::printf("\r\x1b[Kstep %ld/%ld %.0f%% | %.1f ms/step | ETA %s", done, o_.steps, std::floor(100.0 * done / o_.steps),
                1e3 * per_step_s, human_duration(eta_s).c_str());
    std::fflush(stdout);
    status_shown_ = true;
}

void Reporter::eval_line(const EvalStats& e) {
    print(format_eval_line(e) + "\n");
    if (rank_ != 0) return;
    jsonl_.write(eval_record(e));
    if (!tb_.is_open()) return;
    std::vector<std::pair<std::string, float>> s = {{"eval/loss", (float)e.loss}, {"eval/accuracy", (float)e.accuracy}};
    if (e.bits_per_byte >= 0) s.push_back({"eval/bits_per_byte", (float)e.bits_per_byte});
    if (e.acc >= 0)
        s.insert(s.end(), {{"eval/task_acc", (float)e.acc}, {"eval/task_acc_norm", (float)e.acc_norm},
                           {"eval/task_acc_tokens", (float)e.acc_tokens}});
    tb_.scalars(e.step, s);
}

void Reporter::op_times(long step, const OpTimes& t, const char* how_timed) {
    // With --grad-accum only the last micro-batch is timed: a step does this A times.
    const std::string which = o_.grad_accum > 1 ? strfmt("step %ld's last micro-batch (of %d)", step, o_.grad_accum)
                                                : strfmt("step %ld", step);
    print(strfmt("ops of %s on rank 0, forward + backward (%s):\n%s", which.c_str(), how_timed, t.table().c_str()));
}

void Reporter::stopped_by(const char* signal) {
    if (rank_ == 0) write_stopped_by(o_.run_dir, signal);
}

void write_stopped_by(const std::string& run_dir, const char* signal) {
    const std::string path = run_dir + "/stopped-by";
    try {
        make_directories(run_dir, "--run-dir");
    } catch (const UserError&) {
        // fopen below says why
    }
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f || std::fprintf(f, "%s\n", signal) < 0 || std::fclose(f) != 0)
        std::fprintf(stderr, "dptrain: warning: %s: cannot write it: %s\n", path.c_str(), std::strerror(errno));
}

void Reporter::stop_budget(long step, double checkpoint_s, double step_s) {
    // Up to two steps: a signal after a step's all-reduce is acted on after the next.
    const double need = checkpoint_s + 2.0 * step_s;
    constexpr double kSlurmKillWait = 30.0;  // also Kubernetes' default grace
    jsonl_.write(Record("stop_budget").integer("step", step).metric("checkpoint_s", checkpoint_s, "Seconds").metric("step_s", step_s, "Seconds")
                     .metric("stop_needs_s", need, "Seconds"));
    if (need < 1.0) return;
    print(strfmt("stop budget: a checkpoint takes %.2f s to write and a step %.1f ms, so a stop signal (SIGTERM, "
                 "SIGUSR1) needs up to %.1f s to checkpoint and exit 75%s\n",
                 checkpoint_s, 1e3 * step_s, need,
                 need < kSlurmKillWait * 0.5
                     ? ""
                     : "; warning: give it more before SIGKILL than the default 30 s (Slurm KillWait and --signal=USR1@T, "
                       "Kubernetes terminationGracePeriodSeconds, DPTRAIN_STOP_GRACE; slurm/README.md)"));
}

void Reporter::run_breakdown(const StepBreakdown& whole, long done, double seconds) {
    if (rank_ != 0 || whole.steps <= 0) return;
    print(format_breakdown(whole, hosts_));
    jsonl_.write(Record("summary").integer("step", done).integer("steps", whole.steps)
                     .integer("warmup_steps", whole.left_out)
                     .metric("seconds", seconds, "Seconds").object("phases", breakdown_json(whole))
                     .object("checkpoints", checkpoints_json(whole.checkpoint)));
}

void Reporter::nonfinite(long step, bool loss, double norm, bool stopping, long skipped, const std::string& input) {
    const char* what = loss ? "loss" : "gradient";
    const std::string from = input.empty() ? "" : strfmt(" from a non-finite input (%s)", input.c_str());
    if (!stopping) {
        print(strfmt("warning: step %ld: non-finite %s%s; step skipped, parameters unchanged (%ld skipped so far)\n",
                     step, what, from.c_str(), skipped));
        return;
    }
    if (rank_ != 0) return;
    // The sample order is deterministic, so a resume meets the bad input again: a lower
    // learning rate would not help.
    const std::string fix = input.empty()
                                ? "Resume from the last checkpoint with a lower --lr, or pass --on-nonfinite skip to "
                                  "skip such steps"
                                : "Fix or drop that row (a resume meets it again: the sample order is fixed), or pass "
                                  "--on-nonfinite skip to skip such steps";
    std::fprintf(stderr, "dptrain: error: step %ld: non-finite %s%s (gradient norm %g); stopping before the parameters "
                         "are touched. %s\n",
                 step, what, from.c_str(), norm, fix.c_str());
    std::fflush(stderr);
}

void Reporter::warn_bottleneck(const StepStats& st, const StepBreakdown& bd) {
    const BottleneckRule::Verdict v = bottleneck_.observe(st.data_wait_pct, st.comm_pct, W_);
    const PhaseAcross& d = bd.phase[0];
    if (v.data) {
        print(strfmt("warning: waiting for data takes %.1f%% of the step (slowest rank %d on %s: %.3f ms per step): "
                     "the input pipeline is the bottleneck. Raise --io-threads (and --prefetch); --io memory reads "
                     "a split that fits in memory once per node; shards on a slow or busy filesystem can be copied "
                     "to node-local storage with --stage-dir\n",
                     st.data_wait_pct, d.slowest_rank, hosts_[d.slowest_rank].c_str(), d.max_ms));
    }
    const PhaseAcross& c = bd.phase[3];
    if (v.comm) {
        print(strfmt("warning: waiting for the gradient all-reduce takes %.1f%% of the step (longest on rank %d on "
                     "%s): either the network is the bottleneck (try --grad-dtype bf16, a larger --batch-size, or "
                     "--overlap on where a core is free for it) or the ranks wait for a slower one (the step "
                     "breakdown names the slowest rank of each phase)\n",
                     st.comm_pct, c.slowest_rank, hosts_[c.slowest_rank].c_str()));
    }
}

// Gathered on rank 0: kGpuVals per rank, util < 0 where a rank has no GPU. Empty when GPU health
// is off (every rank agrees).
std::vector<double> Reporter::gather_gpu_health() {
    if (!gpu_health_) return {};
    double mine[kGpuVals] = {-1, 0, 0, 0, 0};
    GpuSample s;
    if (gpu_index_ >= 0 && nvml_.sample(gpu_index_, &s, nullptr)) {
        mine[0] = s.util_pct, mine[1] = s.mem_used_mib, mine[2] = s.mem_total_mib, mine[3] = s.temp_c;
        mine[4] = s.power_w;
    }
    std::vector<double> all(rank_ == 0 ? (size_t)W_ * kGpuVals : 0);
    world_.gather(mine, sizeof mine, all.data(), 0);
    return all;
}

// Rank 0: a "gpu" record per rank; once per run, a warning when a GPU idles (under 50%) waiting
// for data or the network.
void Reporter::write_gpu_records(const std::vector<double>& all, long step, const StepStats& st) {
    if (all.empty()) return;
    int idlest = -1;
    for (int r = 0; r < W_; ++r) {
        const double* v = &all[(size_t)r * kGpuVals];
        if (v[0] < 0) continue;
        if (idlest < 0 || v[0] < all[(size_t)idlest * kGpuVals]) idlest = r;
        Record rec("gpu");
        rec.integer("step", step);
        rec.metric("gpu_util_pct", v[0], "Percent").metric("gpu_mem_used_mib", v[1], "Megabytes");
        rec.value("gpu_mem_total_mib", v[2]).metric("gpu_temp_c", v[3]).metric("gpu_power_w", v[4]);
        jsonl_.write_rank(rec.text("host", hosts_[r]).integer("rank_id", r), r, hosts_[r]);
    }
    // On the CPU backend the GPU idles by design.
    if (idlest < 0 || !facts_.on_gpu || step - facts_.start_step <= o_.log_every) return;
    const double util = all[(size_t)idlest * kGpuVals];
    if (util >= 50.0) return;
    if (!warned_gpu_data_ && st.data_wait_pct > BottleneckRule::kDataPct) {
        warned_gpu_data_ = true;
        print(strfmt("warning: the GPU of rank %d on %s is %.0f%% busy while waiting for data takes %.1f%% of the step: "
                     "the job is input-bound (see the data-wait warning for what to change)\n",
                     idlest, hosts_[idlest].c_str(), util, st.data_wait_pct));
    }
    if (!warned_gpu_comm_ && st.comm_pct > BottleneckRule::kCommPct) {
        warned_gpu_comm_ = true;
        print(strfmt("warning: the GPU of rank %d on %s is %.0f%% busy while waiting for the all-reduce takes %.1f%% "
                     "of the step: the job is network-bound (or waits for a straggler)\n",
                     idlest, hosts_[idlest].c_str(), util, st.comm_pct));
    }
}

// EMF: each rank's mean phase times, with rank and node as dimensions.
void Reporter::write_rank_records(const StepBreakdown& bd, long step) {
    static const char* names[kStepPhases] = {"data_ms", "forward_ms", "backward_ms", "allreduce_ms", "optimizer_ms"};
    for (int r = 0; r < W_; ++r) {
        Record rec("rank");
        rec.integer("step", step);
        for (int p = 0; p < kStepPhases; ++p)
            rec.metric(names[p], bd.rank_mean_ms[(size_t)r * kStepPhases + p], "Milliseconds");
        jsonl_.write_rank(rec, r, hosts_[r]);
    }
}

void Reporter::memory(const RunSummary& s) {
    const double MiB = 1048576.0;
    if (s.peak_most.first > 0)
        print(strfmt("memory: peak resident %.1f MiB on rank %d, the most%s; %.1f MiB on rank %d, the least\n",
                     s.peak_most.first / MiB, s.peak_most.second,
                     s.host_planned ? strfmt(" (planned %.1f MiB%s)", s.host_planned / MiB,
                                             s.on_gpu ? " in the host's memory" : "")
                                          .c_str()
                                    : "",
                     s.peak_least.first / MiB, s.peak_least.second));
    if (s.on_gpu)
        print(strfmt("GPU memory: %.1f MiB allocated by the run on rank %d's GPU, the most (planned %.1f MiB on the "
                     "GPU)\n",
                     s.gpu_most.first / MiB, s.gpu_most.second, s.gpu_planned / MiB));
}

const std::string& Reporter::metrics_halt() const {
    static const std::string none;
    return o_.metrics_required ? jsonl_.failure() : none;
}

void Reporter::finished(const RunSummary& s) {
    if (s.code == kExitNonfinite) return;  // nonfinite() said it
    if (!s.halted.empty()) {
        print("");  // clears a progress line
        if (rank_ != 0) return;
        std::fprintf(stderr,
                     "dptrain: error: --metrics %s: a write failed (%s) and --metrics-required is set: stopped after "
                     "step %ld with a checkpoint (%s); make room for the metrics and run again with --resume auto\n",
                     o_.metrics.c_str(), s.halted.c_str(), s.done, s.checkpoint.c_str());
        return;
    }
    if (s.code == kExitPreempted) {
        // Only a preemption notice asks for a requeue: SIGTERM ends the job on purpose.
        const char* what = s.usr1 ? "preempted: a rank received SIGUSR1 (a preemption notice)"
                                  : "stopped: a rank received SIGTERM (scancel, a time limit or a deleted pod; or SIGHUP, a "
                                    "lost terminal)";
        const char* then = s.usr1 ? "requeue the job with --resume auto to continue"
                                  : "stopped with a checkpoint; run again with --resume auto to continue from it";
        stopped_by(s.usr1 ? "SIGUSR1" : "SIGTERM");
        print(strfmt("%s; stopped after step %ld with a checkpoint\ncheckpoint: %s\nexit %d: %s\n", what, s.done,
                     s.checkpoint.c_str(), kExitPreempted, then));
        return;
    }
    // With its step where it is not the last step's (--stop-after, a stop).
    std::string tail;
    if (s.last_eval)
        tail = strfmt(" | val loss %.4f | val accuracy %.2f%%%s", s.last_eval->loss, 100.0 * s.last_eval->accuracy,
                      s.last_eval->step == s.done ? "" : strfmt(" (at step %ld)", s.last_eval->step).c_str());
    if (s.skipped) tail += strfmt(" | %ld non-finite steps skipped", s.skipped);
    if (s.staged >= 0)
        tail += strfmt(" | %ld of %ld batches copied to the GPU during the step before", s.staged, s.end - s.start);
    // Three significant digits at least, so a short run is not "0.0 s".
    print(strfmt("done: steps %ld..%ld in %.*f s | train loss %.4f (last interval)%s\n", s.start + 1, s.end,
                 s.seconds < 1 ? 3 : s.seconds < 10 ? 2 : 1, s.seconds, s.final_loss, tail.c_str()));
    print(strfmt("checkpoint: %s\nmetrics: %s\n", s.checkpoint.c_str(), s.metrics.c_str()));
}


} // namespace dptrain
