// dptrain-bench io: the reader against a raw sequential read of the same shards, for 1..N ranks.
// Not for: timing training (docs/IO.md, "Measuring: `dptrain-bench io`").
//   mpirun -np N dptrain-bench io --data DIR [--batch-size 64] [--steps 0] [--modes direct,memory,collective]
//          [--io-threads 1,4] [--shuffle-block 1] [--no-drop]
// Each row reads one epoch through a Prefetcher whose consumer does nothing: the most the input
// path can deliver. The raw row preads the files in 4 MiB pieces, 1/n a rank. The page cache is
// dropped before every row (fadvise DONTNEED, checked with mincore); the header says when it fails.
#include "dptrain/tools/bench.h"

#include "dptrain/comm/communicator.h"
#include "dptrain/comm/topology.h"
#include "dptrain/config/options.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/data/shards.h"
#include "dptrain/io/metrics.h"
#include "dptrain/tools/cli.h"
#include "dptrain/data/prefetcher.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dptrain {

namespace po = boost::program_options;

namespace {

// Returns the share of the files' pages still resident afterwards.
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

struct IoArgs {
    std::string data, modes = "direct,memory,collective", threads = "1,4", blocks = "1";
    int batch = 64;
    long steps = 0;
    bool drop = true;
};

IoArgs parse_io(int argc, char** argv) {
    IoArgs a;
    po::options_description desc;
    desc.add_options()("data", po::value(&a.data))("batch-size", po::value(&a.batch))(
        "steps", po::value(&a.steps))("modes", po::value(&a.modes))("io-threads", po::value(&a.threads))(
        "shuffle-block", po::value(&a.blocks))("no-drop", po::bool_switch());
    po::variables_map vm = parse_subcommand(argc, argv, desc);
    a.drop = !vm["no-drop"].as<bool>();
    if (a.data.empty()) throw po::error("give the dataset: --data DIR");
    if (a.batch < 1 || a.steps < 0) throw po::error("--batch-size must be at least 1 and --steps at least 0");
    return a;
}

struct Split {
    std::vector<std::string> files;
    long samples = 0;
    double row_bytes = 0, file_bytes = 0;
};

// Over the first n ranks (comm): each measurement cache-dropped, ranks starting together, the
// slowest ending it.
class Rows {
  public:
    Rows(const IoArgs& a, const Split& sp, MPI_Comm comm) : a_(a), sp_(sp), comm_(comm), topo_(Topology::create(comm, 0)) {}
    ~Rows() { topo_.destroy(); }

    double timed(const std::function<void()>& fn, double* cached) {
        *cached = a_.drop ? drop_cache(sp_.files) : 1.0;
        comm_.allreduce(cached, 1, ReduceOp::max);
        comm_.barrier();
        double t0 = now_seconds();
        fn();
        double t = now_seconds() - t0;
        comm_.allreduce(&t, 1, ReduceOp::max);
        return t;
    }

    // Each rank a contiguous 1/n of the files' concatenation.
    void raw_read() {
        std::vector<char> buf(4 << 20);
        const int n = comm_.size();
        const double lo = sp_.file_bytes * comm_.rank() / n, hi = sp_.file_bytes * (comm_.rank() + 1) / n;
        double at = 0;
        for (const std::string& f : sp_.files) {
            struct stat st;
            stat(f.c_str(), &st);
            const double a = std::max(lo, at), b = std::min(hi, at + (double)st.st_size);
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
    }

    // One epoch (or --steps) with K readers and shuffle blocks of B; returns global samples read.
    long read_epoch(IoMode mode, int K, long B) {
        const MPI_Comm io_comm = mode == IoMode::memory ? topo_.node : topo_.world;
        MpiCommunicator node(topo_.node);
        ShardSet s = ShardSet::open(a_.data, "train", a_.batch, mode, io_comm);
        if (mode == IoMode::memory) {
            s.load_node_memory();
            node.barrier();
        }
        std::vector<std::unique_ptr<Dataset>> extra;
        std::vector<Dataset*> readers{&s};
        for (int k = 1; k < K; ++k) {
            extra.push_back(s.reopen());
            readers.push_back(extra.back().get());
        }
        const int n = comm_.size();
        Sampler sampler(sp_.samples, (long)a_.batch * n, 1, K > 1 ? 2 : 1, B);
        const long S = a_.steps > 0 ? a_.steps : sampler.steps_per_epoch();
        Prefetcher pf(readers, sampler, topo_.rank, n, a_.batch, std::max(2, K), 0, S, -1, mode == IoMode::collective);
        long rows = 0;
        for (long k = 0; k < S; ++k) {
            rows += pf.next().global_n;
            pf.release();
        }
        if (mode == IoMode::memory) node.barrier();  // the shared copy outlives its readers
        return rows;
    }

    // Returns the most of the files' pages any row found cached.
    double all(int rank) {
        const int n = comm_.size();
        double cached = 0, worst = 0;
        const double raw_mbs = sp_.file_bytes / timed([&] { raw_read(); }, &cached) / 1e6;
        worst = std::max(worst, cached);
        if (rank == 0)
            std::printf(" %6d %-32s %12s %10.1f %8.2f %10.1f %8.0f%%\n", n, "raw sequential read", "-", raw_mbs, 1.0,
                        raw_mbs, 100 * cached);
        for (const std::string& bs : split_list(a_.blocks))
            for (const std::string& m : split_list(a_.modes))
                for (const std::string& ts : split_list(a_.threads)) {
                    const IoMode mode = parse_io_mode(m);
                    const long B = std::max(1l, std::atol(bs.c_str()));
                    const int K = std::max(1, std::atoi(ts.c_str()));
                    if (mode == IoMode::collective && K > 1) continue;  // one reader, in the caller
                    long rows = 0;
                    const double t = timed([&] { rows = read_epoch(mode, K, B); }, &cached);
                    worst = std::max(worst, cached);
                    const double mbs = rows * sp_.row_bytes / t / 1e6;
                    if (rank == 0)
                        std::printf(" %6d %-32s %12s %10.1f %8.2f %10s %8.0f%%\n", n,
                                    (strfmt("%s, %d thread%s", m.c_str(), K, K == 1 ? "" : "s") +
                                     (B > 1 ? strfmt(", block %ld", B) : std::string()))
                                        .c_str(),
                                    human(rows / t).c_str(), mbs, mbs / raw_mbs, "", 100 * cached);
                }
        return worst;
    }

  private:
    const IoArgs& a_;
    const Split& sp_;
    MpiCommunicator comm_;
    Topology topo_;
};

} // namespace

int bench_io(int argc, char** argv) {
    MpiCommunicator world(MPI_COMM_WORLD);
    const int rank = world.rank();
    const IoArgs a = parse_io(argc, argv);
    Split sp;
    if (!all_ok(MPI_COMM_WORLD, [&] {
            sp.files = find_shards(a.data, "train", "make shards with " + runnable("dptrain-data"));
            ShardSet s = ShardSet::open(a.data, "train", a.batch);
            sp.samples = s.num_samples();
            sp.row_bytes = s.bytes_per_sample();
            for (const std::string& f : sp.files) {
                struct stat st;
                if (stat(f.c_str(), &st) == 0) sp.file_bytes += (double)st.st_size;
            }
            for (const std::string& m : split_list(a.modes)) parse_io_mode(m);
        }))
        return 2;
    if (rank == 0) {
        std::printf("# dptrain-bench io: %s, %zu training shards, %ld samples x %.0f B = %.1f MiB (files %.1f MiB), batch "
                    "%d per rank, %s per row\n",
                    a.data.c_str(), sp.files.size(), sp.samples, sp.row_bytes, sp.samples * sp.row_bytes / 1048576.0,
                    sp.file_bytes / 1048576.0, a.batch, a.steps > 0 ? strfmt("%ld steps", a.steps).c_str() : "one epoch");
        std::printf("#%6s %-32s %12s %10s %8s %10s %9s\n", "ranks", "reader", "samples/s", "MB/s", "x raw", "raw MB/s",
                    "cached");
    }
    std::vector<int> ranks;
    for (int n = 1; n < world.size(); n *= 2) ranks.push_back(n);
    ranks.push_back(world.size());
    double worst_cached = 0;
    for (int n : ranks) {
        MPI_Comm comm = world.split_first(n);
        if (comm != MPI_COMM_NULL) {
            worst_cached = std::max(worst_cached, Rows(a, sp, comm).all(rank));
            free_comm(&comm);
        }
        world.barrier();
    }
    if (rank == 0)
        std::printf("# cached: the share of the files' pages still in the page cache when the row started (after "
                    "posix_fadvise DONTNEED%s)%s\n",
                    a.drop ? "" : ": --no-drop, not dropped",
                    worst_cached > 0.1 ? "; the cache could not be dropped here, so rows read from memory" : "");
    return 0;
}

} // namespace dptrain
