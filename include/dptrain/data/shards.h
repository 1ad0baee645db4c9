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

// DIR/SPLIT-00000-of-0000S.h5 ... : every path of the set, checked present; throws UserError
// naming the missing shard (or the directory) with `hint` as the fix.
std::vector<std::string> find_shards(const std::string& dir, const std::string& split, const std::string& hint);

// A reader thread's own descriptor for pread on a shard the run has opened and checked (a copy
// made by Dataset::reopen); throws UserError naming the shard when the filesystem refuses.
int open_again(const std::string& path);
// `bytes` from `fd` at offset `at` into dst (pread until done); throws UserError naming `path`,
// the offset and the cause (end of file: truncated) when they cannot all be read.
void read_fully(int fd, void* dst, size_t bytes, long at, const std::string& path);
constexpr const char* kOpenAgainHint = "it was readable when the run opened it: is the filesystem unavailable, or "
                                       "the process out of file descriptors (`ulimit -n`; or lower --io-threads)?";

// --io memory's buffer: `bytes` shared by the ranks of a node (a SharedWindow over the node's
// communicator; local rank 0 holds the memory, every rank maps it, at segment(0)). Making and
// freeing it are collective over the node. Refuses more than half the node's memory, or an
// allocation that fails, with a UserError naming `what` (e.g. "the rows of DIR/train") and --io
// direct as the fix; every rank computes the same need, so all refuse together.
std::shared_ptr<SharedWindow> node_memory(MPI_Comm node, double bytes, const std::string& what);

// One split ("train" or "val") of a tabular dataset: DIR/SPLIT-00000-of-0000S.h5 ... with
// /features float32 (N, D), /labels int32 (N), root attribute num_classes. What h5py writes by
// default from NumPy is read too, converted by HDF5 as it reads: float16 or float64 features
// (rounded to float32), labels of any integer type (a value beyond int32 is clipped, then refused
// as out of range) and labels shaped (N, 1). Opening checks every
// shard (presence, dtype, shape, agreement between shards) and throws one UserError naming the
// first bad file. Not thread-safe: one reader per ShardSet.
class ShardSet : public Dataset {
  public:
    // mode memory: `comm` is the node's communicator; collective: all ranks' (the world).
    // Opening is collective over `comm` in those modes.
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
    size_t held_bytes() const override;  // the label caches; HDF5-read shards' files and chunk caches

    static constexpr long kLabelCacheBytes = 64l << 20;  // all shards' labels together
    // Reads rows idx[0..n) (global sample indices) into x (n, D) and y (n), in that order.
    // Contiguous, unfiltered little-endian datasets (what dptrain-data and h5py write by default)
    // are read with one pread per run of consecutive rows at the dataset's file offset; HDF5's
    // own read of a scattered selection copies whole 64 KiB sieve buffers per row and cost ~4x
    // more. Other layouts (chunked, compressed) take one H5Dread per shard touched, with the
    // rows' runs as one hyperslab selection.
    void read_rows(const long* idx, int n, float* x, int* y);
    bool direct() const;  // every shard is read with pread
    // One line for the start-up banner when HDF5 converts this split's values as they are read
    // (float64 features, int64 labels, ...), or reads them from chunks (chunked, compressed)
    // where --io direct would pread them: what, in how many shards, its cost and how to convert
    // once. Empty when every shard is read directly (or from the node's copy).
    std::string conversion_note() const;  // and shards of no rows, left out
    IoMode mode() const { return mode_; }
    // --io memory: allocates the node-shared buffer (collective over the node's communicator given
    // to open) and loads this rank's share of the rows. Every rank of the node must have loaded its
    // share before any reads: the caller agrees across ranks afterwards (all_ok).
    void load_node_memory();
    double memory_bytes() const override { return (double)total_ * bytes_per_sample(); }
    double bytes_per_sample() const { return 4.0 * dim_ + 4.0; }

  private:
    struct Shard {
        std::string path;
        long first = 0, count = 0;  // global index of row 0, rows
        h5::Hid file, features, labels;
        std::string converted;   // what HDF5 converts as it reads, e.g. "float64 features"; empty: none
        std::string label_dtype;  // as stored, e.g. "int64"
        int fd = -1;  // >= 0: direct reads at the offsets below
        long features_at = 0, labels_at = 0;
        // Direct shards whose labels all fit in kLabelCacheBytes: the labels, read and checked
        // once at open, so that a row costs one pread instead of two.
        std::shared_ptr<const std::vector<int>> label_cache;
        size_t chunk_cache = 0;  // HDF5 reads: what the chunk caches take (filled as chunks are read)
        // The same shard for another reader: what opening found, with handles of its own.
        Shard reopened(size_t n_shards) const;
        void size_chunk_caches(size_t n_shards);  // HDF5 reads; sets chunk_cache
    };
    void add_shard(const std::string& path, const std::string& hint, hid_t fapl, size_t n_shards);
    std::string conversion_note_of_shards() const;
    void cache_labels();
    // Throws the UserError for label `label` at `row` of `sh` outside [0, num_classes).
    [[noreturn]] void bad_label(const Shard& sh, long row, int label) const;
    void read_hdf5(Shard& sh, size_t begin, size_t end);
    void read_direct(Shard& sh, size_t begin, size_t end);

    // --io memory: the split's rows in one buffer shared by the node's ranks.
    struct NodeCopy {
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
    // scratch reused by every read: (row in shard, position in the output) pairs, staged rows
    std::vector<std::pair<long, int>> order_;
    std::vector<float> xs_;
    std::vector<int> ys_;
};

} // namespace dptrain
