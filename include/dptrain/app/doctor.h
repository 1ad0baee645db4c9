// `dptrain doctor` and `--preflight`: what a run will use and what is wrong, rank by rank, then a
// summary. Not for: fixing anything.
#pragma once

#include "dptrain/config/options.h"
#include "dptrain/comm/topology.h"

namespace dptrain {

// Collective over topo.world. Rank 0 prints the report. Returns the number of fatal problems
// found on any rank (the same on every rank).
int run_doctor(const Options& opts, const Topology& topo);

} // namespace dptrain
