// dptrain-bench: dptrain's own measurements, each beside its real peer in the same run.
//
// dptrain-bench allreduce: dptrain's all-reduce algorithms beside Open MPI's own MPI_Allreduce,
// measured in one run, sizes interleaved so machine noise hits all alike. Per algorithm a table
// in the nccl-tests format (size, count, type, redop, time, algbw, busbw, #wrong), then a
// summary of busbw against MPI_Allreduce.
//   mpirun -np N dptrain-bench allreduce [-b 4K] [-e 256M] [-f 4] [-n 20] [-w 3]
//          [--ranks-per-node K] [--dtype float32|bf16] [-J FILE]
// algbw = bytes / time; busbw = algbw * 2(n-1)/n, the traffic per link of an optimal all-reduce.
// Each algorithm's buffer is allocated and touched once; timed calls reuse it. Results are
// checked with small-integer inputs whose sums are exact in any order.
//
// dptrain-bench io: the input path (bench_io below).
// dptrain-bench trace: the cost of the step instrumentation (bench_trace below).
#include "dptrain/allreduce.h"
#include "dptrain/data.h"
#include "dptrain/error.h"
#include "dptrain/metrics.h"
#include "dptrain/topology.h"
#include "dptrain/trace.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace dptrain;

namespace {

size_t parse_size(const char* s) {
    char* end = nullptr;
    double v = std::strtod(s, &end);
    switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (size_t)v;
}

struct Args {
    size_t minb = 4 << 10, maxb = 256 << 20;
    double factor = 4;
    int iters = 20, warmup = 3, rpn = 0;
    DType dtype = DType::f32;
    std::string json;
};

bool parse(int argc, char** argv, Args* a) {
    if (argc < 2 || std::strcmp(argv[1], "allreduce") != 0) return false;
    for (int i = 2; i < argc; i += 2) {
        if (i + 1 >= argc) return false;
        const char* k = argv[i];
        const char* v = argv[i + 1];
        if (!std::strcmp(k, "-b")) a->minb = parse_size(v);
        else if (!std::strcmp(k, "-e")) a->maxb = parse_size(v);
        else if (!std::strcmp(k, "-f")) a->factor = std::atof(v);
        else if (!std::strcmp(k, "-n")) a->iters = std::atoi(v);
        else if (!std::strcmp(k, "-w")) a->warmup = std::atoi(v);
        else if (!std::strcmp(k, "--ranks-per-node")) a->rpn = std::atoi(v);
        else if (!std::strcmp(k, "-J")) a->json = v;
        else if (!std::strcmp(k, "--dtype")) {
            if (!std::strcmp(v, "bf16")) a->dtype = DType::bf16;
            else if (std::strcmp(v, "float32") != 0) return false;
        } else return false;
    }
    return a->minb >= 4 && a->maxb >= a->minb && a->factor > 1 && a->iters >= 1 && a->warmup >= 0 && a->rpn >= 0;
}

// One contender: an engine (or the raw MPI reference) and its results per size.
struct Contender {
    std::string name;
    std::unique_ptr<AllreduceEngine> engine;  // null: MPI_Allreduce itself
    std::vector<float> ref;                   // the reference's own buffer (float32 view)
    std::vector<bf16> ref16;
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
    void call(size_t n, DType t) {
        if (engine) {
            engine->run(0, n, t);
            return;
        }
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data(t), (int)n, mpi_type(t), mpi_sum_op(t), MPI_COMM_WORLD));
    }
};

float input(int r, size_t i) { return (float)((int)((r * 7 + i * 3) % 11) - 5); }

// Median seconds per call over iters calls after warmup, max over ranks. Big messages get fewer
// iterations so a size never takes more than about a second.
template <typename Fn>
double time_calls(Fn&& fn, int warmup, int iters) {
    double t0 = now_seconds();
    fn();
    double first = now_seconds() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (first * (iters + warmup) > 1.0) {
        iters = std::max(3, (int)(1.0 / first));
        warmup = 1;
    }
    for (int i = 0; i < warmup; ++i) fn();
    std::vector<double> t(iters);
    for (int i = 0; i < iters; ++i) {
        MPI_Barrier(MPI_COMM_WORLD);
        double s = now_seconds();
        fn();
        t[i] = now_seconds() - s;
    }
    std::sort(t.begin(), t.end());
    double med = t[iters / 2];
    MPI_Allreduce(MPI_IN_PLACE, &med, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return med;
}

} // namespace

int bench_io(int argc, char** argv);
int bench_trace(int argc, char** argv);

int bench_allreduce(int argc, char** argv) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    Args a;
    if (!parse(argc, argv, &a)) {
        if (rank == 0)
            std::fprintf(stderr, "usage: mpirun -np N dptrain-bench allreduce [-b 4K] [-e 256M] [-f 4] [-n 20] [-w 3] "
                                 "[--ranks-per-node K] [--dtype float32|bf16] [-J FILE]\n"
                                 "       mpirun -np N dptrain-bench io --data DIR [--batch-size B] [--steps S] "
                                 "[--modes direct,memory,collective] [--io-threads 1,4] [--shuffle-block 1,4096]\n"
                                 "       dptrain-bench trace [--events N]\n");
        return 2;
    }
    const DType t = a.dtype;
    const size_t maxn = a.maxb / dtype_size(t);
    Topology real, sim;
    std::vector<Contender> cs;
    bool ok = all_ok(MPI_COMM_WORLD, [&] {
        real = Topology::create(MPI_COMM_WORLD, 0);
        sim = a.rpn > 0 ? Topology::create(MPI_COMM_WORLD, a.rpn) : real;
        const Topology& topo = a.rpn > 0 ? sim : real;
        cs.push_back({"MPI_Allreduce", nullptr, {}, {}, {}});
        if (t == DType::f32) cs.back().ref.assign(maxn, 0.0f);
        else cs.back().ref16.assign(maxn, 0);
        cs.push_back({"flat", std::make_unique<AllreduceEngine>("flat", topo, maxn), {}, {}, {}});
        cs.push_back({"hierarchical", std::make_unique<AllreduceEngine>("hierarchical", topo, maxn), {}, {}, {}});
        // With simulated nodes, also the shared-memory path over the whole (real) node.
        if (a.rpn > 0 && real.num_nodes == 1)
            cs.push_back({"shm", std::make_unique<AllreduceEngine>("hierarchical", real, maxn), {}, {}, {}});
    });
    if (!ok) return 2;
    if (rank == 0)
        std::printf("# dptrain-bench allreduce: %d ranks, %d %s node%s of %d, %s sum, median of %d iterations after %d "
                    "warm-up\n",
                    size, (a.rpn ? sim : real).num_nodes, a.rpn ? "simulated" : "real",
                    (a.rpn ? sim : real).num_nodes == 1 ? "" : "s", (a.rpn ? sim : real).local_size, dtype_name(t),
                    a.iters, a.warmup);

    const double bus = size > 1 ? 2.0 * (size - 1) / size : 1.0;
    for (size_t bytes = a.minb; bytes <= a.maxb; bytes = (size_t)(bytes * a.factor)) {
        size_t n = bytes / dtype_size(t);
        for (Contender& c : cs) {
            // Check: exact integer sums (bf16 holds them exactly).
            void* d = c.data(t);
            for (size_t i = 0; i < n; ++i) {
                if (t == DType::f32) static_cast<float*>(d)[i] = input(rank, i);
                else static_cast<bf16*>(d)[i] = float_to_bf16(input(rank, i));
            }
            if (c.engine && t == DType::bf16)  // engines hold float32 and convert on the wire
                for (size_t i = 0; i < n; ++i) c.engine->buffer()[i] = input(rank, i);
            c.call(n, t);
            long wrong = 0;
            for (size_t i = 0; i < n; ++i) {
                float want = 0;
                for (int q = 0; q < size; ++q) want += input(q, i);
                float got = (c.engine || t == DType::f32) ? static_cast<float*>(c.data(DType::f32))[i]
                                                         : bf16_to_float(static_cast<bf16*>(d)[i]);
                wrong += got != want;
            }
            MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            // Timed calls keep summing in place; the values grow but the cost does not change.
            double sec = time_calls([&] { c.call(n, t); }, a.warmup, a.iters);
            double algbw = bytes / sec / 1e9;
            c.rows.push_back({bytes, n, sec * 1e6, algbw, algbw * bus, wrong});
        }
    }

    long total_wrong = 0;
    if (rank == 0) {
        for (Contender& c : cs) {
            std::printf("\n# %s\n#%12s %12s %8s %6s %11s %8s %8s %7s\n", c.name.c_str(), "size(B)", "count", "type",
                        "redop", "time(us)", "algbw", "busbw", "#wrong");
            for (auto& r : c.rows) {
                std::printf(" %12zu %12zu %8s %6s %11.1f %8.2f %8.2f %7ld\n", r.bytes, r.count, dtype_name(t), "sum", r.us,
                            r.algbw, r.busbw, r.wrong);
                total_wrong += r.wrong;
            }
        }
        std::printf("\n# busbw (GB/s) and ratio to MPI_Allreduce\n#%12s", "size(B)");
        for (Contender& c : cs) std::printf(" %14s", c.name.c_str());
        for (size_t k = 1; k < cs.size(); ++k) std::printf(" %8s", ("x" + cs[k].name.substr(0, 7)).c_str());
        std::printf("\n");
        for (size_t i = 0; i < cs[0].rows.size(); ++i) {
            std::printf(" %12zu", cs[0].rows[i].bytes);
            for (Contender& c : cs) std::printf(" %14.2f", c.rows[i].busbw);
            for (size_t k = 1; k < cs.size(); ++k) std::printf(" %8.2f", cs[k].rows[i].busbw / cs[0].rows[i].busbw);
            std::printf("\n");
        }
        std::printf("# wrong results: %ld%s\n", total_wrong, total_wrong ? "  <-- FAILED" : "");
        if (!a.json.empty()) {
            FILE* f = std::fopen(a.json.c_str(), "w");
            if (!f) {
                std::fprintf(stderr, "dptrain-bench: error: cannot write -J %s\n", a.json.c_str());
            } else {
                std::fprintf(f, "[\n");
                bool first = true;
                for (Contender& c : cs)
                    for (auto& r : c.rows) {
                        std::fprintf(f,
                                     "%s  {\"algorithm\":\"%s\",\"ranks\":%d,\"ranks_per_node\":%d,\"size\":%zu,\"count\":%zu,"
                                     "\"type\":\"%s\",\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,\"wrong\":%ld}",
                                     first ? "" : ",\n", c.name.c_str(), size, (a.rpn ? sim : real).local_size, r.bytes,
                                     r.count, dtype_name(t), r.us, r.algbw, r.busbw, r.wrong);
                        first = false;
                    }
                std::fprintf(f, "\n]\n");
                std::fclose(f);
            }
        }
    }
    MPI_Bcast(&total_wrong, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    cs.clear();
    if (a.rpn > 0) sim.destroy();
    real.destroy();
    return total_wrong ? 1 : 0;
}

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    std::string cmd = argc > 1 ? argv[1] : "";
    int code = cmd == "io" ? bench_io(argc, argv) : cmd == "trace" ? bench_trace(argc, argv) : bench_allreduce(argc, argv);
    MPI_Finalize();
    return code;
}

// ---------------------------------------------------------------------------------------------
// dptrain-bench io: the reader against a raw sequential read of the same shards, for 1..N ranks.
//   mpirun -np N dptrain-bench io --data DIR [--batch-size 64] [--steps 0] [--modes direct,memory,collective]
//          [--io-threads 1,4] [--shuffle-block 1] [--no-drop]
// Each row reads one epoch of the training split (every sample once: the bytes the raw read
// reads, less the HDF5 metadata) through a Prefetcher whose consumer does nothing, so it shows
// the most the input path can deliver. The raw row reads the shard files sequentially in 4 MiB
// preads, each rank a 1/n share. Before every row the files' page cache is dropped
// (posix_fadvise DONTNEED, checked with mincore); the header says when it could not be.

namespace {

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    size_t a = 0;
    while (a <= s.size()) {
        size_t b = s.find(',', a);
        if (b == std::string::npos) b = s.size();
        if (b > a) out.push_back(s.substr(a, b - a));
        a = b + 1;
    }
    return out;
}

// Drops the files' cached pages; returns the share of their pages still resident afterwards.
double drop_cache(const std::vector<std::string>& files) {
    double pages = 0, resident = 0;
    const long page = sysconf(_SC_PAGESIZE);
    for (const std::string& f : files) {
        int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        off_t size = lseek(fd, 0, SEEK_END);
        if (size > 0) {
            void* m = mmap(nullptr, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
            if (m != MAP_FAILED) {
                size_t n = ((size_t)size + page - 1) / page;
                std::vector<unsigned char> v(n);
                if (mincore(m, (size_t)size, v.data()) == 0)
                    for (unsigned char c : v) resident += c & 1;
                pages += (double)n;
                munmap(m, (size_t)size);
            }
        }
        ::close(fd);
    }
    return pages > 0 ? resident / pages : 0;
}

} // namespace

int bench_io(int argc, char** argv) {
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    std::string data, modes = "direct,memory,collective", threads = "1,4", blocks = "1";
    int batch = 64;
    long steps = 0;
    bool drop = true;
    for (int i = 2; i < argc; ++i) {
        std::string k = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : "";
        if (k == "--data") data = v, ++i;
        else if (k == "--batch-size") batch = std::atoi(v), ++i;
        else if (k == "--steps") steps = std::atol(v), ++i;
        else if (k == "--modes") modes = v, ++i;
        else if (k == "--io-threads") threads = v, ++i;
        else if (k == "--shuffle-block") blocks = v, ++i;
        else if (k == "--no-drop") drop = false;
        else data.clear(), i = argc;
    }
    if (data.empty() || batch < 1) {
        if (rank == 0)
            std::fprintf(stderr, "usage: mpirun -np N dptrain-bench io --data DIR [--batch-size 64] [--steps 0 = one epoch] "
                                 "[--modes direct,memory,collective] [--io-threads 1,4] [--shuffle-block 1,4096] [--no-drop]\n");
        return 2;
    }
    std::vector<std::string> files;
    long samples = 0;
    double row_bytes = 0, file_bytes = 0;
    bool ok = all_ok(MPI_COMM_WORLD, [&] {
        files = find_shards(data, "train", "make shards with dptrain-data");
        ShardSet s = ShardSet::open(data, "train", batch);
        samples = s.num_samples();
        row_bytes = s.bytes_per_sample();
        for (const std::string& f : files) {
            struct stat st;
            if (stat(f.c_str(), &st) == 0) file_bytes += (double)st.st_size;
        }
        for (const std::string& m : split_list(modes)) parse_io_mode(m);
    });
    if (!ok) return 2;
    std::vector<int> ranks;
    for (int n = 1; n < world; n *= 2) ranks.push_back(n);
    ranks.push_back(world);
    if (rank == 0) {
        std::printf("# dptrain-bench io: %s, %zu training shards, %ld samples x %.0f B = %.1f MiB (files %.1f MiB), batch "
                    "%d per rank, %s per row\n",
                    data.c_str(), files.size(), samples, row_bytes, samples * row_bytes / 1048576.0,
                    file_bytes / 1048576.0, batch, steps > 0 ? strfmt("%ld steps", steps).c_str() : "one epoch");
        std::printf("#%6s %-32s %12s %10s %8s %10s %9s\n", "ranks", "reader", "samples/s", "MB/s", "x raw", "raw MB/s",
                    "cached");
    }
    double worst_cached = 0;
    for (int n : ranks) {
        MPI_Comm comm;
        MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &comm);
        if (comm != MPI_COMM_NULL) {
            Topology topo = Topology::create(comm, 0);
            // Times one measurement: cache dropped, all start together, the slowest rank ends it.
            auto timed = [&](const std::function<void()>& fn, double* cached) {
                *cached = drop ? drop_cache(files) : 1.0;
                MPI_Allreduce(MPI_IN_PLACE, cached, 1, MPI_DOUBLE, MPI_MAX, comm);
                MPI_Barrier(comm);
                double t0 = now_seconds();
                fn();
                double t = now_seconds() - t0;
                MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
                return t;
            };
            // Raw: the files' bytes, each rank a contiguous 1/n share of their concatenation.
            double cached = 0;
            double raw_t = timed(
                [&] {
                    std::vector<char> buf(4 << 20);
                    double lo = file_bytes * topo.rank / n, hi = file_bytes * (topo.rank + 1) / n, at = 0;
                    for (const std::string& f : files) {
                        struct stat st;
                        stat(f.c_str(), &st);
                        double a = std::max(lo, at), b = std::min(hi, at + (double)st.st_size);
                        if (b > a) {
                            int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
                            for (off_t off = (off_t)(a - at); off < (off_t)(b - at);) {
                                ssize_t got = pread(fd, buf.data(), std::min<size_t>(buf.size(), (size_t)(b - at) - off), off);
                                if (got <= 0) break;
                                off += got;
                            }
                            ::close(fd);
                        }
                        at += (double)st.st_size;
                    }
                },
                &cached);
            double raw_mbs = file_bytes / raw_t / 1e6;
            worst_cached = std::max(worst_cached, cached);
            if (rank == 0)
                std::printf(" %6d %-32s %12s %10.1f %8.2f %10.1f %8.0f%%\n", n, "raw sequential read", "-", raw_mbs, 1.0,
                            raw_mbs, 100 * cached);
            for (const std::string& bs : split_list(blocks))
            for (const std::string& m : split_list(modes)) {
                IoMode mode = parse_io_mode(m);
                const long B = std::max(1l, std::atol(bs.c_str()));
                for (const std::string& ts : split_list(threads)) {
                    int K = std::max(1, std::atoi(ts.c_str()));
                    if (mode == IoMode::collective && K > 1) continue;  // one reader, in the caller
                    long rows = 0;
                    double t = timed(
                        [&] {
                            MPI_Comm io_comm = mode == IoMode::memory ? topo.node : topo.world;
                            ShardSet s = ShardSet::open(data, "train", batch, mode, io_comm);
                            if (mode == IoMode::memory) {
                                s.load_node_memory();
                                MPI_Barrier(topo.node);
                            }
                            std::vector<std::unique_ptr<Dataset>> extra;
                            std::vector<Dataset*> readers{&s};
                            for (int k = 1; k < K; ++k) {
                                extra.push_back(s.reopen());
                                readers.push_back(extra.back().get());
                            }
                            Sampler sampler(samples, (long)batch * n, 1, K > 1 ? 2 : 1, B);
                            long S = steps > 0 ? steps : sampler.steps_per_epoch();
                            Prefetcher pf(readers, sampler, topo.rank, n, batch, std::max(2, K), 0, S, -1,
                                          mode == IoMode::collective);
                            for (long k = 0; k < S; ++k) {
                                rows += pf.next().global_n;
                                pf.release();
                            }
                            if (mode == IoMode::memory) MPI_Barrier(topo.node);  // the shared copy outlives its readers
                        },
                        &cached);
                    worst_cached = std::max(worst_cached, cached);
                    double mbs = rows * row_bytes / t / 1e6;
                    if (rank == 0)
                        std::printf(" %6d %-32s %12s %10.1f %8.2f %10s %8.0f%%\n", n,
                                    (strfmt("%s, %d thread%s", m.c_str(), K, K == 1 ? "" : "s") +
                                     (B > 1 ? strfmt(", block %ld", B) : std::string())).c_str(),
                                    human(rows / t).c_str(), mbs, mbs / raw_mbs, "", 100 * cached);
                }
            }
            topo.destroy();
            MPI_Comm_free(&comm);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0)
        std::printf("# cached: the share of the files' pages still in the page cache when the row started (after "
                    "posix_fadvise DONTNEED%s)%s\n",
                    drop ? "" : ": --no-drop, not dropped",
                    worst_cached > 0.1 ? "; the cache could not be dropped here, so rows read from memory" : "");
    return 0;
}

// ---------------------------------------------------------------------------------------------
// dptrain-bench trace: what the step instrumentation costs. Times the operations a traced step
// performs (Tracer::mark per phase, PhaseTimes::add and end_step, the clock read) over many
// repetitions and prints the cost per step for a given number of phases and buckets, and its
// share of a step of --step-ms.
int bench_trace(int argc, char** argv) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long events = 2000000;
    double step_ms = 0.6;
    int buckets = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        if (k == "--events") events = std::atol(argv[i + 1]);
        else if (k == "--step-ms") step_ms = std::atof(argv[i + 1]);
        else if (k == "--buckets") buckets = std::atoi(argv[i + 1]);
    }
    if (rank != 0) return 0;
    const char* names[6] = {"data", "forward", "backward", "all-reduce", "optimizer", "evaluation"};
    auto best_of = [](int reps, const std::function<double()>& fn) {
        double best = 1e30;
        for (int r = 0; r < reps; ++r) best = std::min(best, fn());
        return best;
    };
    double clock_ns = best_of(5, [&] {
        double t0 = now_seconds(), sink = 0;
        for (long i = 0; i < events; ++i) sink += now_seconds();
        double t = now_seconds() - t0;
        if (sink == 0) std::printf(" ");
        return t / events * 1e9;
    });
    double mark_ns = best_of(5, [&] {
        Tracer tr;
        tr.enable((size_t)events + 8);
        double t0 = now_seconds();
        for (long i = 0; i < events; ++i) tr.mark(names[i % 5], i / 5);
        return (now_seconds() - t0) / events * 1e9;
    });
    double comm_ns = best_of(5, [&] {
        Tracer tr;
        tr.enable((size_t)events + 8);
        double t0 = now_seconds();
        for (long i = 0; i < events; ++i) tr.comm("allreduce", i, 1.0, 2.0, 4096, "flat");
        return (now_seconds() - t0) / events * 1e9;
    });
    double phase_ns = best_of(5, [&] {
        PhaseTimes pt;
        pt.reserve(1000);
        double t0 = now_seconds();
        for (long i = 0; i < events; ++i) {
            pt.add((int)(i % kStepPhases), 1e-4);
            if (i % kStepPhases == kStepPhases - 1) pt.end_step();
        }
        return (now_seconds() - t0) / events * 1e9;
    });
    // A traced step: 5 phase marks (each a clock read for the breakdown plus the trace event),
    // one end of step, and two clock reads plus an event per bucket on the communication thread.
    double traced_ns = 5 * (mark_ns + clock_ns + phase_ns) + clock_ns + buckets * (comm_ns + 2 * clock_ns);
    double untraced_ns = 5 * (clock_ns + phase_ns) + clock_ns;
    std::printf("# dptrain-bench trace: best of 5 runs of %ld operations each\n", events);
    std::printf("clock read (steady_clock)        %8.1f ns\n", clock_ns);
    std::printf("Tracer::mark (one phase event)   %8.1f ns\n", mark_ns);
    std::printf("Tracer::comm (one bucket event)  %8.1f ns\n", comm_ns);
    std::printf("PhaseTimes::add                  %8.1f ns\n", phase_ns);
    std::printf("per step, breakdown only         %8.2f us = %.3f%% of a %.3g ms step\n", untraced_ns / 1e3,
                100 * untraced_ns / (step_ms * 1e6), step_ms);
    std::printf("per step, with --trace, %d bucket%s %8.2f us = %.3f%% of a %.3g ms step\n", buckets,
                buckets == 1 ? " " : "s", traced_ns / 1e3, 100 * traced_ns / (step_ms * 1e6), step_ms);
    return 0;
}
