// Where each rank sits: world, node-local and cross-node communicators. Ranks sharing a node are
// found with MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), or simulated with --ranks-per-node.
// Not for: moving data (communicator.h does that over these communicators).
#pragma once

#include <mpi.h>

#include <string>

namespace dptrain {

struct Topology {
    MPI_Comm world = MPI_COMM_NULL;
    MPI_Comm node = MPI_COMM_NULL;   // ranks of my node, ordered by world rank
    MPI_Comm cross = MPI_COMM_NULL;  // ranks with my local rank, one per node, ordered by node
    int rank = 0, size = 1;          // in world
    int local_rank = 0, local_size = 1;
    int node_index = 0, num_nodes = 1;
    bool simulated = false;  // nodes come from --ranks-per-node
    bool spans_hosts = false;  // simulated nodes that mpirun placed across hosts (every rank agrees)
    // Throws UserError naming `what` (what makes a node window) when spans_hosts.
    void require_one_host(const char* what) const;
    // Among the ranks of this host (its GPUs are theirs): local_rank / local_size unless simulated.
    int host_rank = 0, host_size = 1;
    std::string host;

    // Collective over world. ranks_per_node = 0 uses the real nodes. Throws UserError (same on
    // every rank) for a --ranks-per-node that does not divide the world size.
    static Topology create(MPI_Comm world, int ranks_per_node);
    void destroy();

    // Collective: rank 0 returns the rank / host / node / local rank table, others "".
    std::string table() const;
};

} // namespace dptrain
