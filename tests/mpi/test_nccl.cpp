// NcclCommunicator on device buffers, against the same exact small-integer sums as the MPI tests.
// Each rank uses GPU (local rank mod GPUs). Without NCCL in the build or without a GPU the test
// prints a SKIPPED line (tests/run_all.sh shows it) and checks nothing.
#include "dptrain/comm/communicator.h"
#include "dptrain/core/error.h"
#include "dptrain/comm/topology.h"
#include "dptrain/backend/device.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#ifdef DPTRAIN_HAVE_NCCL
#include "dptrain/core/bf16.h"
#include "dptrain/comm/nccl.h"

#include <cuda_runtime.h>
#endif

using namespace dptrain;

static void skip(const std::string& why) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    if (r == 0) std::printf("SKIPPED [nccl] NcclCommunicator tests: %s\n", why.c_str());
}

#ifdef DPTRAIN_HAVE_NCCL
// This rank's visible GPUs when every rank has one; otherwise prints the SKIPPED line, returns 0.
static int gpus_or_skip() {
    std::string why;
    int gpus = gpu_count(&why);
    int min_gpus = gpus;
    MPI_Allreduce(MPI_IN_PLACE, &min_gpus, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (min_gpus <= 0) {
        skip("no GPU (" + why + ")");
        return 0;
    }
    return gpus;
}
#endif

// Values of h (on rank R of W) that are not the sum over ranks of input(q, i): the test's inputs
// are small integers, so the sums are exact in any order.
template <class Input>
static long wrong_sums(const std::vector<float>& h, int W, Input&& input) {
    long wrong = 0;
    for (size_t i = 0; i < h.size(); ++i) {
        float want = 0;
        for (int q = 0; q < W; ++q) want += input(q, i);
        wrong += h[i] != want;
    }
    return wrong;
}

TEST_CASE("NCCL communicator: all-reduce, reduce-scatter, all-gather, broadcast on device", "[nccl][cuda]") {
#ifndef DPTRAIN_HAVE_NCCL
    skip("built without NCCL");
#else
    const int gpus = gpus_or_skip();
    if (gpus <= 0) return;
    Topology topo = Topology::create(MPI_COMM_WORLD, 0);
    REQUIRE(cudaSetDevice(topo.local_rank % gpus) == cudaSuccess);
    const int R = topo.rank, W = topo.size;
    NcclCommunicator nc(MPI_COMM_WORLD);
    auto input = [](int r, size_t i) { return (float)((int)((r * 7 + i * 3) % 11) - 5); };
    for (size_t n : {size_t(1), size_t(1021), size_t(1) << 20}) {
        std::vector<float> h(n);
        for (size_t i = 0; i < n; ++i) h[i] = input(R, i);
        float* d = nullptr;
        REQUIRE(cudaMalloc(&d, n * sizeof(float)) == cudaSuccess);
        cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
        nc.allreduce_sum(d, n, DType::f32);
        nc.wait();
        cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
        CHECK(wrong_sums(h, W, input) == 0);
        cudaFree(d);
    }
    // Uneven and even blocks, float32 and bf16.
    for (bool even : {false, true}) {
        std::vector<size_t> counts(W);
        size_t total = 0;
        for (int q = 0; q < W; ++q) total += counts[q] = even ? 5 : (size_t)(q * 3 + 1);
        size_t first = 0;
        for (int q = 0; q < R; ++q) first += counts[q];
        for (DType t : {DType::f32, DType::bf16}) {
            size_t es = dtype_size(t);
            std::vector<char> send(total * es), all(total * es);
            for (size_t i = 0; i < total; ++i) {
                if (t == DType::f32) reinterpret_cast<float*>(send.data())[i] = input(R, i);
                else reinterpret_cast<bf16*>(send.data())[i] = float_to_bf16(input(R, i));
            }
            void *ds = nullptr, *dr = nullptr, *da = nullptr;
            cudaMalloc(&ds, total * es);
            cudaMalloc(&dr, counts[R] * es + 1);
            cudaMalloc(&da, total * es);
            cudaMemcpy(ds, send.data(), total * es, cudaMemcpyHostToDevice);
            nc.reduce_scatter_sum(ds, dr, counts.data(), t);
            nc.allgather(dr, da, counts.data(), t);
            nc.wait();
            cudaMemcpy(all.data(), da, total * es, cudaMemcpyDeviceToHost);
            long wrong = 0;
            for (size_t i = 0; i < total; ++i) {
                float want = 0;
                for (int q = 0; q < W; ++q) want += input(q, i);
                float got = t == DType::f32 ? reinterpret_cast<float*>(all.data())[i]
                                            : bf16_to_float(reinterpret_cast<bf16*>(all.data())[i]);
                wrong += got != want;
            }
            INFO((even ? "even" : "uneven") << " blocks, " << dtype_name(t));
            CHECK(wrong == 0);
            cudaFree(ds);
            cudaFree(dr);
            cudaFree(da);
        }
    }
    long v = R == W - 1 ? 42 : 0;
    long* dv = nullptr;
    cudaMalloc(&dv, sizeof v);
    cudaMemcpy(dv, &v, sizeof v, cudaMemcpyHostToDevice);
    nc.broadcast(dv, sizeof v, W - 1);
    nc.wait();
    cudaMemcpy(&v, dv, sizeof v, cudaMemcpyDeviceToHost);
    CHECK(v == 42);
    cudaFree(dv);
    // In place over equal blocks (DeviceStep's hierarchical sum), the two halves on two
    // communicators that share one stream: the all-gather must run after the reduce-scatter.
    {
        NcclCommunicator shared(MPI_COMM_WORLD, nc.stream());
        REQUIRE(shared.stream() == nc.stream());
        const size_t block = 333, n = block * (size_t)W;
        std::vector<float> h(n);
        for (size_t i = 0; i < n; ++i) h[i] = input(R, i);
        float* d = nullptr;
        REQUIRE(cudaMalloc(&d, n * sizeof(float)) == cudaSuccess);
        cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
        shared.reduce_scatter_block(d, block, DType::f32);
        nc.allgather_block(d, block, DType::f32);
        while (!(shared.poll() & nc.poll())) {
        }
        cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
        CHECK(wrong_sums(h, W, input) == 0);
        cudaFree(d);
    }
    nc.barrier();
    topo.destroy();
#endif
}

#ifdef DPTRAIN_HAVE_NCCL
#include "dptrain/backend/cuda/gpt.h"
#include "dptrain/backend/cuda/device_step.h"
#include "dptrain/model/optim.h"
#endif

// DeviceStep's NCCL path (buckets started by backward's hooks, the events between the model's
// stream and NCCL's, the sums, the wait), and with the state sharded (--shard-optimizer: each
// bucket reduced to its shards' owners, the norm's squares gathered, the parameters all-gathered):
// every rank trains the same GPT on the same windows, so the summed gradient is W times one
// rank's; with the loss scaled by 1/W the run must equal one process without NCCL (W = 1: a
// copy, bit for bit; W > 1: sums of W equal terms, 1e-5).
TEST_CASE("DeviceStep over NCCL trains as one process does, flat, hierarchical and sharded", "[nccl][cuda]") {
#ifndef DPTRAIN_HAVE_NCCL
    skip("built without NCCL");
#else
    const int gpus = gpus_or_skip();
    if (gpus <= 0) return;
    Topology real = Topology::create(MPI_COMM_WORLD, 0);
    const int W = real.size;
    // With 4 or more ranks (and GPUs), hierarchical also runs on 2 simulated nodes, where the
    // cross-node sums have more than one rank and each rank's block sits at its own offset.
    Topology two = W >= 4 && W % 2 == 0 ? Topology::create(MPI_COMM_WORLD, W / 2) : Topology();
    GptConfig cfg;
    cfg.vocab_size = 29;
    cfg.block_size = 12;
    cfg.n_layer = 1;
    cfg.n_head = 2;
    cfg.n_embd = 16;
    const int B = 3, T = cfg.block_size;
    const int dev = real.host_rank % gpus;
    std::vector<int> tokens((size_t)B * (T + 1));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (int)((i * 7 + 3) % cfg.vocab_size);
    ModelBatch in;
    in.B = B;
    in.tokens = tokens.data();
    in.stride = T + 1;
    struct Case {
        AllreduceAlgo algo;
        const Topology* topo;
        bool shard;
    };
    std::vector<Case> cases = {{AllreduceAlgo::flat, &real, false},
                               {AllreduceAlgo::hierarchical, &real, false},
                               {AllreduceAlgo::flat, &real, true}};
    if (two.node != MPI_COMM_NULL) cases.push_back({AllreduceAlgo::hierarchical, &two, false});
    for (const Case& c : cases) {
        const bool flat = c.algo == AllreduceAlgo::flat;
        INFO("--allreduce " << (flat ? "flat" : "hierarchical") << " over " << c.topo->num_nodes << " node(s)"
                            << (c.shard ? ", sharded" : ""));
        CudaGpt a(cfg, B, dev), b(cfg, B, dev);
        a.set_resident(true);
        b.set_resident(true);
        const size_t P = a.num_params();
        std::vector<float> p(P), unused(P);
        a.init(p.data(), 8);
        DeviceStep::Hyper h;
        const Span mine = c.shard ? shard_span(P, c.topo->rank, c.topo->size) : Span{0, P};
        Optimizer oa(h, a.layout(), mine);
        Optimizer ob(h, b.layout());
        // Small buckets, so that backward's hooks start several sums while it goes on: 523 values
        // each and a last one of 307 (both prime), so with more than one rank per node
        // hierarchical sums values past the blocks too.
        DeviceStep::Sum how;
        how.topo = c.topo;
        how.algo = c.algo;
        how.bucket_mb = 523.0 * sizeof(float) / (1 << 20);
        how.nccl_for_one = true;
        how.shard = c.shard;
        DeviceStep sa(a, a.layout(), h, how), sb(b, b.layout(), h);
        const char* path = c.shard ? "to its shards' owners" : flat ? "NCCL all-reduce" : "NCCL hierarchical";
        CHECK(sa.describe().find(path) != std::string::npos);
        sa.upload(p.data(), oa);
        sb.upload(p.data(), ob);
        const float scale = 1.0f / (B * T);
        for (int t = 1; t <= 5; ++t) {
            INFO("step " << t);
            double la = a.forward(nullptr, in, nullptr), lb = b.forward(nullptr, in, nullptr);
            CHECK(la == lb);  // the same parameters going in
            a.backward(unused.data(), nullptr, in, scale / W, &sa);  // the buckets start during backward
            b.backward(unused.data(), nullptr, in, scale, nullptr);
            sa.wait_backward();
            sa.allreduce();
            double na = sa.norm(), nb = sb.norm();
            if (W == 1) CHECK(na == nb);
            else CHECK(na == Approx(nb).epsilon(1e-5));
            sa.update(na, 1.0, 1e-3, t);
            sb.update(nb, 1.0, 1e-3, t);
        }
        std::vector<float> pa(P), pb(P);
        sa.download(pa.data(), oa);
        sb.download(pb.data(), ob);
        // Each rank's shard of the state as the whole run's at those floats (W = 1: all of it).
        const std::vector<float> m_want(ob.m().begin() + mine.begin, ob.m().begin() + mine.end);
        if (W == 1) CHECK(oa.m() == m_want);
        double mdiff = 0, mbig = 0;
        for (size_t i = 0; i < m_want.size(); ++i) {
            mdiff = std::max(mdiff, (double)std::fabs(oa.m()[i] - m_want[i]));
            mbig = std::max(mbig, (double)std::fabs(m_want[i]));
        }
        INFO("first moment: largest " << mbig << ", largest difference " << mdiff);
        CHECK(mdiff <= 1e-5 * mbig);
        double diff = 0, big = 0;
        for (size_t i = 0; i < P; ++i) {
            diff = std::max(diff, (double)std::fabs(pa[i] - pb[i]));
            big = std::max(big, (double)std::fabs(pb[i]));
        }
        INFO("largest parameter " << big << ", largest difference " << diff);
        if (W == 1) CHECK(pa == pb);
        else CHECK(diff <= 1e-5 * big);
    }
    real.destroy();
    two.destroy();
#endif
}
