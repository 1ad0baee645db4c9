// Where each rank sits: world, node and cross-node communicators (nodes real, or --ranks-per-node).
// Not for: moving data (communicator.h).
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
    bool simulated = false;  // --ranks-per-node
    bool spans_hosts = false;  // a simulated node across hosts; every rank agrees
    // A node window cannot span hosts: UserError naming `what`.
    void require_one_host(const char* what) const;
    // Among this host's ranks, which share its GPUs.
    int host_rank = 0, host_size = 1;
    std::string host;

    // Collective. Throws the same UserError on every rank for a bad --ranks-per-node.
    static Topology create(MPI_Comm world, int ranks_per_node);
    void destroy();

    // Collective; "" except on rank 0.
    std::string table() const;
};

} // namespace dptrain
