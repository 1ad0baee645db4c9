// A rank's memory before the run allocates it: each part the trainer holds (parameters, gradients,
// optimizer state, activations, bf16 operands, communication buffers, the input ring, the sample
// order and the readers' labels, --io memory's copy of the data, rank 0's checkpoint copy, the
// libraries' own), from the options, the model's shape and the data's sizes; whether it
// fits a budget, and the largest micro-batch that does. `dptrain plan` prints it for any rank
// count, the trainer at start-up, and the run's end the measured peak beside it.
// Not for: allocating (each part sizes its own buffers; the models' formulas are tested against
// what they allocate).
#pragma once

#include "dptrain/backend/device.h"
#include "dptrain/config/options.h"
#include "dptrain/train/task.h"

#include <cstddef>
#include <string>
#include <vector>

namespace dptrain {

// What the plan needs besides the options: the model, the ranks, what a sample is.
struct PlanFacts {
    ModelSpec spec;                  // Task::model_spec
    int ranks = 1;                   // the world size planned for
    int local_ranks = 1;             // of them, on one node (the shared-memory all-reduce's peers)
    int floats_per_sample = 0;       // a training sample as the readers hold it: floats and ints
    int ints_per_sample = 0;
    int eval_rows = 0;               // validation rows per forward (the evaluator's batch)
    int val_floats = 0, val_ints = 0;
    size_t runtime = 0;              // resident bytes before the run allocates (libraries, MPI, HDF5)
    size_t order_bytes = 0;          // the sampler's epoch order(s)
    size_t reader_bytes = 0;         // what the readers keep (labels, HDF5-read files), shared by them
    size_t node_copy_bytes = 0;      // --io memory: the training split in node-shared memory
    bool gpu = false;                // the model runs on a GPU: activations and bf16 operands as the
                                     // CUDA model allocates them (backend/gpu_sizes.h)
};

// The facts of the run `task` and `o` describe, on `ranks` ranks of which `local_ranks` share a
// node, with `runtime` resident bytes before the run allocates.
PlanFacts plan_facts(const Task& task, const Options& o, int ranks, int local_ranks, size_t runtime);

struct MemoryRow {
    std::string part;
    size_t bytes = 0;
    std::string note;
    bool rank0_only = false;  // rank 0 alone holds it (the checkpoint's copy)
    bool on_gpu = false;      // a GPU-resident step (--gpu-state device) keeps it in the GPU's memory
    bool host_too = false;    // ... and the host keeps it as well (parameters and optimizer state:
                              // the checkpoint's source, allocated on every path)
};

struct MemoryPlan {
    std::vector<MemoryRow> rows;
    size_t total = 0;        // rank 0's bytes (the most: it also holds the checkpoint's copy)
    size_t gpu_total = 0;    // of those, what a GPU-resident step keeps on the GPU
    size_t host_total = 0;   // and what its host keeps (rows not on the GPU, and those on both)
    bool gpu_budget = false;  // the budget is a GPU's (--gpu-memory): it bounds gpu_total
    size_t budget = 0;       // what a rank may use; 0: unknown
    std::string budget_from;  // where the budget came from ("--gpu-memory 80GiB")
    int largest_batch = -1;  // the largest --batch-size whose plan fits the budget; 0: none; -1: no budget
    size_t bounded() const { return gpu_budget ? gpu_total : total; }
    bool fits() const { return budget == 0 || bounded() <= budget; }
};

// The plan of a rank for `f` under `o` (its --batch-size, precision, recompute, optimizer and its
// sharding, prefetch), against `budget` bytes (0: none) of host memory, or of a GPU's (gpu_budget:
// the parts a GPU-resident step keeps there, a sharded state's shard among them).
MemoryPlan plan_memory(const Options& o, const PlanFacts& f, size_t budget, const std::string& budget_from,
                       bool gpu_budget = false);

// What the process holds before the run allocates (the runtime row): its resident bytes once the
// libraries that allocate on first use are initialised.
size_t measure_runtime();

// The parameters of the model spec describes, without building it.
size_t planned_params(const ModelSpec& spec);

// The table, one line a part, in MiB, with the total, the budget and the verdict.
std::string plan_table(const MemoryPlan& p, const Options& o, const PlanFacts& f);

// The budget a rank has when none is given: on the CPU, the machine's available memory shared by
// the node's ranks (and why); 0 when /proc does not say.
size_t host_budget(int local_ranks, std::string* from);

} // namespace dptrain
