// Every all-reduce algorithm on every simulated node shape the world size allows, for counts
// 0, 1, primes, sizes that do not divide by the ranks, and a large one; inputs are small
// integers so the sums are exact whatever the order. bf16 within its rounding; reduce-scatter and
// all-gather of the MPI communicator; GradSync buckets with and without overlap; the sharded
// optimizer's reduce-scatter through the buckets, and the blocks checkpoints gather and scatter.
#include "helpers.h"

#include "dptrain/comm/allreduce.h"
#include "dptrain/config/options.h"
#include "dptrain/core/error.h"
#include "dptrain/comm/gradsync.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace dptrain;
using testing::world_rank;
using testing::world_size;


// Element i of rank r's input: small integers, exact in float32 and in bf16 (|v| <= 256).
static float input(int r, size_t i) { return (float)((int)((r * 7 + i * 3) % 11) - 5); }

static const size_t kCounts[] = {0, 1, 2, 3, 17, 31, 1000, 1021, 4099, 65537, 1 << 20};

TEST_CASE("all-reduce algorithms give exact sums on every node shape", "[allreduce]") {
    const int R = world_rank(), W = world_size();
    const size_t cap = (1 << 20) + 64;
    for (int rpn = 0; rpn <= W; ++rpn) {
        if (rpn > 0 && W % rpn != 0) continue;
        Topology topo = Topology::create(MPI_COMM_WORLD, rpn);
        for (AllreduceAlgo algo : {AllreduceAlgo::flat, AllreduceAlgo::hierarchical, AllreduceAlgo::automatic}) {
            AllreduceEngine eng(algo, topo, cap, /*threshold_bytes=*/4096);
            for (DType wire : {DType::f32, DType::bf16}) {
                for (size_t count : kCounts) {
                    // A range not starting at 0 also checks the offset arithmetic.
                    size_t offset = count == (1u << 20) ? 0 : 37;
                    float* buf = eng.buffer();
                    for (size_t i = 0; i < count; ++i) buf[offset + i] = input(R, i);
                    buf[offset + count] = 123.0f;  // guard: must stay untouched
                    eng.run(offset, count, wire);
                    long wrong = 0;
                    for (size_t i = 0; i < count; ++i) {
                        float want = 0;
                        for (int q = 0; q < W; ++q) want += input(q, i);
                        // bf16 holds integers up to 256 exactly, and |sums| <= 5 * 8 here.
                        wrong += buf[offset + i] != want;
                    }
                    wrong += buf[offset + count] != 123.0f;
                    INFO(name_of(algo) << " rpn=" << rpn << " " << dtype_name(wire) << " count=" << count << " ranks=" << W);
                    CHECK(wrong == 0);
                }
            }
        }
        topo.destroy();
    }
}

TEST_CASE("bf16 on the wire: within bf16 rounding of the float32 sum, identical on every rank", "[allreduce]") {
    const int R = world_rank(), W = world_size();
    Topology topo = Topology::create(MPI_COMM_WORLD, W % 2 == 0 ? 2 : 0);
    for (AllreduceAlgo algo : {AllreduceAlgo::flat, AllreduceAlgo::hierarchical}) {
        AllreduceEngine eng(algo, topo, 5000);
        std::vector<float> exact(5000, 0.0f);
        for (size_t i = 0; i < 5000; ++i) {
            eng.buffer()[i] = std::sin(0.001f * i * (R + 1)) * 1e-3f;
            for (int q = 0; q < W; ++q) exact[i] += std::sin(0.001f * i * (q + 1)) * 1e-3f;
        }
        eng.run(0, 5000, DType::bf16);
        // Each combining step rounds to bf16 (relative 2^-8); W - 1 steps at most, plus the input.
        double tol = (W + 1) * std::ldexp(1.0, -8);
        long bad = 0;
        for (size_t i = 0; i < 5000; ++i) {
            double scale = 0;
            for (int q = 0; q < W; ++q) scale += std::fabs(std::sin(0.001f * i * (q + 1)) * 1e-3f);
            bad += std::fabs(eng.buffer()[i] - exact[i]) > tol * scale + 1e-12;
        }
        CHECK(bad == 0);
        // Identical bits on every rank: compare against rank 0's copy.
        std::vector<float> root(eng.buffer(), eng.buffer() + 5000);
        MPI_Bcast(root.data(), 5000, MPI_FLOAT, 0, MPI_COMM_WORLD);
        CHECK(std::equal(root.begin(), root.end(), eng.buffer()));
    }
    topo.destroy();
}

TEST_CASE("hierarchical refuses nodes of unequal size; auto falls back to flat", "[allreduce]") {
    const int W = world_size();
    if (W < 3) return;
    // Split into a node of 2 ranks and the rest: unequal when W != 4.
    int R = world_rank();
    MPI_Comm node;
    MPI_Comm_split(MPI_COMM_WORLD, R < 2 ? 0 : 1, R, &node);
    Topology t;
    t.world = MPI_COMM_WORLD;
    t.rank = R;
    t.size = W;
    t.node = node;
    MPI_Comm_rank(node, &t.local_rank);
    MPI_Comm_size(node, &t.local_size);
    t.node_index = R < 2 ? 0 : 1;
    t.num_nodes = 2;
    MPI_Comm_split(MPI_COMM_WORLD, t.local_rank, t.node_index, &t.cross);
    if (W != 4) {
        CHECK_THROWS_WITH(AllreduceEngine(AllreduceAlgo::hierarchical, t, 10), Catch::Contains("same number of ranks on every node"));
        AllreduceEngine a(AllreduceAlgo::automatic, t, 10);
        CHECK(a.algo() == AllreduceAlgo::flat);
    }
    t.destroy();
}

TEST_CASE("MPI reduce-scatter and all-gather with uneven blocks, float32 and bf16", "[comm]") {
    const int R = world_rank(), W = world_size();
    MpiCommunicator comm(MPI_COMM_WORLD);
    std::vector<size_t> counts(W);
    size_t total = 0;
    for (int q = 0; q < W; ++q) total += counts[q] = (size_t)(q * 3 + 1);
    std::vector<float> send(total), recv(counts[R]), all(total);
    for (size_t i = 0; i < total; ++i) send[i] = input(R, i);
    comm.reduce_scatter_sum(send.data(), recv.data(), counts.data(), DType::f32);
    size_t first = 0;
    for (int q = 0; q < R; ++q) first += counts[q];
    long wrong = 0;
    for (size_t i = 0; i < counts[R]; ++i) {
        float want = 0;
        for (int q = 0; q < W; ++q) want += input(q, first + i);
        wrong += recv[i] != want;
    }
    comm.allgather(recv.data(), all.data(), counts.data(), DType::f32);
    for (size_t i = 0; i < total; ++i) {
        float want = 0;
        for (int q = 0; q < W; ++q) want += input(q, i);
        wrong += all[i] != want;
    }
    std::vector<bf16> s16(total), r16(counts[R]), a16(total);
    for (size_t i = 0; i < total; ++i) s16[i] = float_to_bf16(input(R, i));
    comm.reduce_scatter_sum(s16.data(), r16.data(), counts.data(), DType::bf16);
    comm.allgather(r16.data(), a16.data(), counts.data(), DType::bf16);
    for (size_t i = 0; i < total; ++i) {
        float want = 0;
        for (int q = 0; q < W; ++q) want += input(q, i);
        wrong += bf16_to_float(a16[i]) != want;
    }
    CHECK(wrong == 0);
}

// A hook-driven "backward" that writes the layout's views last to first, as a model would.
TEST_CASE("GradSync: buckets cover the buffer once, overlap or not, same result", "[gradsync]") {
    const int R = world_rank(), W = world_size();
    ParamLayout layout;
    for (int l = 0; l < 5; ++l) {
        layout.add("w" + std::to_string(l), {100 + 37 * l, 13}, true);
        layout.add("b" + std::to_string(l), {100 + 37 * l}, false);
    }
    Topology topo = Topology::create(MPI_COMM_WORLD, 0);
    for (bool overlap : {false, true}) {
        for (double mb : {0.001, 0.01, 100.0}) {
            AllreduceEngine eng(AllreduceAlgo::automatic, topo, layout.total, 1024);
            GradSync sync(eng, layout, mb, DType::f32, overlap);
            size_t covered = 0, expect_end = layout.total;
            for (auto& b : sync.buckets()) {  // contiguous, from the end down
                CHECK(b.end == expect_end);
                covered += b.end - b.begin;
                expect_end = b.begin;
            }
            CHECK(covered == layout.total);
            for (int step = 0; step < 3; ++step) {
                sync.begin_step();
                float* g = sync.grads();
                for (size_t v = layout.views.size(); v-- > 0;) {
                    const ParamView& pv = layout.views[v];
                    for (size_t i = 0; i < pv.size; ++i) g[pv.offset + i] += input(R + step, pv.offset + i);
                    sync.grads_ready_from(pv.offset);
                }
                sync.finish();
                long wrong = 0;
                for (size_t i = 0; i < layout.total; ++i) {
                    float want = 0;
                    for (int q = 0; q < W; ++q) want += input(q + step, i);
                    wrong += g[i] != want;
                }
                INFO("overlap " << overlap << " bucket-mb " << mb << " step " << step);
                CHECK(wrong == 0);
            }
        }
    }
    topo.destroy();
}

// Node shapes for the sharded tests: one node of every rank, one rank a node, two-rank nodes.
static std::vector<int> shard_shapes(int W) {
    std::vector<int> rpn = {0};
    if (W > 1) rpn.push_back(1);
    if (W > 2 && W % 2 == 0) rpn.push_back(2);
    return rpn;
}

// --shard-optimizer's collectives: buckets (some inside one shard, some across several, the first
// also holding control floats) reduce-scattered through GradSync, with and without overlap, in
// float32 and bf16, flat, hierarchical and auto (small buckets flat, large ones through the
// window), on every node shape; every rank receives exactly its shard's sums and the control
// floats' sums, and the all-gather of the shards gives every rank the whole buffer.
TEST_CASE("sharded engine: buckets reduce-scattered into each rank's shard, then all-gathered", "[allreduce][shard]") {
    const int R = world_rank(), W = world_size();
    ParamLayout layout;
    for (int l = 0; l < 4; ++l) layout.add("w" + std::to_string(l), {50 + 29 * l, 7}, true);
    const size_t control = 3, total = layout.total;
    const Span mine = shard_span(total, R, W);
    auto sum = [&](size_t i) {
        float s = 0;
        for (int q = 0; q < W; ++q) s += input(q, i);
        return s;
    };
    for (int rpn : shard_shapes(W)) {
        Topology topo = Topology::create(MPI_COMM_WORLD, rpn);
        for (AllreduceAlgo algo : {AllreduceAlgo::flat, AllreduceAlgo::hierarchical, AllreduceAlgo::automatic}) {
            for (DType wire : {DType::f32, DType::bf16}) {
                for (bool overlap : {false, true}) {
                    for (double mb : {0.0005, 0.004, 100.0}) {
                        AllreduceEngine eng(algo, topo, total + control, /*threshold_bytes=*/2048);
                        std::vector<float> shard(std::max<size_t>(1, mine.size()), -1.0f);
                        eng.shard(total, shard.data());
                        GradSync sync(eng, layout, mb, wire, overlap, control);
                        sync.begin_step();
                        float* g = sync.grads();
                        for (size_t i = 0; i < total + control; ++i) g[i] = input(R, i);
                        for (size_t v = layout.views.size(); v-- > 0;) sync.grads_ready_from(layout.views[v].offset);
                        sync.finish();
                        long wrong = 0;
                        for (size_t i = 0; i < mine.size(); ++i) wrong += shard[i] != sum(mine.begin + i);
                        for (size_t i = total; i < total + control; ++i) wrong += g[i] != sum(i);
                        // The parameters' all-gather: each rank's shard written by its owner alone.
                        std::vector<float> params(total, 0.0f);
                        for (size_t i = mine.begin; i < mine.end; ++i) params[i] = sum(i) + (float)R;
                        eng.gather_shards(params.data());
                        for (int q = 0; q < W; ++q) {
                            const Span s = shard_span(total, q, W);
                            for (size_t i = s.begin; i < s.end; ++i) wrong += params[i] != sum(i) + (float)q;
                        }
                        INFO(name_of(algo) << " rpn=" << rpn << " wire " << dtype_name(wire) << " overlap " << overlap
                                           << " bucket-mb " << mb << " buckets " << sync.num_buckets());
                        CHECK(wrong == 0);
                    }
                }
            }
        }
        topo.destroy();
    }
}

// The hierarchical reduce-scatter adds each element in the order the hierarchical all-reduce
// does (local rank order in the node; across two nodes a+b either way), so on such shapes a
// sharded run's gradient sums are bit-identical to the replicated run's, for inputs whose sums
// round (fractions of mixed magnitude, not the exact small integers above).
TEST_CASE("sharded hierarchical sums equal the replicated hierarchical all-reduce bit for bit", "[allreduce][shard]") {
    const int R = world_rank(), W = world_size();
    const size_t total = 20000, control = 4;
    const Span mine = shard_span(total, R, W);
    auto value = [](int r, size_t i) { return std::sin(0.37f * (float)i + 1.3f * (float)r) * std::ldexp(1.0f, (int)(i % 13) - 6); };
    std::vector<int> shapes = {0};
    if (W % 2 == 0 && W > 2) shapes.push_back(W / 2);  // two nodes
    for (int rpn : shapes) {
        Topology topo = Topology::create(MPI_COMM_WORLD, rpn);
        for (DType wire : {DType::f32, DType::bf16}) {
            AllreduceEngine rep(AllreduceAlgo::hierarchical, topo, total + control);
            AllreduceEngine sha(AllreduceAlgo::hierarchical, topo, total + control);
            std::vector<float> shard(std::max<size_t>(1, mine.size()), 0.0f);
            sha.shard(total, shard.data());
            for (size_t i = 0; i < total + control; ++i) rep.buffer()[i] = sha.buffer()[i] = value(R, i);
            // Buckets as GradSync cuts them, from the end; the first holds the control floats. Its
            // 6016 floats cut into L slices at other points than its 6012 sharded ones, so the
            // ranks that sum an element differ between the two paths (from 4 ranks a node).
            for (size_t end = total + control, begin; end > 0; end = begin) {
                begin = end > 6016 ? end - 6016 : 0;
                rep.run(begin, end - begin, wire);
                sha.run(begin, end - begin, wire);
            }
            long differ = 0;
            for (size_t i = 0; i < mine.size(); ++i) differ += shard[i] != rep.buffer()[mine.begin + i];
            INFO("rpn=" << rpn << " wire " << dtype_name(wire));
            CHECK(differ == 0);
        }
        topo.destroy();
    }
}

TEST_CASE("gather_blocks and scatter_blocks move uneven blocks to and from the root", "[comm][shard]") {
    const int R = world_rank(), W = world_size();
    MpiCommunicator comm(MPI_COMM_WORLD);
    std::vector<size_t> counts(W);
    size_t total = 0;
    for (int q = 0; q < W; ++q) total += counts[q] = (size_t)(q % 3) * 5;  // some ranks send nothing
    size_t first = 0;
    for (int q = 0; q < R; ++q) first += counts[q];
    std::vector<float> mine(std::max<size_t>(1, counts[R]));
    for (size_t i = 0; i < counts[R]; ++i) mine[i] = (float)(first + i);
    const int root = W - 1;
    std::vector<float> at_root(R == root ? std::max<size_t>(1, total) : 1, -1.0f);
    comm.gather_blocks(mine.data(), at_root.data(), counts.data(), root);
    long wrong = 0;
    if (R == root)
        for (size_t i = 0; i < total; ++i) wrong += at_root[i] != (float)i;
    std::vector<float> back(std::max<size_t>(1, counts[R]), -1.0f);
    if (R == root)
        for (size_t i = 0; i < total; ++i) at_root[i] = 2.0f * (float)i;
    comm.scatter_blocks(at_root.data(), back.data(), counts.data(), root);
    for (size_t i = 0; i < counts[R]; ++i) wrong += back[i] != 2.0f * (float)(first + i);
    comm.allreduce(&wrong, 1, ReduceOp::sum);
    CHECK(wrong == 0);
}
