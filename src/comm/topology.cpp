// Node-local and cross-node communicators, real or simulated, and the rank table.
// Not for: moving data (communicator.cpp).
#include "dptrain/comm/topology.h"

#include "dptrain/comm/communicator.h"
#include "dptrain/core/check.h"
#include "dptrain/core/error.h"

#include <vector>

namespace dptrain {

Topology Topology::create(MPI_Comm world, int ranks_per_node) {
    Topology t;
    t.world = world;
    MPI_CHECK(MPI_Comm_rank(world, &t.rank));
    MPI_CHECK(MPI_Comm_size(world, &t.size));
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_CHECK(MPI_Get_processor_name(name, &len));
    t.host.assign(name, len);

    if (ranks_per_node > 0) {
        if (t.size % ranks_per_node != 0)
            throw UserError(strfmt("--ranks-per-node %d does not divide the %d ranks of the job; choose "
                                   "a divisor of %d or 0 for the real nodes",
                                   ranks_per_node, t.size, t.size));
        t.simulated = true;
        MPI_CHECK(MPI_Comm_split(world, t.rank / ranks_per_node, t.rank, &t.node));
        // The host's own ranks still share its GPUs, whatever the simulated nodes are.
        MPI_Comm host_comm = MPI_COMM_NULL;
        MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, t.rank, MPI_INFO_NULL, &host_comm));
        MPI_CHECK(MPI_Comm_rank(host_comm, &t.host_rank));
        MPI_CHECK(MPI_Comm_size(host_comm, &t.host_size));
        MPI_CHECK(MPI_Comm_free(&host_comm));
    } else {
        MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, t.rank, MPI_INFO_NULL, &t.node));
    }
    MPI_CHECK(MPI_Comm_rank(t.node, &t.local_rank));
    MPI_CHECK(MPI_Comm_size(t.node, &t.local_size));
    if (t.simulated) {
        // A node window needs its ranks on one host; mpirun may place a simulated node's across
        // hosts. Every rank learns whether any did; windows refuse then (require_one_host).
        MPI_Comm shm = MPI_COMM_NULL;
        int together = 0;
        MPI_CHECK(MPI_Comm_split_type(t.node, MPI_COMM_TYPE_SHARED, t.rank, MPI_INFO_NULL, &shm));
        MPI_CHECK(MPI_Comm_size(shm, &together));
        MPI_CHECK(MPI_Comm_free(&shm));
        int split = together != t.local_size ? 1 : 0;
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &split, 1, MPI_INT, MPI_MAX, world));
        t.spans_hosts = split != 0;
    }
    if (!t.simulated) {
        t.host_rank = t.local_rank;
        t.host_size = t.local_size;
    }

    // Nodes numbered by their lowest world rank: an exclusive scan over the leaders (local rank 0).
    int leader = t.local_rank == 0 ? 1 : 0;
    int before = 0;
    MPI_CHECK(MPI_Exscan(&leader, &before, 1, MPI_INT, MPI_SUM, world));
    if (t.rank == 0) before = 0;  // MPI_Exscan leaves rank 0's result undefined
    int idx = before;
    MPI_CHECK(MPI_Bcast(&idx, 1, MPI_INT, 0, t.node));
    t.node_index = idx;
    MPI_CHECK(MPI_Allreduce(&leader, &t.num_nodes, 1, MPI_INT, MPI_SUM, world));
    MPI_CHECK(MPI_Comm_split(world, t.local_rank, t.node_index, &t.cross));
    return t;
}

void Topology::require_one_host(const char* what) const {
    if (spans_hosts)
        throw UserError(strfmt("%s: a simulated node's ranks must all be on one host (its shared memory), and mpirun "
                               "placed some across hosts; place consecutive ranks together (mpirun --map-by slot, at "
                               "least --ranks-per-node %d ranks a host), use --ranks-per-node 0 for the real nodes, or "
                               "--allreduce flat",
                               what, local_size));
}

void Topology::destroy() {
    free_comm(&node);
    free_comm(&cross);
}

std::string Topology::table() const {
    constexpr int kHost = 64;
    char mine[kHost] = {0};
    snprintf(mine, kHost, "%s", host.c_str());
    int ints[3] = {node_index, local_rank, local_size};
    std::vector<char> hosts(rank == 0 ? size * kHost : 0);
    std::vector<int> all(rank == 0 ? size * 3 : 0);
    MPI_CHECK(MPI_Gather(mine, kHost, MPI_CHAR, hosts.data(), kHost, MPI_CHAR, 0, world));
    MPI_CHECK(MPI_Gather(ints, 3, MPI_INT, all.data(), 3, MPI_INT, 0, world));
    if (rank != 0) return "";
    const char* what = simulated ? "simulated nodes (--ranks-per-node)" : num_nodes == 1 ? "node" : "nodes";
    std::string out = strfmt("%d ranks on %d %s\n", size, num_nodes, what);
    out += "  rank  node  local  host\n";
    for (int r = 0; r < size; ++r)
        out += strfmt("  %4d  %4d  %2d/%-2d  %s\n", r, all[3 * r], all[3 * r + 1], all[3 * r + 2],
                      &hosts[r * kHost]);
    return out;
}

} // namespace dptrain
