// The parts of a rank's memory, each sized as the code that allocates it sizes it.
// Not for: allocating anything.
#include "dptrain/train/memory_plan.h"

#include "dptrain/backend/gpu_sizes.h"
#include "dptrain/backend/gradient_path.h"
#include "dptrain/core/error.h"
#include "dptrain/core/memory.h"
#include "dptrain/data/h5.h"
#include "dptrain/data/prefetcher.h"
#include "dptrain/data/sampler.h"
#include "dptrain/model/gpt.h"

#include <algorithm>
#include <climits>

namespace dptrain {

namespace {

double mib(size_t bytes) { return (double)bytes / 1048576.0; }

std::vector<int> mlp_dims(const ModelSpec& s) {
    std::vector<int> d{s.in};
    d.insert(d.end(), s.hidden.begin(), s.hidden.end());
    d.push_back(s.classes);
    return d;
}

size_t model_params(const ModelSpec& s) {
    return language_model(s.kind) ? lm_count_params(s.gpt) : Mlp::count_params(mlp_dims(s));
}

// A GPT's B windows; the MLP's larger of B and the evaluator's rows (one model serves both).
int model_rows(const ModelSpec& s, int B, int eval_rows) { return language_model(s.kind) ? B : std::max(B, eval_rows); }

// As the model that will run allocates them: on a GPU, the CUDA sizes (bf16 at 2 bytes where the
// CPU twin keeps floats).
size_t model_activations(const ModelSpec& s, int rows, bool gpu) {
    if (s.kind == ModelKind::mlp) return Mlp::activation_bytes(mlp_dims(s), rows);  // the same on a GPU
    return gpu && s.kind == ModelKind::gpt ? gpu_gpt_activation_bytes(s.gpt, rows, s.precision)
                                           : lm_activation_bytes(s.gpt, rows);
}

size_t model_operands(const ModelSpec& s, int rows, bool gpu) {
    if (language_model(s.kind))
        return !gpu                       ? lm_operand_bytes(s.gpt, rows, s.precision)
               : s.kind == ModelKind::gpt ? gpu_gpt_operand_bytes(s.gpt, rows, s.precision)
                                          : gpu_llama_operand_bytes(s.gpt, rows, s.precision);
    return gpu ? gpu_mlp_operand_bytes(mlp_dims(s), rows, s.precision)
               : Mlp::operand_bytes(mlp_dims(s), rows, s.precision);
}

// Rank 0's shard of P floats over W ranks (the largest).
size_t largest_shard(size_t P, int W) {
    size_t most = 0;
    for (int r = 0; r < W; ++r) most = std::max(most, shard_span(P, r, W).size());
    return most;
}

// Parameters, gradients, optimizer state, activations, bf16 operands and a GPU's workspace.
void model_rows(const Options& o, const PlanFacts& f, int B, std::vector<MemoryRow>& out) {
    const ModelSpec& s = f.spec;
    const size_t P = model_params(s), F = sizeof(float);
    const size_t moments = o.optimizer == OptimizerKind::adamw ? 2 : 1;
    const int rows = model_rows(s, B, f.eval_rows);
    out.push_back({"parameters", P * F, "float32", false, true, true});
    out.push_back({"gradients", (P + kControlFloats) * F, "float32, summed in place", false, true});
    if (o.shard_optimizer) {
        // The shard lives where the step runs; the host path also receives its shard's sums into
        // a buffer of their own (the GPU step reduces in place).
        const size_t shard = largest_shard(P, f.ranks);
        out.push_back({"optimizer state", moments * shard * F, strfmt("%s, sharded: 1/%d", name_of(o.optimizer), f.ranks),
                       false, true, true});
        out.push_back({"summed gradient shard", shard * F, "host path: the reduce-scatter's receive buffer", false,
                       false});
    } else {
        out.push_back({"optimizer state", moments * P * F, strfmt("%s, every rank the whole", name_of(o.optimizer)),
                       false, true, true});
    }
    std::string act_note = strfmt("%d %s", rows, language_model(s.kind) ? "windows" : "rows");
    if (language_model(s.kind)) act_note += strfmt(", --recompute %s", name_of(o.recompute));
    if (f.gpu) act_note += ", as the GPU model keeps them";
    out.push_back({"activations", model_activations(s, rows, f.gpu), act_note, false, true});
    if (s.precision == Precision::bf16)
        out.push_back({"bf16 operands", model_operands(s, rows, f.gpu),
                       f.gpu ? "--precision bf16: the matmuls' copies at 2 bytes a value" : "--precision bf16", false,
                       true});
    if (f.gpu) out.push_back({"cuBLAS workspace", gpu_blas_workspace_bytes(), "the model's stream", false, true});
}

// Communication buffers, input ring, sample order, readers' caches, node copy, evaluation,
// checkpoints, runtime.
void run_rows(const Options& o, const PlanFacts& f, int B, std::vector<MemoryRow>& out) {
    const size_t P = model_params(f.spec), F = sizeof(float);
    const size_t moments = o.optimizer == OptimizerKind::adamw ? 2 : 1;
    // --grad-dtype bf16: the engine's bf16 staging (node window's and flat path's; auto has both)
    // and a sharded state's bf16 receive buffer. Float32 on the wire needs none.
    const int L = f.local_ranks;
    const bool window = o.allreduce != AllreduceAlgo::flat && L > 1;
    const bool flat = o.allreduce != AllreduceAlgo::hierarchical || L == 1;
    const bool staged = o.grad_dtype == DType::bf16;
    size_t comm = staged ? ((window ? 1 : 0) + (flat ? 1 : 0)) * (P + kControlFloats) * sizeof(uint16_t) : 0;
    if (o.shard_optimizer && staged) comm += largest_shard(P, f.ranks) * sizeof(uint16_t);
    out.push_back({"communication buffers", comm,
                   !staged             ? "none: float32 on the wire"
                   : window && flat    ? "bf16 staging: the node window's and the flat path's"
                                       : "bf16 staging",
                   false});
    // The shared-memory all-reduce maps the node's other ranks' gradient pages: not more node
    // memory, but counted in this rank's resident size.
    if (window)
        out.push_back({"peers' window pages", 2 * (P + kControlFloats) * F * (size_t)(L - 1) / (size_t)L,
                       strfmt("read from the node's other %d rank%s (shared memory)", L - 1, L == 2 ? "" : "s"), false});
    const size_t slots = (size_t)Prefetcher::slots_for(o.prefetch, o.grad_accum, o.io_threads);
    const size_t sample = (size_t)(f.floats_per_sample + f.ints_per_sample) * 4;
    const size_t ring = slots * (size_t)B * sample + (size_t)o.io_threads * B * sizeof(long);
    out.push_back({"input ring", ring, strfmt("%zu slots of %d samples", slots, B), false});
    out.push_back({"sample order", f.order_bytes, o.io_threads > 1 ? "8 bytes a sample, two epochs" : "8 bytes a sample",
                   false});
    if (f.reader_bytes > 0)
        out.push_back({"readers' caches", f.reader_bytes,
                       "labels read at open; HDF5-read shards' files and chunk caches (shared by the readers)", false});
    // One copy per node, so a rank's share counts, though each rank's resident size grows to all
    // of it as it reads.
    if (f.node_copy_bytes > 0)
        out.push_back({"node copy of the data", f.node_copy_bytes / (size_t)std::max(1, L),
                       strfmt("--io memory: this rank's share of the copy its node's %d rank%s", L,
                              L == 1 ? " holds" : "s share"),
                       false});
    const int eval = f.eval_rows > 0 ? f.eval_rows : B;
    out.push_back({"evaluation batch", (size_t)eval * ((f.val_floats + f.val_ints) * 4 + sizeof(long)),
                   strfmt("%d rows", eval), false});
    // Rank 0: an async checkpoint copies everything; a sync one writes the live buffers, a sharded
    // state one shard at a time.
    if (o.async_checkpoint)
        out.push_back({"checkpoint copy", (P + moments * P) * F, "rank 0: for the background write", true});
    else if (o.shard_optimizer)
        out.push_back({"checkpoint scratch", largest_shard(P, f.ranks) * F, "rank 0: each rank's shard as it arrives",
                       true});
    out.push_back({"runtime", f.runtime, "libraries, MPI, HDF5: measured before the run allocates", false});
}

// Without budget or verdict.
std::vector<MemoryRow> rows_for(const Options& o, const PlanFacts& f, int B) {
    std::vector<MemoryRow> out;
    model_rows(o, f, B, out);
    run_rows(o, f, B, out);
    return out;
}

// Which rows a total counts: all (host-resident step), the GPU's, or the host's beside a GPU step.
enum class Where { all, gpu, host };

size_t total_of(const std::vector<MemoryRow>& rows, Where w) {
    size_t t = 0;
    for (const MemoryRow& r : rows)
        if (w == Where::all || (w == Where::gpu ? r.on_gpu : !r.on_gpu || r.host_too)) t += r.bytes;
    return t;
}

} // namespace

PlanFacts plan_facts(const Task& task, const Options& o, int ranks, int local_ranks, size_t runtime) {
    PlanFacts f;
    f.spec = task.model_spec(o);
    f.ranks = ranks;
    f.local_ranks = local_ranks;
    f.floats_per_sample = task.train().floats_per_sample();
    f.ints_per_sample = task.train().ints_per_sample();
    f.eval_rows = language_model(f.spec.kind) ? 0 : task.eval_rows();  // a language model's: its micro-batch
    f.val_floats = task.val().floats_per_sample();
    f.val_ints = task.val().ints_per_sample();
    f.runtime = runtime;
    f.order_bytes = Sampler::bytes_for(task.train().num_samples(), Sampler::epochs_for(o.io_threads), o.shuffle_block);
    f.reader_bytes = task.train().held_bytes() + task.val().held_bytes();  // reader threads share them
    if (o.io == IoMode::memory) f.node_copy_bytes = (size_t)task.train().memory_bytes();
    return f;
}

MemoryPlan plan_memory(const Options& o, const PlanFacts& f, size_t budget, const std::string& budget_from,
                       bool gpu_budget) {
    MemoryPlan p;
    p.rows = rows_for(o, f, o.batch_size);
    p.total = total_of(p.rows, Where::all);
    p.gpu_total = total_of(p.rows, Where::gpu);
    p.host_total = total_of(p.rows, Where::host);
    p.gpu_budget = gpu_budget;
    p.budget = budget;
    p.budget_from = budget_from;
    if (budget == 0) return p;
    // Memory grows with the micro-batch: double while it fits, then halve the gap.
    auto fits = [&](int B) { return total_of(rows_for(o, f, B), gpu_budget ? Where::gpu : Where::all) <= budget; };
    if (!fits(1)) {
        p.largest_batch = 0;
        return p;
    }
    int lo = 1, hi = 2;
    while (hi <= (1 << 24) && fits(hi)) lo = hi, hi *= 2;
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    p.largest_batch = lo;
    return p;
}

int auto_batch(const Options& o, const PlanFacts& f, size_t budget, const std::string& from, bool gpu_budget,
               int cap, const std::string& cap_reason, std::string* why) {
    if (budget == 0)
        throw UserError("--batch-size auto: this machine does not say how much memory is free; give --batch-size N");
    const size_t usable = budget - budget / 10;
    const MemoryPlan p = plan_memory(o, f, usable, from, gpu_budget);
    if (p.largest_batch <= 0)
        throw UserError(strfmt("--batch-size auto: not one sample a micro-batch fits in 90%% of %.1f MiB (%s); "
                               "--shard-optimizer, --recompute block or more memory",
                               mib(budget), from.c_str()));
    const std::string fits = strfmt("the memory plan fits %d in 90%% of %.1f MiB (%s)", p.largest_batch, mib(budget),
                                    from.c_str());
    if (cap > 0 && cap < p.largest_batch) {
        *why = strfmt("--batch-size auto: %d, %s; %s", cap, cap_reason.c_str(), fits.c_str());
        return cap;
    }
    *why = strfmt("--batch-size auto: %d, the largest the memory plan fits in 90%% of %.1f MiB (%s)", p.largest_batch,
                  mib(budget), from.c_str());
    return p.largest_batch;
}

int auto_batch_cap(const Task& task, bool gpu, int ranks, std::string* reason) {
    const long share = std::max<long>(1, task.train().num_samples() / std::max(1, ranks));
    if (!gpu && share >= kCpuAutoBatch) {
        *reason = "the CPU's cap (a larger batch buys a CPU no speed)";
        return kCpuAutoBatch;
    }
    *reason = "each rank's share of the training samples";
    return (int)std::min<long>(share, INT_MAX);
}

size_t measure_runtime() {
    h5::init();  // HDF5 allocates on first use: the libraries' share, not the run's
    return resident_bytes();
}

size_t planned_params(const ModelSpec& spec) { return model_params(spec); }

std::string plan_table(const MemoryPlan& p, const Options& o, const PlanFacts& f) {
    std::string t = strfmt("memory per rank (plan for %d rank%s, --batch-size %d%s):\n", f.ranks,
                           f.ranks == 1 ? "" : "s", o.batch_size, o.shard_optimizer ? ", --shard-optimizer" : "");
    for (const MemoryRow& r : p.rows)
        t += strfmt("  %-22s %10.1f MiB  %s%s\n", r.part.c_str(), mib(r.bytes), r.note.c_str(),
                    !p.gpu_budget || !r.on_gpu ? "" : r.host_too ? " [GPU and host]" : " [GPU]");
    // On a GPU the two memories are budgeted apart: one sum of both would fit neither.
    if (p.gpu_budget)
        t += strfmt("  %-22s %10.1f MiB\n  %-22s %10.1f MiB\n", "on the host (rank 0)", mib(p.host_total),
                    "on the GPU [GPU]", mib(p.gpu_total));
    else
        t += strfmt("  %-22s %10.1f MiB\n", "total (rank 0)", mib(p.total));
    if (p.budget == 0) return t;
    t += strfmt("  %s %.1f MiB of %.1f MiB (%s): %s\n", p.gpu_budget ? "GPU:" : "fit:", mib(p.bounded()),
                mib(p.budget), p.budget_from.c_str(), p.fits() ? "fits" : "DOES NOT FIT");
    if (p.largest_batch > 0)
        t += strfmt("  largest --batch-size that fits: %d%s\n", p.largest_batch,
                    language_model(f.spec.kind) && o.recompute != Recompute::block ? " (more with --recompute block)"
                                                                                      : "");
    else
        t += "  no --batch-size fits: shard the optimizer state, recompute activations, or use more memory\n";
    return t;
}

// The tightest of the machine's available memory, the cgroups' limit and Slurm's allocation:
// inside a cgroup (a pod's limit, Slurm's --mem, a container's) /proc/meminfo shows the host's.
size_t host_budget(int local_ranks, std::string* from) {
    std::string file, var;
    const size_t limit = cgroup_memory_limit(&file), slurm = slurm_memory_limit(&var);
    size_t best = available_bytes();
    std::string what = "the machine's available", source;
    const auto tighter = [&](size_t v, const char* name, const std::string& where) {
        if (v > 0 && (best == 0 || v < best)) best = v, what = name, source = " (" + where + ")";
    };
    tighter(limit, "the cgroup's limit", file);
    tighter(slurm, "Slurm's allocation", var);
    if (best == 0) return 0;
    *from = strfmt("%s %.1f GiB%s / %d rank%s", what.c_str(), (double)best / (1 << 30), source.c_str(), local_ranks,
                   local_ranks == 1 ? "" : "s");
    return best / (size_t)std::max(1, local_ranks);
}

} // namespace dptrain
