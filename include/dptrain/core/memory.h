// Resident and available memory from /proc, and sizes as people write them ("80GiB").
// Not for: deciding what fits (train/memory_plan.h).
#pragma once

#include <cstddef>
#include <string>

namespace dptrain {

// 0 where /proc does not say.
size_t resident_bytes();
size_t peak_resident_bytes();
size_t available_bytes();
// The tightest memory limit of this process's cgroups (v2 memory.max, v1 memory.limit_in_bytes,
// from its cgroup up to the hierarchy's root: a container's, a pod's, a Slurm job's), 0 when none;
// *where names the file that set it. root and self: another tree, for tests.
size_t cgroup_memory_limit(std::string* where, const std::string& root = "/sys/fs/cgroup",
                           const std::string& self = "/proc/self/cgroup");
// The tightest CPU quota of this process's cgroups, in CPUs (v2 cpu.max "QUOTA PERIOD", v1
// cpu.cfs_quota_us / cpu.cfs_period_us; a pod's CPU limit), 0 when none. As cgroup_memory_limit.
double cgroup_cpu_limit(std::string* where, const std::string& root = "/sys/fs/cgroup",
                        const std::string& self = "/proc/self/cgroup");
// Slurm's memory for this job on this node (SLURM_MEM_PER_NODE, or SLURM_MEM_PER_CPU x
// SLURM_CPUS_ON_NODE, in MiB), 0 outside Slurm or without --mem; *what names the variable. Where
// Slurm does not enforce it with a cgroup, it is still what the job was given.
size_t slurm_memory_limit(std::string* what);
// "80GB" is taken as GiB: memory sizes are binary in practice. Throws UserError naming `what`.
size_t parse_bytes(const std::string& text, const char* what);

} // namespace dptrain
