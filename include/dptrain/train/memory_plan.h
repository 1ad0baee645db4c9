// A rank's memory planned before the run allocates it, part by part, from the options, the model's
// shape and the data's sizes; whether it fits a budget, and the largest micro-batch that does.
// Not for: allocating (each part sizes its own; the models' formulas are tested against that).
#pragma once

#include "dptrain/backend/device.h"
#include "dptrain/config/options.h"
#include "dptrain/train/task.h"

#include <cstddef>
#include <string>
#include <vector>

namespace dptrain {

struct PlanFacts {
    ModelSpec spec;
    int ranks = 1;
    int local_ranks = 1;             // on one node: the shared-memory all-reduce's peers
    int floats_per_sample = 0;       // as the readers hold a sample
    int ints_per_sample = 0;
    int eval_rows = 0;               // the evaluator's batch; 0: the micro-batch (a language model's)
    int val_floats = 0, val_ints = 0;
    size_t runtime = 0;              // resident bytes before the run allocates
    size_t order_bytes = 0;          // the sampler's epoch order(s)
    size_t reader_bytes = 0;         // shared by the readers
    size_t node_copy_bytes = 0;      // --io memory's node-shared copy
    bool gpu = false;                // sized as the CUDA model allocates (backend/gpu_sizes.h)
};

PlanFacts plan_facts(const Task& task, const Options& o, int ranks, int local_ranks, size_t runtime);

struct MemoryRow {
    std::string part;
    size_t bytes = 0;
    std::string note;
    bool rank0_only = false;  // the checkpoint's copy
    bool on_gpu = false;      // kept on the GPU by a GPU-resident step
    bool host_too = false;    // ... and on the host too (the checkpoint's source)
};

struct MemoryPlan {
    std::vector<MemoryRow> rows;
    size_t total = 0;        // rank 0's, the most (it holds the checkpoint's copy)
    size_t gpu_total = 0;    // of those, on the GPU
    size_t host_total = 0;   // on the host (including rows on both)
    bool gpu_budget = false;  // --gpu-memory: bounds gpu_total
    size_t budget = 0;       // 0: unknown
    std::string budget_from;  // e.g. "--gpu-memory 80GiB"
    int largest_batch = -1;  // the largest --batch-size that fits; 0: none; -1: no budget
    size_t bounded() const { return gpu_budget ? gpu_total : total; }
    bool fits() const { return budget == 0 || bounded() <= budget; }
};

// Against `budget` bytes (0: none) of host memory, or of a GPU's when gpu_budget.
MemoryPlan plan_memory(const Options& o, const PlanFacts& f, size_t budget, const std::string& budget_from,
                       bool gpu_budget = false);

// --batch-size auto: the largest micro-batch whose plan (o's, at that batch) fits in 90% of `budget`
// (the rest for what the plan does not see: fragmentation, the libraries' pools), at most `cap` (0:
// none; cap_reason says what it is). UserError naming the budget when not one sample fits. *why:
// the choice in words.
int auto_batch(const Options& o, const PlanFacts& f, size_t budget, const std::string& from, bool gpu_budget,
               int cap, const std::string& cap_reason, std::string* why);
// Its cap: each rank's share of the training samples, and on the CPU kCpuAutoBatch; *reason: which.
int auto_batch_cap(const Task& task, bool gpu, int ranks, std::string* reason);

// Resident bytes once the libraries that allocate on first use are initialised (the runtime row).
size_t measure_runtime();

// Without building the model.
size_t planned_params(const ModelSpec& spec);

// One line a part, in MiB, with the total, the budget and the verdict.
std::string plan_table(const MemoryPlan& p, const Options& o, const PlanFacts& f);

// On the CPU: available memory split among the node's ranks (and why); 0 when /proc does not say.
size_t host_budget(int local_ranks, std::string* from);

} // namespace dptrain
