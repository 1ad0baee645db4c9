// `dptrain plan`: the memory a rank of a run would use, part by part (train/memory_plan.h), for
// any number of ranks, before a job is queued: whether it fits, and the largest --batch-size that
// does. Not for: measuring (the run's last lines give the measured peak).
#pragma once

#include "dptrain/comm/topology.h"

#include <string>
#include <vector>

namespace dptrain {

// argv: the words after `plan`. Takes --ranks N (default: the ranks launched) and --gpu-memory SIZE
// out of them, parses the rest as training options, opens --data for the model's shape, and
// prints the plan (rank 0). Collective over topo.world (launched alone, a world of one). Returns
// 0 when it fits, 1 when it does not, 2 for a bad option or file.
int run_plan(std::vector<std::string> args, const Topology& topo);

} // namespace dptrain
