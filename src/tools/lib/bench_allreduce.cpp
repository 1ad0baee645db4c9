// dptrain-bench allreduce: dptrain's all-reduce algorithms beside Open MPI's MPI_Allreduce in one
// run, sizes interleaved so machine noise hits all alike; tables in the nccl-tests format, then
// busbw against MPI_Allreduce. Not for: training (comm/).
//   mpirun -np N dptrain-bench allreduce [-b 4K] [-e 256M] [-f 4] [-n 20] [-w 3]
//          [--ranks-per-node K] [--dtype float32|bf16] [--sharded] [-J FILE]
// --sharded times the sharded optimizer's exchange (reduce-scatter, shard into the parameters,
// all-gather) against MPI_Reduce_scatter + MPI_Allgatherv.
// busbw = algbw * 2(n-1)/n, the per-link traffic of an optimal all-reduce. Inputs are small
// integers, so sums are exact in any order and checkable.
#include "dptrain/tools/bench.h"

#include "dptrain/comm/allreduce.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/comm/topology.h"
#include "dptrain/core/check.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/core/json.h"
#include "dptrain/model/model.h"
#include "dptrain/tools/cli.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace dptrain {

namespace po = boost::program_options;

namespace {

// "4K", "256M", "1G", "512": bytes.
size_t parse_size(const std::string& text, const char* option) {
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    const std::string unit = end ? end : "";
    if (unit == "K" || unit == "k") v *= 1024;
    else if (unit == "M" || unit == "m") v *= 1024 * 1024;
    else if (unit == "G" || unit == "g") v *= 1024.0 * 1024 * 1024;
    else if (!unit.empty() || end == text.c_str()) v = -1;
    if (!(v >= 0) || v > 1e15)
        throw po::error(strfmt("%s '%s' is not a size: give bytes, or K, M or G of them (4K, 256M)", option,
                               text.c_str()));
    return (size_t)v;
}

struct Args {
    size_t minb = 4 << 10, maxb = 256 << 20;
    double factor = 4;
    int iters = 20, warmup = 3, rpn = 0;
    DType dtype = DType::f32;
    bool sharded = false;
    std::string json;
};

Args parse(int argc, char** argv) {
    Args a;
    std::string minb = "4K", maxb = "256M", dtype = "float32";
    po::options_description desc;
    desc.add_options()(",b", po::value(&minb))(",e", po::value(&maxb))(",f", po::value(&a.factor))(
        ",n", po::value(&a.iters))(",w", po::value(&a.warmup))("ranks-per-node", po::value(&a.rpn))(
        "dtype", po::value(&dtype))("sharded", po::bool_switch(&a.sharded))(",J", po::value(&a.json));
    parse_subcommand(argc, argv, desc);
    a.minb = parse_size(minb, "-b");
    a.maxb = parse_size(maxb, "-e");
    if (dtype == "bf16") a.dtype = DType::bf16;
    else if (dtype != "float32") throw po::error("--dtype '" + dtype + "' is unknown; use float32 or bf16");
    if (a.minb < 4 || a.maxb < a.minb)
        throw po::error(strfmt("-b %zu and -e %zu: sizes from at least 4 bytes, -e no smaller than -b", a.minb, a.maxb));
    if (a.sharded && a.dtype != DType::f32)
        throw po::error("--sharded measures float32 (the gradients' type); leave --dtype out");
    if (!(a.factor > 1) || a.iters < 1 || a.warmup < 0 || a.rpn < 0)
        throw po::error("-f must be above 1, -n at least 1, -w and --ranks-per-node at least 0");
    return a;
}

struct Contender {
    std::string name;
    std::unique_ptr<AllreduceEngine> engine;  // null: MPI_Allreduce itself
    std::vector<float> ref;                   // the reference's own buffer (float32 view)
    std::vector<bf16> ref16;
    // --sharded: this rank's shard, the all-gathered parameters, the shards' sizes and places;
    // `sharded` also marks the raw MPI peer.
    bool sharded = false;
    int rank = 0;
    std::vector<float> recv, params;
    std::vector<size_t> counts, displs;
    std::vector<int> icounts, idispls;
    struct Row {
        size_t bytes, count;
        double us, algbw, busbw;
        long wrong;
    };
    std::vector<Row> rows;

    void* data(DType t) {
        if (engine) return engine->buffer();
        return t == DType::f32 ? (void*)ref.data() : (void*)ref16.data();
    }
    // The peer is MPI_Allreduce as an application calls it, not through dptrain's communicator.
    void call(size_t n, DType t) {
        if (sharded) {
            call_sharded(n);
            return;
        }
        if (engine) {
            engine->run(0, n, t);
            return;
        }
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data(t), (int)n, mpi_type(t), mpi_sum_op(t), MPI_COMM_WORLD));
    }
    void prepare_shards(size_t n, int my_rank, int ranks);
    void call_sharded(size_t n);
    // What the first call left: the sums, or the all-gathered parameters.
    float result(size_t i, DType t) {
        if (sharded) return params[i];
        if (engine || t == DType::f32) return static_cast<float*>(data(DType::f32))[i];
        return bf16_to_float(ref16[i]);
    }
};

// Collective, before a size's calls: the shards of n floats, every buffer sized.
void Contender::prepare_shards(size_t n, int my_rank, int ranks) {
    rank = my_rank;
    counts.assign((size_t)ranks, 0);
    displs.assign((size_t)ranks, 0);
    icounts.assign((size_t)ranks, 0);
    idispls.assign((size_t)ranks, 0);
    for (int q = 0; q < ranks; ++q) {
        const Span s = shard_span(n, q, ranks);
        counts[q] = s.size();
        displs[q] = s.begin;
        icounts[q] = (int)s.size();  // sizes up to -e, within int
        idispls[q] = (int)s.begin;
    }
    recv.assign(std::max<size_t>(1, counts[rank]), 0.0f);
    params.assign(std::max<size_t>(1, n), 0.0f);
    if (engine) engine->shard(n, recv.data());
}

// Reduce-scatter, the shard into the parameters (as the optimizer does), all-gather.
void Contender::call_sharded(size_t n) {
    if (engine) engine->run(0, n, DType::f32);
    else MPI_CHECK(MPI_Reduce_scatter(ref.data(), recv.data(), icounts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    std::memcpy(params.data() + displs[rank], recv.data(), counts[rank] * sizeof(float));
    if (engine) engine->gather_shards(params.data());
    else
        MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, params.data(), icounts.data(), idispls.data(),
                                 MPI_FLOAT, MPI_COMM_WORLD));
}

float input(int r, size_t i) { return (float)((int)((r * 7 + i * 3) % 11) - 5); }

// Median seconds per call, max over ranks. Big messages get fewer iterations (~1 s a size at most).
template <typename Fn>
double time_calls(MpiCommunicator& world, Fn&& fn, int warmup, int iters) {
    double t0 = now_seconds();
    fn();
    double first = now_seconds() - t0;
    world.allreduce(&first, 1, ReduceOp::max);
    if (first * (iters + warmup) > 1.0) {
        iters = std::max(3, (int)(1.0 / first));
        warmup = 1;
    }
    for (int i = 0; i < warmup; ++i) fn();
    std::vector<double> t(iters);
    for (int i = 0; i < iters; ++i) {
        world.barrier();
        double s = now_seconds();
        fn();
        t[i] = now_seconds() - s;
    }
    std::sort(t.begin(), t.end());
    double med = t[iters / 2];
    world.allreduce(&med, 1, ReduceOp::max);
    return med;
}

// MPI_Allreduce, flat and hierarchical over the (simulated) topology, and with simulated nodes the
// shared-memory path over the real node. --sharded: MPI's pair and the engine's sharded paths.
std::vector<Contender> contenders(const Args& a, size_t maxn, const Topology& topo, const Topology& real) {
    std::vector<Contender> cs(a.sharded ? 4 : 3);
    cs[0].name = "MPI_Allreduce";
    if (a.dtype == DType::f32) cs[0].ref.assign(maxn, 0.0f);
    else cs[0].ref16.assign(maxn, 0);
    size_t k = 1;
    if (a.sharded) {
        cs[k].name = "MPI_RS+AG";
        cs[k].sharded = true;
        cs[k++].ref.assign(maxn, 0.0f);
    }
    cs[k].name = a.sharded ? "flat-shard" : "flat";
    auto engine = [&](AllreduceAlgo algo, const Topology& t) {
        return std::make_unique<AllreduceEngine>(algo, t, maxn, AllreduceEngine::kDefaultThreshold,
                                                 a.dtype == DType::bf16);
    };
    cs[k++].engine = engine(AllreduceAlgo::flat, topo);
    cs[k].name = a.sharded ? "hier-shard" : "hierarchical";
    cs[k].engine = engine(AllreduceAlgo::hierarchical, topo);
    for (size_t j = 2; a.sharded && j < cs.size(); ++j) cs[j].sharded = true;
    if (a.rpn > 0 && real.num_nodes == 1 && !a.sharded) {
        cs.emplace_back();
        cs.back().name = "shm";
        cs.back().engine = engine(AllreduceAlgo::hierarchical, real);
    }
    return cs;
}

void measure(MpiCommunicator& world, Contender& c, const Args& a, size_t bytes) {
    const DType t = a.dtype;
    const int rank = world.rank(), size = world.size();
    const size_t n = bytes / dtype_size(t);
    void* d = c.data(t);
    for (size_t i = 0; i < n; ++i) {
        if (t == DType::f32) static_cast<float*>(d)[i] = input(rank, i);
        else static_cast<bf16*>(d)[i] = float_to_bf16(input(rank, i));
    }
    if (c.engine && t == DType::bf16)  // engines hold float32 and convert on the wire
        for (size_t i = 0; i < n; ++i) c.engine->buffer()[i] = input(rank, i);
    if (c.sharded) c.prepare_shards(n, rank, size);
    c.call(n, t);
    long wrong = 0;
    for (size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int q = 0; q < size; ++q) want += input(q, i);
        wrong += c.result(i, t) != want;
    }
    world.allreduce(&wrong, 1, ReduceOp::sum);
    // The values grow as calls keep summing in place; the cost does not.
    const double sec = time_calls(world, [&] { c.call(n, t); }, a.warmup, a.iters);
    const double algbw = bytes / sec / 1e9, bus = size > 1 ? 2.0 * (size - 1) / size : 1.0;
    c.rows.push_back({bytes, n, sec * 1e6, algbw, algbw * bus, wrong});
}

// Rank 0; returns the wrong results over all.
long print_tables(const std::vector<Contender>& cs, DType t) {
    long total_wrong = 0;
    for (const Contender& c : cs) {
        std::printf("\n# %s\n#%12s %12s %8s %6s %11s %8s %8s %7s\n", c.name.c_str(), "size(B)", "count", "type", "redop",
                    "time(us)", "algbw", "busbw", "#wrong");
        for (auto& r : c.rows) {
            std::printf(" %12zu %12zu %8s %6s %11.1f %8.2f %8.2f %7ld\n", r.bytes, r.count, dtype_name(t), "sum", r.us,
                        r.algbw, r.busbw, r.wrong);
            total_wrong += r.wrong;
        }
    }
    std::printf("\n# busbw (GB/s) and ratio to MPI_Allreduce\n#%12s", "size(B)");
    for (const Contender& c : cs) std::printf(" %14s", c.name.c_str());
    for (size_t k = 1; k < cs.size(); ++k) std::printf(" %8s", ("x" + cs[k].name.substr(0, 7)).c_str());
    std::printf("\n");
    for (size_t i = 0; i < cs[0].rows.size(); ++i) {
        std::printf(" %12zu", cs[0].rows[i].bytes);
        for (const Contender& c : cs) std::printf(" %14.2f", c.rows[i].busbw);
        for (size_t k = 1; k < cs.size(); ++k) std::printf(" %8.2f", cs[k].rows[i].busbw / cs[0].rows[i].busbw);
        std::printf("\n");
    }
    std::printf("# wrong results: %ld%s\n", total_wrong, total_wrong ? "  <-- FAILED" : "");
    return total_wrong;
}

// Rank 0, -J: one JSON row a line, readable by grep and JSON parsers alike.
void write_json(const std::string& path, const std::vector<Contender>& cs, DType t, int ranks, int ranks_per_node) {
    std::string text = "[\n";
    for (const Contender& c : cs)
        for (auto& r : c.rows)
            text += (text.size() > 2 ? ",\n  " : "  ") +
                    json_text(Json{{"algorithm", c.name}, {"ranks", ranks}, {"ranks_per_node", ranks_per_node},
                                   {"size", r.bytes}, {"count", r.count}, {"type", dtype_name(t)},
                                   {"time_us", json_number(r.us, 7)}, {"algbw", json_number(r.algbw, 5)},
                                   {"busbw", json_number(r.busbw, 5)}, {"wrong", r.wrong}});
    text += "\n]\n";
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f || std::fputs(text.c_str(), f) < 0 || std::fclose(f) != 0)
        std::fprintf(stderr, "dptrain-bench: error: cannot write -J %s\n", path.c_str());
}

} // namespace

int bench_allreduce(int argc, char** argv) {
    MpiCommunicator world(MPI_COMM_WORLD);
    const int rank = world.rank(), size = world.size();
    const Args a = parse(argc, argv);
    const DType t = a.dtype;
    Topology real, sim;
    std::vector<Contender> cs;
    if (!all_ok(MPI_COMM_WORLD, [&] {
            real = Topology::create(MPI_COMM_WORLD, 0);
            sim = a.rpn > 0 ? Topology::create(MPI_COMM_WORLD, a.rpn) : real;
            cs = contenders(a, a.maxb / dtype_size(t), a.rpn > 0 ? sim : real, real);
        }))
        return 2;
    const Topology& topo = a.rpn ? sim : real;
    if (rank == 0)
        std::printf("# dptrain-bench allreduce: %d ranks, %d %s node%s of %d, %s sum, median of %d iterations after %d "
                    "warm-up\n",
                    size, topo.num_nodes, a.rpn ? "simulated" : "real", topo.num_nodes == 1 ? "" : "s", topo.local_size,
                    dtype_name(t), a.iters, a.warmup);
    // Contenders take turns going first at each size: the first after a size change meets the
    // others' cache state, and a fixed order always favoured one.
    size_t turn = 0;
    for (size_t bytes = a.minb; bytes <= a.maxb; bytes = (size_t)(bytes * a.factor), ++turn)
        for (size_t k = 0; k < cs.size(); ++k) measure(world, cs[(k + turn) % cs.size()], a, bytes);
    long total_wrong = 0;
    if (rank == 0) {
        total_wrong = print_tables(cs, t);
        if (!a.json.empty()) write_json(a.json, cs, t, size, topo.local_size);
    }
    world.broadcast(&total_wrong, sizeof total_wrong, 0);
    cs.clear();
    if (a.rpn > 0) sim.destroy();
    real.destroy();
    return total_wrong ? 1 : 0;
}

const char* bench_usage() {
    return "usage: mpirun -np N dptrain-bench allreduce [-b 4K] [-e 256M] [-f 4] [-n 20] [-w 3]\n"
           "                        [--ranks-per-node K] [--dtype float32|bf16] [--sharded] [-J FILE]\n"
           "           every all-reduce algorithm beside MPI_Allreduce, sizes -b to -e by factors of -f, the\n"
           "           median of -n calls after -w warm-up ones; -J writes every row as JSON; --sharded: the\n"
           "           sharded optimizer's reduce-scatter + all-gather (flat, hierarchical) beside MPI's\n"
           "       mpirun -np N dptrain-bench io --data DIR [--batch-size 64] [--steps 0 = one epoch]\n"
           "                        [--modes direct,memory,collective] [--io-threads 1,4] [--shuffle-block 1]\n"
           "                        [--no-drop]\n"
           "           every reader beside a raw sequential read of the same shards, page cache dropped\n"
           "       dptrain-bench trace [--events 2000000] [--step-ms 0.6] [--buckets 1]\n"
           "           what the step instrumentation costs\n"
           "       dptrain-bench tokenizer --input TEXT [--encoder encoder.json --merges vocab.bpe]\n"
           "                        [--sp-model FILE] [--repeats 5]\n"
           "           GPT-2's BPE and a SentencePiece model: encode (cold and warm) and decode MB/s, one core\n"
           "       dptrain-bench matmul [--shapes 128x384,...,768x50257] [--rows 1,2,4,8] [--repeats 5]\n"
           "                        [--threads 1]\n"
           "           the CPU matmul_forward of few rows (decoding) beside one OpenBLAS sgemm of them and\n"
           "           one sgemv a row\n"
           "       dptrain-bench products [--dims 32,256,256,10] [--rows 128] [--micro-batches 4] [--repeats 5]\n"
           "                        [--threads 1]\n"
           "           an MLP step's matrix products for all rows at once and in micro-batches, beside the\n"
           "           same products as bare OpenBLAS sgemm calls: the floor of gradient accumulation's cost\n"
           "       dptrain-bench decode [--checkpoint PATH [--text FILE]] [--vocab 50257] [--block-size 1024]\n"
           "                        [--n-layer 12] [--n-head 12] [--n-embd 768] [--tokens 100]\n"
           "                        [--prompt-tokens 4] [--repeats 3] [--threads 1] [--streams 8]\n"
           "                        [--device cpu|cuda|auto]\n"
           "           a decoder with fp32 beside bf16 weights: greedy tokens/s for one sequence and for\n"
           "           --streams together (on a GPU also kernel by kernel against its CUDA graphs), and\n"
           "           where the two part; with --text, every window's next-token loss and argmax under both\n"
           "Exit 2 (with one line on stderr) for a bad argument.\n";
}

} // namespace dptrain
