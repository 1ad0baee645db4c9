// Tabular training data: the HDF5 shard set (format in data/README.md), read directly, from
// node-shared memory or with MPI-IO collective reads. Not for: the sample order (sampler.h) or
// reading ahead (prefetcher.h).
#pragma once

#include "dptrain/comm/shared_window.h"
#include "dptrain/data/dataset.h"
#include "dptrain/data/h5.h"
#include "dptrain/data/io_mode.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

// DIR/SPLIT-00000-of-0000S.h5 ...: all checked present; throws UserError with `hint` as the fix.
std::vector<std::string> find_shards(const std::string& dir, const std::string& split, const std::string& hint);

// A reader thread's own descriptor (Dataset::reopen); throws UserError naming the shard.
int open_again(const std::string& path);
// pread until done; a short read throws UserError naming `path`, the offset and the cause.
void read_fully(int fd, void* dst, size_t bytes, long at, const std::string& path);
constexpr const char* kOpenAgainHint = "it was readable when the run opened it: is the filesystem unavailable, or "
                                       "the process out of file descriptors (`ulimit -n`; or lower --io-threads)?";

// --io memory's node-shared buffer, at segment(0); collective over `node`. Over half the node's
// memory, every rank refuses alike (same need computed), so none is left in the collective.
std::shared_ptr<SharedWindow> node_memory(MPI_Comm node, double bytes, const std::string& what);

// One split: /features float32 (N, D), /labels int32 (N), attribute num_classes (data/README.md).
// h5py's defaults (float16/64, any int labels, labels (N, 1)) are converted by HDF5 as read.
// Opening checks every shard and names the first bad one. Not thread-safe: one reader each.
class ShardSet : public Dataset {
  public:
    // Collective over `comm`: the node's for memory, the world's for collective; else unused.
    static ShardSet open(const std::string& dir, const std::string& split, int max_rows, IoMode mode = IoMode::direct,
                         MPI_Comm comm = MPI_COMM_NULL);
    ShardSet(ShardSet&&) = default;
    ~ShardSet();

    long num_samples() const override { return total_; }
    int floats_per_sample() const override { return dim_; }
    int ints_per_sample() const override { return 1; }
    void read(const long* idx, int n, long, float* x, int* y) override { read_rows(idx, n, x, y); }
    int dim() const { return dim_; }
    int num_classes() const { return classes_; }
    int num_shards() const override { return (int)shards_.size(); }
    const std::string& shard_path(int i) const override { return shards_[i].path; }
    std::string where(long i) const override;
    std::unique_ptr<Dataset> reopen() const override;
    size_t held_bytes() const override;

    static constexpr long kLabelCacheBytes = 64l << 20;  // all shards' labels together
    // x (n, D), y (n), in idx order. Contiguous shards: one pread per run of rows (HDF5's scattered
    // read copies a 64 KiB sieve per row: docs/ARCHITECTURE.md, "Data path"); others one hyperslab.
    void read_rows(const long* idx, int n, float* x, int* y);
    bool direct() const;  // every shard is read with pread
    // A banner line when HDF5 converts or reads chunks where pread could, or shards are empty.
    std::string conversion_note() const;
    IoMode mode() const { return mode_; }
    // Collective over the node; the caller agrees (all_ok) before any rank reads.
    void load_node_memory();
    double memory_bytes() const override { return (double)total_ * bytes_per_sample(); }
    double bytes_per_sample() const { return 4.0 * dim_ + 4.0; }

  private:
    struct Shard {
        std::string path;
        long first = 0, count = 0;  // global index of row 0, rows
        h5::Hid file, features, labels;
        std::string converted;   // e.g. "float64 features"; empty: none
        std::string label_dtype;  // as stored
        int fd = -1;  // >= 0: direct reads at the offsets below
        long features_at = 0, labels_at = 0;
        // Read and checked at open, so a row costs one pread instead of two.
        std::shared_ptr<const std::vector<int>> label_cache;
        size_t chunk_cache = 0;  // HDF5 reads: bytes, filled as chunks are read
        // For another reader: handles of its own.
        Shard reopened(size_t n_shards) const;
        void size_chunk_caches(size_t n_shards);  // HDF5 reads; sets chunk_cache
    };
    void add_shard(const std::string& path, const std::string& hint, hid_t fapl, size_t n_shards);
    std::string conversion_note_of_shards() const;
    void cache_labels();
    [[noreturn]] void bad_label(const Shard& sh, long row, int label) const;
    void read_hdf5(Shard& sh, size_t begin, size_t end);
    void read_direct(Shard& sh, size_t begin, size_t end);

    struct NodeCopy {  // --io memory
        std::shared_ptr<SharedWindow> buf;
        const float* features = nullptr;  // (total, D)
        const int* labels = nullptr;      // (total)
    };
    ShardSet() = default;
    std::string dir_, split_;
    IoMode mode_ = IoMode::direct;
    MPI_Comm comm_ = MPI_COMM_NULL;
    std::shared_ptr<NodeCopy> node_copy_;
    h5::Hid xfer_;  // collective: the transfer property list
    std::vector<Shard> shards_;
    std::vector<std::string> empty_;  // shards of no rows, left out
    long total_ = 0;
    int dim_ = 0, classes_ = 0, max_rows_ = 0;
    // Reused by every read: (row in shard, output position)
    std::vector<std::pair<long, int>> order_;
    std::vector<float> xs_;
    std::vector<int> ys_;
};

} // namespace dptrain
