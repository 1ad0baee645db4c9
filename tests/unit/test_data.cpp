// ShardSet reads and its errors, the Sampler's partition of each epoch, and the Prefetcher.
#include "helpers.h"

#include "dptrain/data/shards.h"
#include "dptrain/core/error.h"
#include "dptrain/core/utf8.h"
#include "dptrain/data/prefetcher.h"
#include "dptrain/data/stage.h"
#include "dptrain/data/tokens.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <malloc.h>
#include <set>
#include <thread>
#include <sys/stat.h>
#include <unistd.h>

using namespace dptrain;
using testing::temp_dir;
using testing::write_shards;

static std::string open_error(const std::string& dir) {
    try {
        ShardSet::open(dir, "train", 8);
    } catch (const UserError& e) {
        return e.what();
    }
    return "";
}

TEST_CASE("ShardSet reads any rows, in the order asked, across shards", "[data]") {
    std::string dir = temp_dir("shards");
    write_shards(dir, "train", {5, 7, 4}, 3, 4);
    ShardSet s = ShardSet::open(dir, "train", 8);
    CHECK(s.num_samples() == 16);
    CHECK(s.dim() == 3);
    CHECK(s.num_classes() == 4);
    CHECK(s.num_shards() == 3);
    long idx[8] = {15, 0, 6, 5, 7, 11, 4, 12};
    float x[8 * 3];
    int y[8];
    s.read_rows(idx, 8, x, y);
    for (int i = 0; i < 8; ++i) {
        CHECK(y[i] == idx[i] % 4);
        for (int d = 0; d < 3; ++d) CHECK(x[i * 3 + d] == (float)idx[i] + 0.5f * d);
    }
}

TEST_CASE("ShardSet names the bad file and the fix", "[data]") {
    SECTION("no shards at all") {
        std::string dir = temp_dir("empty");
        std::string e = open_error(dir);
        CHECK(e.find("no train-NNNNN-of-NNNNN.h5 shards") != std::string::npos);
        CHECK(e.find("dptrain-data synth") != std::string::npos);
    }
    SECTION("missing directory") {
        CHECK(open_error("/nonexistent/dptrain-data").find("directory not found") != std::string::npos);
    }
    SECTION("a missing shard") {
        std::string dir = temp_dir("missing");
        write_shards(dir, "train", {4, 4, 4}, 2, 2);
        std::string gone = dir + "/train-00001-of-00003.h5";
        REQUIRE(unlink(gone.c_str()) == 0);
        std::string e = open_error(dir);
        CHECK(e.find(gone) != std::string::npos);
        CHECK(e.find("missing") != std::string::npos);
    }
    SECTION("a truncated shard") {
        std::string dir = temp_dir("trunc");
        write_shards(dir, "train", {50, 50}, 4, 2);
        std::string f = dir + "/train-00001-of-00002.h5";
        struct stat st;
        REQUIRE(stat(f.c_str(), &st) == 0);
        REQUIRE(truncate(f.c_str(), st.st_size / 2) == 0);
        std::string e = open_error(dir);
        CHECK(e.find(f) != std::string::npos);
        CHECK(e.find("truncated") != std::string::npos);
    }
    SECTION("not an HDF5 file") {
        std::string dir = temp_dir("junk");
        std::ofstream(dir + "/train-00000-of-00001.h5") << "hello";
        CHECK(open_error(dir).find("not an HDF5 file") != std::string::npos);
    }
    SECTION("wrong dtype, shape or attribute") {
        std::string dir = temp_dir("dtype");
        {
            std::lock_guard<std::mutex> g(h5::lock());
            h5::Hid f = h5::create_file(dir + "/train-00000-of-00001.h5");
            std::vector<int> xi(8 * 2, 1);
            std::vector<int> y(8, 0);
            h5::write_dataset(f.get(), "/features", h5::Kind::i32, {8, 2}, xi.data());
            h5::write_dataset(f.get(), "/labels", h5::Kind::i32, {8}, y.data());
            h5::write_attr_i64(f.get(), "num_classes", 2);
        }
        std::string e = open_error(dir);
        CHECK(e.find("/features has dtype int32, expected float32") != std::string::npos);

        std::string dir2 = temp_dir("shape");
        {
            std::lock_guard<std::mutex> g(h5::lock());
            h5::Hid f = h5::create_file(dir2 + "/train-00000-of-00001.h5");
            std::vector<float> x(8, 1.0f);
            std::vector<int> y(8, 0);
            h5::write_dataset(f.get(), "/features", h5::Kind::f32, {8}, x.data());
            h5::write_dataset(f.get(), "/labels", h5::Kind::i32, {8}, y.data());
            h5::write_attr_i64(f.get(), "num_classes", 2);
        }
        CHECK(open_error(dir2).find("/features has 1 dimensions, expected 2") != std::string::npos);

        std::string dir3 = temp_dir("attr");
        {
            std::lock_guard<std::mutex> g(h5::lock());
            h5::Hid f = h5::create_file(dir3 + "/train-00000-of-00001.h5");
            std::vector<float> x(8, 1.0f);
            std::vector<int> y(4, 0);
            h5::write_dataset(f.get(), "/features", h5::Kind::f32, {4, 2}, x.data());
            h5::write_dataset(f.get(), "/labels", h5::Kind::i32, {4}, y.data());
        }
        CHECK(open_error(dir3).find("num_classes") != std::string::npos);
    }
    SECTION("an attribute holding an array instead of one value") {
        std::string dir = temp_dir("attr-array");
        write_shards(dir, "train", {4}, 2, 2);
        {
            std::lock_guard<std::mutex> g(h5::lock());
            hid_t f = H5Fopen((dir + "/train-00000-of-00001.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
            H5Adelete(f, "num_classes");
            hsize_t n = 3;
            h5::Hid space(H5Screate_simple(1, &n, nullptr), H5Sclose);
            h5::Hid a(H5Acreate2(f, "num_classes", H5T_NATIVE_INT64, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
            int64_t v[3] = {2, 3, 4};
            H5Awrite(a.get(), H5T_NATIVE_INT64, v);
            a.reset();
            H5Fclose(f);
        }
        CHECK(open_error(dir).find("num_classes holds 3 values, expected one") != std::string::npos);
    }
    SECTION("labels outside [0, num_classes) of contiguous shards fail the open") {
        // Their labels are read and checked once at open (ShardSet::kLabelCacheBytes).
        std::string dir = temp_dir("labels");
        write_shards(dir, "train", {6}, 2, 3);
        {
            std::lock_guard<std::mutex> g(h5::lock());
            hid_t f = H5Fopen((dir + "/train-00000-of-00001.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
            h5::write_attr_i64(f, "num_classes", 2);  // label 2 is now out of range
            H5Fclose(f);
        }
        CHECK(open_error(dir).find("train-00000-of-00001.h5: /labels[2] = 2 is outside [0, num_classes = 2)") !=
              std::string::npos);
    }
}

TEST_CASE("Sampler: every sample exactly once per epoch, for 1 to 4 ranks", "[data][sampler]") {
    const long N = 103;  // not a multiple of the global batch: the last batch is partial
    for (int W = 1; W <= 4; ++W) {
        const long G = 12;  // divides by 1, 2, 3, 4 ranks
        Sampler s(N, G, 42);
        CHECK(s.steps_per_epoch() == 9);
        std::vector<long> buf(G);
        for (long epoch = 0; epoch < 2; ++epoch) {
            std::multiset<long> seen;
            for (long k = 0; k < s.steps_per_epoch(); ++k) {
                long step = epoch * s.steps_per_epoch() + k;
                int total = 0;
                for (int r = 0; r < W; ++r) {
                    int n = s.slice(step, r, W, buf.data());
                    CHECK(n <= G / W);
                    total += n;
                    seen.insert(buf.begin(), buf.begin() + n);
                }
                CHECK(total == s.global_count(step));
            }
            REQUIRE(seen.size() == (size_t)N);
            long expect = 0;
            for (long v : seen) CHECK(v == expect++);  // each of 0..N-1 exactly once
        }
    }
}

TEST_CASE("Sampler: the ranks' slices of a step are the 1-rank batch, in order", "[data][sampler]") {
    Sampler one(1000, 32, 7), four(1000, 32, 7);
    std::vector<long> whole(32), part(8), joined;
    for (long step : {0L, 5L, 31L, 32L, 100L}) {
        int n = one.batch(step, whole.data());
        joined.clear();
        for (int r = 0; r < 4; ++r) {
            int k = four.slice(step, r, 4, part.data());
            joined.insert(joined.end(), part.begin(), part.begin() + k);
        }
        CHECK(std::vector<long>(whole.begin(), whole.begin() + n) == joined);
    }
}

TEST_CASE("Sampler: order depends on seed and epoch only", "[data][sampler]") {
    Sampler a(500, 50, 1), b(500, 50, 1), c(500, 50, 2);
    std::vector<long> x(50), y(50), z(50), w(50);
    a.batch(3, x.data());
    b.batch(13, w.data());  // b visits epoch 1 first, then comes back
    b.batch(3, y.data());
    c.batch(3, z.data());
    CHECK(x == y);
    CHECK(x != z);
    a.batch(13, z.data());
    CHECK(z == w);
    CHECK(x != w);  // epoch 1 differs from epoch 0
}

// Bytes malloc has handed out and not taken back (its heap's and its mmapped chunks').
static size_t malloc_in_use() {
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

TEST_CASE("Sampler::bytes_for is what a Sampler allocates (the memory plan's row)", "[data][sampler]") {
    {
        const size_t before = malloc_in_use();
        std::vector<long> probe((size_t)1 << 17);
        if (malloc_in_use() - before < probe.size() * sizeof(long)) {
            WARN("malloc's counts do not see allocations here (a sanitizer's allocator): not checked");
            return;
        }
    }
    const long N = 1 << 20;
    for (int epochs : {1, 2})
        for (long block : {1l, 16l}) {
            INFO("epochs " << epochs << ", block " << block);
            const size_t before = malloc_in_use();
            Sampler s(N, 512, 3, epochs, block);
            const size_t used = malloc_in_use() - before, planned = Sampler::bytes_for(N, epochs, block);
            CHECK(used >= planned);
            CHECK(used <= planned + 3 * 4096);  // each vector rounded up to whole pages
        }
}

TEST_CASE("Sampler --shuffle-block: whole blocks of consecutive samples, a shifted grid each epoch", "[data][sampler]") {
    const long N = 1000, G = 64, B = 16;
    Sampler s(N, G, 5, 1, B);
    std::vector<long> perm, buf(G);
    std::set<long> offsets;
    for (long epoch = 0; epoch < 6; ++epoch) {
        perm.clear();
        for (long k = 0; k < s.steps_per_epoch(); ++k) {
            int n = s.batch(epoch * s.steps_per_epoch() + k, buf.data());
            perm.insert(perm.end(), buf.begin(), buf.begin() + n);
        }
        REQUIRE(perm.size() == (size_t)N);
        std::vector<long> pos(N, -1);
        for (long i = 0; i < N; ++i) pos[perm[i]] = i;
        for (long v = 0; v < N; ++v) REQUIRE(pos[v] >= 0);  // each sample once
        // The grid: a block starts wherever sample v does not directly follow v - 1. Every block
        // but the first and last of the grid holds exactly B samples, and they are B apart.
        std::vector<long> starts{0};
        for (long v = 1; v < N; ++v)
            if (pos[v] != pos[v - 1] + 1) starts.push_back(v);
        // Adjacent blocks may land next to each other by chance and merge; the grid is the
        // starts' common residue mod B.
        long off = -1;
        for (size_t i = 1; i < starts.size(); ++i) {
            CHECK(starts[i] % B == starts[1] % B);
            off = starts[1] % B;
        }
        for (size_t i = 1; i + 1 < starts.size(); ++i) CHECK((starts[i + 1] - starts[i]) % B == 0);
        offsets.insert(off);
        CHECK(starts.size() >= (size_t)(N / B) / 2);  // the blocks are shuffled, not left in order
    }
    CHECK(offsets.size() >= 3);  // the grid moves between epochs
}

TEST_CASE("Sampler --shuffle-block: each rank's slice is a few runs of consecutive samples", "[data][sampler]") {
    const long N = 4096, B = 128;
    for (int W : {1, 2, 4}) {
        const long G = 256L * W;
        Sampler s(N, G, 11, 1, B);
        std::vector<long> buf(G);
        for (long step = 0; step < 3 * s.steps_per_epoch(); ++step)
            for (int r = 0; r < W; ++r) {
                int n = s.slice(step, r, W, buf.data());
                std::sort(buf.begin(), buf.begin() + n);
                int runs = n > 0 ? 1 : 0;
                for (int i = 1; i < n; ++i) runs += buf[i] != buf[i - 1] + 1;
                // 256 samples span at most 3 blocks of 128 (two ends partial); a shifted grid's
                // split first block adds one.
                CHECK(runs <= 4);
            }
        // The same samples per step as one rank reading the whole global batch.
        Sampler one(N, G, 11, 1, B);
        std::vector<long> whole(G), joined, part(G);
        one.batch(7, whole.data());
        for (int r = 0; r < W; ++r) {
            int k = s.slice(7, r, W, part.data());
            joined.insert(joined.end(), part.begin(), part.begin() + k);
        }
        CHECK(joined == whole);
    }
}

TEST_CASE("Prefetcher delivers each step's slice in order and rethrows read errors", "[data]") {
    std::string dir = temp_dir("prefetch");
    write_shards(dir, "train", {20, 20}, 2, 5);
    ShardSet shards = ShardSet::open(dir, "train", 4);
    Sampler sampler(40, 8, 3), ref(40, 8, 3);
    {
        Prefetcher pf(shards, sampler, 1, 2, 4, 2, 3, 12);
        std::vector<long> idx(4);
        for (long step = 3; step < 12; ++step) {
            const Batch& b = pf.next();
            CHECK(b.step == step);
            int n = ref.slice(step, 1, 2, idx.data());
            REQUIRE(b.n == n);
            CHECK(b.global_n == 8);
            for (int i = 0; i < n; ++i) {
                CHECK(b.y[i] == idx[i] % 5);
                CHECK(b.x[2 * i] == (float)idx[i]);
            }
            pf.release();
        }
    }
    SECTION("a reader error reaches the consumer") {
        std::string dir2 = temp_dir("prefetch-bad");
        write_shards(dir2, "train", {16}, 2, 3);
        ShardSet s2 = ShardSet::open(dir2, "train", 16);
        Sampler sm(16, 16, 1);
        Prefetcher pf(s2, sm, 0, 1, 16, 2, 0, 4, 0);  // the read of step 0 fails
        CHECK_THROWS_AS(pf.next(), UserError);
    }
}

// --grad-accum: the micro-batches of every rank of a step are, together and in order, the step's
// global batch, the same samples one rank reading the whole batch gets.
TEST_CASE("Prefetcher with micro-batches: ranks x micro-batches partition each step's global batch", "[data]") {
    std::string dir = temp_dir("prefetch-accum");
    write_shards(dir, "train", {30, 27}, 2, 5);
    ShardSet shards = ShardSet::open(dir, "train", 8);
    const int W = 2, N = 3;
    for (long block : {1L, 4L}) {
        Sampler ref(57, 24, 5, 1, block);  // 24 = 4 per rank x 2 ranks x 3 micro-batches; the epoch's last batch holds 9
        for (int r = 0; r < W; ++r) {
            Sampler sampler(57, 24, 5, 1, block);
            Prefetcher pf({&shards}, sampler, r, W, 4, 2, 1, 4, -1, false, -1, N);
            for (long step = 1; step < 4; ++step)
                for (int k = 0; k < N; ++k) {
                    const Batch& b = pf.next();
                    REQUIRE(b.step == step);
                    REQUIRE(b.micro == k);
                    CHECK(b.global_n == ref.global_count(step));
                    std::vector<long> idx(24);
                    const int n = ref.slice(step, k * W + r, W * N, idx.data());
                    REQUIRE(b.n == n);
                    for (int i = 0; i < n; ++i) CHECK(b.x[2 * i] == (float)idx[(size_t)i]);
                    pf.release();
                }
        }
        // The parts k * W + r, in order, are the whole batch.
        for (long step = 1; step < 4; ++step) {
            std::vector<long> whole(24), parts, idx(24);
            whole.resize((size_t)ref.batch(step, whole.data()));
            for (int p = 0; p < W * N; ++p) {
                const int n = ref.slice(step, p, W * N, idx.data());
                parts.insert(parts.end(), idx.begin(), idx.begin() + n);
            }
            CHECK(parts == whole);
        }
    }
}

// Counts the reads of the Dataset it wraps.
namespace {
struct CountedReads : Dataset {
    Dataset& base;
    std::atomic<int> reads{0};
    explicit CountedReads(Dataset& d) : base(d) {}
    long num_samples() const override { return base.num_samples(); }
    int floats_per_sample() const override { return base.floats_per_sample(); }
    int ints_per_sample() const override { return base.ints_per_sample(); }
    void read(const long* idx, int n, long epoch, float* x, int* y) override {
        base.read(idx, n, epoch, x, y);
        ++reads;
    }
    int num_shards() const override { return base.num_shards(); }
    const std::string& shard_path(int i) const override { return base.shard_path(i); }
    std::unique_ptr<Dataset> reopen() const override { return base.reopen(); }
};

// Polls until reads reaches n, for up to 10 s; the count it ended with.
int reads_after_waiting_for(const CountedReads& d, int n) {
    for (int i = 0; i < 1000 && d.reads < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return d.reads;
}
}  // namespace

// With --grad-accum 4 and --prefetch 2 the ring holds two steps of micro-batches. Once full, the
// reader waits for a whole step's slots to be free before it reads again: it is woken once a step,
// not once a micro-batch.
TEST_CASE("Prefetcher with micro-batches: a full ring is refilled a step at a time", "[data]") {
    std::string dir = temp_dir("prefetch-refill");
    write_shards(dir, "train", {64}, 2, 5);
    ShardSet shards = ShardSet::open(dir, "train", 8);
    CountedReads counted(shards);
    const int N = 4, slots = Prefetcher::slots_for(2, N, 1);
    REQUIRE(slots == 8);
    Sampler sampler(64, 8, 5);  // 4 micro-batches of 2 rows a step
    Prefetcher pf({&counted}, sampler, 0, 1, 2, slots, 0, 6, -1, false, -1, N);
    REQUIRE(reads_after_waiting_for(counted, slots) == slots);
    for (int step = 0; step < 3; ++step) {
        for (int k = 0; k < N; ++k) {
            const Batch& b = pf.next();
            CHECK(b.step == step);
            CHECK(b.micro == k);
            pf.release();
            if (k + 1 < N) {
                // Time for a reader that was woken to read; it must not have been.
                std::this_thread::sleep_for(std::chrono::milliseconds(30));
                CHECK(counted.reads == slots + step * N);
            }
        }
        CHECK(reads_after_waiting_for(counted, slots + (step + 1) * N) == std::min(slots + (step + 1) * N, 6 * N));
    }
}

// peek() is what the trainer stages to a GPU during a step: it must be the next step's batch, and
// that slot must hold still until next() hands it out and release() returns it.
TEST_CASE("Prefetcher: peek shows the next step's batch, which stays put until it is used", "[data]") {
    std::string dir = temp_dir("prefetch-peek");
    write_shards(dir, "train", {20, 20}, 2, 5);
    ShardSet shards = ShardSet::open(dir, "train", 4);
    Sampler sampler(40, 8, 3), ref(40, 8, 3);
    std::vector<long> idx(4);
    // Polls peek() until the reader has the batch (it never waits itself).
    auto peek_ready = [](Prefetcher& pf) {
        for (int i = 0; i < 5000; ++i) {
            if (const Batch* p = pf.peek()) return p;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return (const Batch*)nullptr;
    };
    {
        Prefetcher pf(shards, sampler, 1, 2, 4, 3, 3, 12);
        for (long step = 3; step < 12; ++step) {
            const Batch& b = pf.next();
            REQUIRE(b.step == step);
            if (step + 1 == 12) {
                CHECK(pf.peek() == nullptr);  // no step after the last
                pf.release();
                break;
            }
            const Batch* nb = peek_ready(pf);
            REQUIRE(nb != nullptr);
            REQUIRE(nb != &b);
            CHECK(nb->step == step + 1);
            std::vector<float> x(nb->x.begin(), nb->x.end());
            std::vector<int> y(nb->y.begin(), nb->y.end());
            pf.release();  // the reader may now refill b's slot, but not nb's
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            const Batch& b2 = pf.next();
            CHECK(&b2 == nb);
            CHECK(b2.x == x);
            CHECK(b2.y == y);
            int n = ref.slice(step + 1, 1, 2, idx.data());
            REQUIRE(b2.n == n);
            for (int i = 0; i < n; ++i) CHECK(b2.y[i] == idx[i] % 5);
            pf.release();
            ++step;
        }
    }
    SECTION("one slot: the next batch cannot be ready while the current one is held") {
        Prefetcher pf(shards, sampler, 1, 2, 4, 1, 0, 4);
        pf.next();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        CHECK(pf.peek() == nullptr);
        pf.release();
        CHECK(pf.next().step == 1);
        pf.release();
    }
}

TEST_CASE("Prefetcher: batches are the same for any reader count and depth", "[data]") {
    std::string dir = temp_dir("prefetch-k");
    write_shards(dir, "train", {30, 23, 27}, 3, 7);
    ShardSet base = ShardSet::open(dir, "train", 6);
    // 80 samples in global batches of 12: 7 steps per epoch, the last one partial; 30 steps
    // cross four epoch boundaries.
    Sampler ref(80, 12, 9);
    std::vector<long> idx(6);
    for (int K : {1, 2, 3, 5}) {
        for (int depth : {1, 2, 4}) {
            std::vector<std::unique_ptr<Dataset>> extra;
            std::vector<Dataset*> readers{&base};
            for (int k = 1; k < K; ++k) {
                extra.push_back(base.reopen());
                readers.push_back(extra.back().get());
            }
            Sampler sampler(80, 12, 9, K > 1 ? 2 : 1);
            Prefetcher pf(readers, sampler, 1, 2, 6, depth, 2, 32);
            for (long step = 2; step < 32; ++step) {
                const Batch& b = pf.next();
                REQUIRE(b.step == step);
                int n = ref.slice(step, 1, 2, idx.data());
                REQUIRE(b.n == n);
                for (int i = 0; i < n; ++i) {
                    INFO("readers " << K << ", depth " << depth << ", step " << step << ", row " << i);
                    REQUIRE(b.y[i] == idx[i] % 7);
                    REQUIRE(b.x[3 * i] == (float)idx[i]);
                }
                pf.release();
            }
        }
    }
}

TEST_CASE("Prefetcher: with several readers a failed read surfaces at its own step", "[data]") {
    std::string dir = temp_dir("prefetch-fail");
    write_shards(dir, "train", {40}, 2, 5);
    ShardSet base = ShardSet::open(dir, "train", 4);
    auto r2 = base.reopen(), r3 = base.reopen();
    Sampler sampler(40, 4, 1, 2);
    // The read of step 6 fails: steps 0..5 arrive, then next() throws, and nothing hangs.
    Prefetcher pf({&base, r2.get(), r3.get()}, sampler, 0, 1, 4, 4, 0, 20, 6);
    for (long step = 0; step < 6; ++step) {
        REQUIRE(pf.next().step == step);
        pf.release();
    }
    CHECK_THROWS_WITH(pf.next(), Catch::Contains("injected I/O error") && Catch::Contains("step 7"));
}

// write_shards' rows first..first + n as one chunked, compressed shard (HDF5's read path).
static void write_chunked_shard(const std::string& path, long first, long n, int D, int K) {
    std::vector<float> x((size_t)n * D);
    std::vector<int> y(n);
    for (long r = 0; r < n; ++r) {
        for (int d = 0; d < D; ++d) x[(size_t)r * D + d] = (float)(first + r) + 0.5f * d;
        y[r] = (int)((first + r) % K);
    }
    std::lock_guard<std::mutex> g(h5::lock());
    h5::Hid f = h5::create_file(path);
    auto chunked = [&](const char* name, hid_t type, std::vector<hsize_t> dims, const void* data) {
        h5::Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
        std::vector<hsize_t> chunk = dims;
        chunk[0] = 64;
        H5Pset_chunk(dcpl.get(), (int)dims.size(), chunk.data());
        H5Pset_deflate(dcpl.get(), 4);
        h5::Hid space(H5Screate_simple((int)dims.size(), dims.data(), nullptr), H5Sclose);
        h5::Hid d(H5Dcreate2(f.get(), name, type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose);
        REQUIRE(H5Dwrite(d.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    };
    chunked("/features", H5T_NATIVE_FLOAT, {(hsize_t)n, (hsize_t)D}, x.data());
    chunked("/labels", H5T_NATIVE_INT32, {(hsize_t)n}, y.data());
    h5::write_attr_i64(f.get(), "num_classes", K);
}

TEST_CASE("direct reads and HDF5 reads give the same rows", "[data]") {
    // Same contents twice: contiguous (direct pread path) and chunked + compressed (HDF5 path).
    std::string a = temp_dir("contig"), b = temp_dir("chunked");
    const long N = 300;
    const int D = 5, K = 7;
    write_shards(a, "train", {N}, D, K);
    write_chunked_shard(b + "/train-00000-of-00001.h5", 0, N, D, K);
    {
        ShardSet sa = ShardSet::open(a, "train", 64), sb = ShardSet::open(b, "train", 64);
        CHECK(sa.direct());
        CHECK_FALSE(sb.direct());
        Sampler sampler(N, 64, 9);
        std::vector<long> idx(64);
        std::vector<float> xa(64 * D), xb(64 * D);
        std::vector<int> ya(64), yb(64);
        for (long step = 0; step < 6; ++step) {
            int n = sampler.batch(step, idx.data());
            sa.read_rows(idx.data(), n, xa.data(), ya.data());
            sb.read_rows(idx.data(), n, xb.data(), yb.data());
            CHECK(xa == xb);
            CHECK(ya == yb);
            for (int i = 0; i < n; ++i) CHECK(xa[(size_t)i * D + 1] == (float)idx[i] + 0.5f);
        }
    }  // the shards closed: HDF5 cannot reopen them for writing while they are open
    // HDF5-path labels (chunked, compressed) are checked at open too, when all labels fit in
    // kLabelCacheBytes: the first bad one is named.
    {
        std::lock_guard<std::mutex> g(h5::lock());
        hid_t f = H5Fopen((b + "/train-00000-of-00001.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        h5::write_attr_i64(f, "num_classes", 3);  // labels 3..6 are now out of range
        H5Fclose(f);
    }
    CHECK_THROWS_WITH(ShardSet::open(b, "train", 64), Catch::Contains("/labels[3] = 3 is outside [0, num_classes = 3)"));
}

TEST_CASE("a chunked dataset gets the chunk cache it is sized for", "[data]") {
    // Opened again while its first handle was open, a dataset shares that open object and its
    // 1 MiB default cache: every step decompressed its chunks again (data 80% of a step).
    std::string dir = temp_dir("cache");
    const long N = 20000;
    const int D = 16;
    write_chunked_shard(dir + "/train-00000-of-00001.h5", 0, N, D, 3);
    std::lock_guard<std::mutex> g(h5::lock());
    h5::Hid f = h5::open_file(dir + "/train-00000-of-00001.h5", "");
    h5::Hid d = h5::open_dataset(f.get(), "x", "/features", "");
    const size_t took = h5::size_chunk_cache(f.get(), d, "/features", 64u << 20);
    REQUIRE(took > (size_t)N * D * 4);  // all of it: 1.2 MB, over HDF5's 1 MiB
    h5::Hid dapl(H5Dget_access_plist(d.get()), H5Pclose);
    size_t slots = 0, bytes = 0;
    double w0 = 0;
    REQUIRE(H5Pget_chunk_cache(dapl.get(), &slots, &bytes, &w0) >= 0);
    CHECK(bytes >= (size_t)N * D * 4);
    CHECK(slots > 521);
}

// A byte-level token shard of n ids (id k = k % 256) with `bad` at offset `at`; chunked: HDF5's path.
static void write_token_shard(const std::string& path, long n, long at, uint16_t bad, bool chunked) {
    std::vector<uint16_t> ids((size_t)n);
    for (long k = 0; k < n; ++k) ids[(size_t)k] = (uint16_t)(k % 256);
    if (at >= 0) ids[(size_t)at] = bad;
    std::lock_guard<std::mutex> g(h5::lock());
    h5::Hid f = h5::create_file(path);
    h5::Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    hsize_t dims[1] = {(hsize_t)n}, chunk[1] = {100};
    if (chunked) H5Pset_chunk(dcpl.get(), 1, chunk);
    h5::Hid space(H5Screate_simple(1, dims, nullptr), H5Sclose);
    h5::Hid d(H5Dcreate2(f.get(), "/tokens", H5T_NATIVE_UINT16, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
              H5Dclose);
    REQUIRE(H5Dwrite(d.get(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids.data()) >= 0);
    h5::write_attr_i64(f.get(), "vocab_size", 256);
    h5::write_attr_str(f.get(), "tokenizer", "byte");
}

TEST_CASE("TokenShardSet::check_ids names the first id outside the vocabulary, in its part only", "[data][tokens]") {
    for (bool chunked : {false, true}) {
        INFO("chunked " << chunked);
        const std::string dir = temp_dir("tokids");
        write_token_shard(dir + "/train-00000-of-00002.h5", 1000, -1, 0, chunked);
        write_token_shard(dir + "/train-00001-of-00002.h5", 1000, 700, 300, chunked);  // split token 1700
        TokenShardSet s = TokenShardSet::open(dir, "train", 16, 1, false);
        CHECK_THROWS_WITH(s.check_ids(0, 1, 1e9),
                          Catch::Contains("train-00001-of-00002.h5: /tokens[700] = 300 is outside the byte vocabulary of 256"));
        // Two parts of 1000 tokens: the bad id is in the second one.
        CHECK(s.check_ids(0, 2, 1e9));
        CHECK_THROWS_WITH(s.check_ids(1, 2, 1e9), Catch::Contains("/tokens[700] = 300"));
        // Over the budget nothing is read; the window holding it then fails when read, naming it.
        CHECK_FALSE(s.check_ids(0, 1, 100));
        const long window = 61 + 700 / 16;  // (1000 - 16) / 16 = 61 windows a shard; the 43rd of shard 1 holds 688..704
        std::vector<int> y(17);
        CHECK_THROWS_WITH(s.read(&window, 1, 0, nullptr, y.data()), Catch::Contains("/tokens[700] = 300"));
    }
}

// HDF5 files and datasets open in this process (an open dataset keeps its file open inside HDF5
// even when the file's own handle is closed).
static long open_h5_objects() {
    std::lock_guard<std::mutex> g(h5::lock());
    return (long)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE | H5F_OBJ_DATASET);
}

TEST_CASE("Shards read by pread hold no HDF5 file open; HDF5-path shards keep theirs", "[data][tokens]") {
    // An open HDF5 file keeps its metadata cache (about half a MiB each in HDF5 1.10): with a
    // thousand shards, 600 MiB of a rank's memory (bench/shard_memory.sh).
    const long before = open_h5_objects();
    const std::string tab = temp_dir("h5open");
    write_shards(tab, "train", {5, 7, 4, 6}, 3, 4);
    {
        ShardSet s = ShardSet::open(tab, "train", 8);
        REQUIRE(s.direct());
        CHECK(open_h5_objects() == before);
        std::unique_ptr<Dataset> again = s.reopen();
        CHECK(open_h5_objects() == before);
        long idx[3] = {21, 0, 9};
        float x[9];
        int y[3];
        s.read_rows(idx, 3, x, y);
        CHECK(y[0] == 21 % 4);
        CHECK(x[3 * 2] == 9.0f);
    }
    for (bool chunked : {false, true}) {
        INFO("chunked " << chunked);
        const std::string dir = temp_dir("h5open_tok");
        for (int i = 0; i < 3; ++i)
            write_token_shard(dir + strfmt("/train-%05d-of-00003.h5", i), 500, -1, 0, chunked);
        TokenShardSet s = TokenShardSet::open(dir, "train", 16, 1, false);
        CHECK(open_h5_objects() == before + (chunked ? 6 : 0));  // a file and its /tokens each
        const long window = 30 + 5;  // (500 - 16) / 16 = 30 windows a shard: shard 1's sixth, tokens 80..96
        std::vector<int> y(17);
        s.read(&window, 1, 0, nullptr, y.data());
        CHECK(y[0] == 80);
        CHECK(y[16] == 96);
    }
    CHECK(open_h5_objects() == before);
}

TEST_CASE("Tokenizer::bytes_of: the UTF-8 length of what an id decodes to", "[tokens]") {
    const TokenizerPtr byte = tokenizer_from("byte", "");
    CHECK(byte->bytes_of(0) == 1);
    CHECK(byte->bytes_of(255) == 1);
    // a (1 byte), e-acute (2), euro sign (3), mathematical italic e (4), in code-point order
    const auto chars = make_char_tokenizer("a\xC3\xA9\xE2\x82\xAC\xF0\x9D\x91\x92");
    REQUIRE(chars->vocab_size() == 4);
    for (int id = 0; id < 4; ++id) CHECK(chars->bytes_of(id) == id + 1);
    CHECK(chars->bytes_of(4) == 1);  // outside the vocabulary: counted as one byte, as ever
    CHECK(chars->decode({0, 1, 2, 3}).size() == 10);
    CHECK(tokenizer_from("char", chars->table())->same_as(*chars));
}

TEST_CASE("tokenizer kinds: the names files store, and back", "[tokens]") {
    // Shards, checkpoints and exports hold these names (and checksums cover them): never renamed.
    const std::pair<TokenizerKind, const char*> names[] = {{TokenizerKind::byte, "byte"},
                                                           {TokenizerKind::chars, "char"},
                                                           {TokenizerKind::ids, "ids"},
                                                           {TokenizerKind::gpt2, "gpt2"},
                                                           {TokenizerKind::sentencepiece, "sentencepiece"},
                                                           {TokenizerKind::bpe, "bpe"}};
    for (const auto& [kind, name] : names) {
        CHECK(std::string(name_of(kind)) == name);
        CHECK(tokenizer_kind(name) == kind);
        CHECK(keeps_table(kind) == (kind != TokenizerKind::byte && kind != TokenizerKind::ids));
    }
    TokenizerKind k;
    CHECK_FALSE(parse_tokenizer_kind("chars", &k));
    const char* unknown = "tokenizer 'wordpiece' is unknown (byte, char, gpt2, bpe, sentencepiece or ids): a newer "
                          "dptrain wrote it?";
    CHECK_THROWS_WITH(tokenizer_kind("wordpiece"), unknown);
    CHECK_THROWS_WITH(tokenizer_from("wordpiece", ""), unknown);
    // byte: ids past 255 (a padded vocabulary's) wrap; text of any bytes.
    const TokenizerPtr byte = tokenizer_from("byte", "");
    CHECK(byte->kind() == TokenizerKind::byte);
    CHECK(byte->decode({65, 256 + 66}) == "AB");
    CHECK(byte->encode("\xFF\n") == std::vector<int>{255, 10});
    CHECK(byte->end_of_text() == -1);
    CHECK((byte->reads_text() && !byte->needs_utf8() && byte->hf_files().empty()));
    CHECK(make_char_tokenizer("ab")->needs_utf8());
    // Where dptrain-data may cut a corpus between ranks: after a newline.
    const std::string text = "ab\ncd\nef";
    CHECK(byte->next_cut(text, 1) == 3);
    CHECK(byte->next_cut(text, 4) == 6);
    CHECK(byte->next_cut(text, 7) == text.size());
}

TEST_CASE("sha256_hex and sha256_file give FIPS 180-4's digests", "[stage]") {
    CHECK(sha256_hex("", 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha256_hex("abc", 3) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  // 448 bits: two blocks
    CHECK(sha256_hex(two.data(), two.size()) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    // A million 'a', read from a file in the 4 MiB pieces sha256_file takes.
    const std::string path = testing::temp_dir("sha") + "/a";
    std::ofstream(path) << std::string(1000000, 'a');
    CHECK(sha256_file(path) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("read_sums keeps names inside the directory and reads CRLF lines", "[stage]") {
    const std::string dir = testing::temp_dir("sums");
    const std::string sum(64, 'a');
    auto sums_of = [&](const std::string& text) {
        std::ofstream(dir + "/SHA256SUMS") << text;
        return read_sums(dir);
    };
    const auto ok = sums_of(sum + "  ./train-00000-of-00001.h5\r\n" + sum + " *sub/dir/val-00000-of-00001.h5\n");
    REQUIRE(ok.size() == 2);
    CHECK(ok[0].second == "train-00000-of-00001.h5");
    CHECK(ok[1].second == "sub/dir/val-00000-of-00001.h5");
    CHECK(sums_of(sum + "  a..b/c..\n")[0].second == "a..b/c..");  // dots within names are fine
    // Checking (and staging's removal of a bad copy) must never reach a file outside the directory.
    for (const std::string name : {"./", "/etc/passwd", "../outside", "a/../../outside", "a/.."}) {
        INFO(name);
        CHECK_THROWS_WITH(sums_of(sum + "  " + name + "\n"), Catch::Contains("SHA256SUMS:1: '") &&
                                                                 Catch::Contains("is not a file inside " + dir));
    }
}

// Whether malloc's counts see this process's allocations (not under a sanitizer's allocator).
static bool malloc_counts_seen() {
    const size_t before = malloc_in_use();
    std::vector<long> probe((size_t)1 << 17);
    return malloc_in_use() - before >= probe.size() * sizeof(long);
}

// Every sample of `set` read once, in order, batches of 64 (HDF5's chunk caches filled).
static void read_every_sample(Dataset& set) {
    std::vector<float> x((size_t)64 * set.floats_per_sample());
    std::vector<int> y((size_t)64 * set.ints_per_sample());
    std::vector<long> idx(64);
    for (long i = 0; i < set.num_samples(); i += 64) {
        int n = 0;
        for (; n < 64 && i + n < set.num_samples(); ++n) idx[n] = i + n;
        set.read(idx.data(), n, 0, x.data(), y.data());
    }
}

TEST_CASE("A second reader shares what opening read: the labels are held once", "[data]") {
    if (!malloc_counts_seen()) {
        WARN("malloc's counts do not see allocations here (a sanitizer's allocator): not checked");
        return;
    }
    const std::string dir = temp_dir("reopen_labels");
    write_shards(dir, "train", {250000, 250000, 250000, 250000}, 1, 4);
    ShardSet s = ShardSet::open(dir, "train", 64);
    REQUIRE(s.held_bytes() == 1000000 * sizeof(int));  // every label, cached at open
    const size_t before = malloc_in_use();
    std::unique_ptr<Dataset> again = s.reopen();
    CHECK(malloc_in_use() - before < 64 * 1024);  // a batch's scratch, not another 4 MB of labels
    long idx[4] = {999999, 3, 250000, 500001};
    float xa[4], xb[4];
    int ya[4], yb[4];
    s.read(idx, 4, 0, xa, ya);
    again->read(idx, 4, 0, xb, yb);
    for (int i = 0; i < 4; ++i) {
        CHECK(xb[i] == (float)idx[i]);
        CHECK(yb[i] == (int)(idx[i] % 4));
        CHECK(xa[i] == xb[i]);
        CHECK(ya[i] == yb[i]);
    }
}

TEST_CASE("HDF5-read shards hold what the memory plan says, per file; a second reader shares it", "[data]") {
    if (!malloc_counts_seen()) {
        WARN("malloc's counts do not see allocations here (a sanitizer's allocator): not checked");
        return;
    }
    // What a set of S chunked shards takes once opened, reopened and read through (caches filled),
    // and what its held_bytes says. HDF5 keeps about half a MiB for each open file
    // (h5::kOpenFileBytes), so the growth from 8 to 40 shards is what the plan must follow.
    auto measure = [](bool tokens, int S, size_t* held, size_t* reopen) {
        const std::string dir = temp_dir(tokens ? "held_tok" : "held_tab");
        for (int i = 0; i < S; ++i) {
            const std::string path = dir + strfmt("/train-%05d-of-%05d.h5", i, S);
            if (tokens) write_token_shard(path, 5000, -1, 0, true);
            else write_chunked_shard(path, i * 5000l, 5000, 8, 4);
        }
        const size_t before = malloc_in_use();
        std::unique_ptr<Dataset> set;
        if (tokens) set = std::make_unique<TokenShardSet>(TokenShardSet::open(dir, "train", 16, 1, false));
        else set = std::make_unique<ShardSet>(ShardSet::open(dir, "train", 64));
        const size_t opened = malloc_in_use();
        std::unique_ptr<Dataset> again = set->reopen();
        *reopen = malloc_in_use() - opened;
        read_every_sample(*again);
        read_every_sample(*set);
        *held = set->held_bytes();
        return malloc_in_use() - before;
    };
    for (bool tokens : {false, true}) {
        INFO((tokens ? "token shards" : "tabular shards"));
        size_t held8 = 0, held40 = 0, reopen8 = 0, reopen40 = 0;
        const size_t used8 = measure(tokens, 8, &held8, &reopen8), used40 = measure(tokens, 40, &held40, &reopen40);
        const double per_file = (double)(used40 - used8) / 32, planned = (double)(held40 - held8) / 32;
        INFO("a file takes " << per_file << " bytes; planned " << planned);
        CHECK(planned >= (double)h5::kOpenFileBytes);
        CHECK(per_file >= 0.8 * planned);
        CHECK(per_file <= 1.2 * planned);
        CHECK(reopen40 < 40 * 4096);  // handles only: HDF5 shares the file's and the datasets' structures
    }
}

TEST_CASE("UTF-8: well-formed means the shortest form, no surrogates, at most U+10FFFF", "[tokens]") {
    auto reads = [](const std::string& s) {
        size_t i = 0;
        uint32_t cp = 0;
        return next_code_point(s, &i, &cp) && i == s.size() ? (long)cp : -1L;
    };
    // The edges of each length, and of the surrogates, are read.
    CHECK(reads("\x7F") == 0x7F);
    CHECK(reads("\xC2\x80") == 0x80);
    CHECK(reads("\xE0\xA0\x80") == 0x800);
    CHECK(reads("\xED\x9F\xBF") == 0xD7FF);
    CHECK(reads("\xEE\x80\x80") == 0xE000);
    CHECK(reads("\xF0\x90\x80\x80") == 0x10000);
    CHECK(reads("\xF4\x8F\xBF\xBF") == 0x10FFFF);
    // Overlong forms ('/' as C0 AF, U+0000 as E0 80 80, U+FFFF as F0 8F BF BF), a surrogate (CESU-8's
    // U+D800) and past U+10FFFF are not.
    CHECK(reads("\xC0\xAF") == -1);
    CHECK(reads("\xC1\xBF") == -1);
    CHECK(reads("\xE0\x80\x80") == -1);
    CHECK(reads("\xF0\x8F\xBF\xBF") == -1);
    CHECK(reads("\xED\xA0\x80") == -1);
    CHECK(reads("\xED\xBF\xBF") == -1);
    CHECK(reads("\xF4\x90\x80\x80") == -1);
    CHECK(reads("\xF5\x80\x80\x80") == -1);
    // So the char tokenizer refuses them as it refuses any other bytes that are not UTF-8.
    CHECK_THROWS_WITH(make_char_tokenizer("ab\xC0\xAF"), Catch::Contains("not valid UTF-8 at byte 2"));
    // A table stored before (a surrogate in it) still loads, and decodes to its bytes.
    const TokenizerPtr old = tokenizer_from("char", "a\xED\xA0\x80");
    CHECK(old->vocab_size() == 2);
    CHECK(old->decode({1, 0}) == "\xED\xA0\x80" "a");
}

TEST_CASE("char tokenizer: a character outside the vocabulary is named on one line", "[tokens]") {
    const auto t = make_char_tokenizer("abc");
    CHECK_THROWS_WITH(t->encode("ab\nc"),
                      "character U+000A (a control character) is not in the model's vocabulary of 3 characters");
    CHECK_THROWS_WITH(t->encode("abz"), "character 'z' (U+007A) is not in the model's vocabulary of 3 characters");
}
