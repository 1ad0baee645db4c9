// Communicator, topology and start-up agreement, on however many ranks mpirun gives.
// Inputs are small integers so every sum is exact whatever the reduction order (nccl-tests'
// "verifiable" pattern).
#include "helpers.h"

#include "dptrain/comm/communicator.h"
#include "dptrain/core/error.h"
#include "dptrain/comm/topology.h"

#include <catch2/catch.hpp>

#include <vector>

using namespace dptrain;
using testing::world_rank;
using testing::world_size;


TEST_CASE("allreduce_sum is exact and identical on every rank", "[comm]") {
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int R = world_rank(), W = world_size();
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(262147)}) {
        std::vector<float> buf(n);
        for (size_t i = 0; i < n; ++i) buf[i] = (float)((R * 31 + i) % 13);
        comm.allreduce_sum(buf.data(), n);
        int wrong = 0;
        for (size_t i = 0; i < n; ++i) {
            float want = 0;
            for (int r = 0; r < W; ++r) want += (float)((r * 31 + i) % 13);
            wrong += buf[i] != want;
        }
        CHECK(wrong == 0);
    }
    double d[2] = {0.5 * R, 1.0};
    comm.allreduce_sum(d, 2);
    CHECK(d[0] == 0.25 * W * (W - 1));
    CHECK(d[1] == W);
}

TEST_CASE("broadcast copies the root's bytes", "[comm]") {
    MpiCommunicator comm(MPI_COMM_WORLD);
    const int W = world_size();
    int root = W - 1;
    std::vector<long> v(100, world_rank());
    comm.broadcast(v.data(), v.size() * sizeof(long), root);
    for (long x : v) CHECK(x == root);
}

TEST_CASE("topology: real node and simulated nodes", "[topology]") {
    const int R = world_rank(), W = world_size();
    Topology t = Topology::create(MPI_COMM_WORLD, 0);
    CHECK(t.num_nodes == 1);  // mpirun on one machine: one real node
    CHECK(t.local_size == W);
    CHECK(t.local_rank == R);
    CHECK(t.host_rank == R);
    CHECK(t.host_size == W);
    t.destroy();
    if (W % 2 == 0) {
        Topology s = Topology::create(MPI_COMM_WORLD, 2);
        CHECK(s.simulated);
        CHECK(s.num_nodes == W / 2);
        CHECK(s.node_index == R / 2);
        CHECK(s.local_rank == R % 2);
        CHECK(s.local_size == 2);
        // The GPUs are the host's: ranks bind by their place among the host's ranks, not the
        // simulated node's (two simulated nodes must not share GPU 0).
        CHECK(s.host_rank == R);
        CHECK(s.host_size == W);
        int cross_size = 0, cross_rank = 0;
        MPI_Comm_size(s.cross, &cross_size);
        MPI_Comm_rank(s.cross, &cross_rank);
        CHECK(cross_size == W / 2);
        CHECK(cross_rank == s.node_index);
        std::string table = s.table();
        if (R == 0) CHECK(table.find("simulated nodes") != std::string::npos);
        s.destroy();
    }
    if (W > 1) {
        // W does not divide by W + 1: every rank gets the same error, nobody hangs.
        CHECK_THROWS_WITH(Topology::create(MPI_COMM_WORLD, W + 1), Catch::Contains("--ranks-per-node"));
    }
}

TEST_CASE("all_ok: one rank's error is every rank's outcome", "[comm]") {
    const int W = world_size();
    bool ok = all_ok(MPI_COMM_WORLD, [&] {
        if (world_rank() == W - 1) throw UserError("test error from the last rank (expected output)");
    });
    CHECK_FALSE(ok);
    CHECK(all_ok(MPI_COMM_WORLD, [] {}));
}
