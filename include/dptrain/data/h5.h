// Thin HDF5 helpers shared by the data reader, the checkpointer and the tools: RAII handles,
// typed checks that turn a wrong file into one UserError naming the path and the dataset, and a
// process-wide lock (the HDF5 library as packaged is not thread-safe, and the prefetch thread
// reads while the main thread may checkpoint). Not for: the shard layout (shards.h).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace dptrain::h5 {

// Hold this around every sequence of HDF5 calls.
std::mutex& lock();

class Hid {
  public:
    Hid() = default;
    Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
    Hid(const Hid&) = delete;
    Hid& operator=(const Hid&) = delete;
    Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
    Hid& operator=(Hid&& o) noexcept;
    ~Hid() { reset(); }
    void reset();
    hid_t release() {  // hands the id to the caller, who closes it
        hid_t id = id_;
        id_ = -1;
        return id;
    }
    hid_t get() const { return id_; }
    explicit operator bool() const { return id_ >= 0; }

  private:
    hid_t id_ = -1;
    herr_t (*close_)(hid_t) = nullptr;
};

// Initialises the library now: it allocates its state on first use, which belongs with the
// process's runtime when that is measured. Idempotent.
void init();

// Silences HDF5's own error stack printing (we report one line instead). Idempotent.
void quiet();

// Opening: a missing or unreadable file -> UserError("PATH: ... HINT").
// fapl: a file access property list (H5P_DEFAULT, or one with H5Pset_fapl_mpio: then collective).
Hid open_file(const std::string& path, const std::string& hint, hid_t fapl = H5P_DEFAULT);
// Truncates; throws UserError on failure. userblock > 0 (a power of two >= 512) reserves that
// many bytes at the start of the file for the caller.
Hid create_file(const std::string& path, size_t userblock = 0);
Hid open_dataset(hid_t file, const std::string& path, const std::string& name, const std::string& hint,
                 hid_t dapl = H5P_DEFAULT);
// What HDF5 (1.10) allocates for each file it holds open, whatever the cache settings: mostly the
// metadata cache's fixed table of 64k slots. As malloc counts it (tests/unit/test_data.cpp); a
// file opened again in the same process shares it, and so does a dataset opened again (with its
// chunk cache). For the memory plan.
constexpr size_t kOpenFileBytes = (size_t)528 << 10;
// HDF5's default chunk cache of a dataset: 521 slots (8 bytes each, allocated at open) and up to
// 1 MiB of chunks.
constexpr size_t kDefaultChunkSlotBytes = 521 * 8;
constexpr size_t kDefaultChunkCacheBytes = (size_t)1 << 20;

// For a chunked dataset: reopens it with a chunk cache that holds all of it up to `max_bytes`,
// so that random rows read again later (next batch, next epoch) find their chunk decompressed.
// HDF5's default (1 MiB, 521 slots) holds a handful of chunks. Contiguous datasets are returned
// as they are. Returns what the cache may take: its size and its slot array (0: not chunked).
size_t size_chunk_cache(hid_t file, Hid& dataset, const std::string& name, size_t max_bytes);

// A dataset's element type: its class, size in bytes, and a name such as "float64" or "uint16".
struct TypeInfo {
    H5T_class_t cls = H5T_NO_CLASS;
    size_t size = 0;
    bool is_signed = false;
    std::string name;
};
TypeInfo type_of(hid_t dset);

enum class Kind { f32, i32, u16, u32, u8 };
const char* kind_name(Kind k);
// Throws UserError when dataset `name` in `path` is not of kind k.
void expect_kind(hid_t dset, Kind k, const std::string& path, const std::string& name, const std::string& hint);
std::vector<hsize_t> dims(hid_t dset);

// Whole-dataset write/read of a 1-D or N-D array of kind k.
void write_dataset(hid_t file, const std::string& name, Kind k, const std::vector<hsize_t>& shape,
                   const void* data);
void read_dataset(hid_t dset, Kind k, void* out);
// A 1-D dataset of n elements of kind k written in pieces: created, then each range written.
Hid create_dataset(hid_t file, const std::string& name, Kind k, hsize_t n);
void write_range(hid_t dset, Kind k, hsize_t offset, hsize_t count, const void* data);

// Attributes on an object (file root or dataset).
bool has_attr(hid_t obj, const std::string& name);
void write_attr_i64(hid_t obj, const std::string& name, int64_t v);
void write_attr_u64(hid_t obj, const std::string& name, uint64_t v);
void write_attr_str(hid_t obj, const std::string& name, const std::string& v);
int64_t read_attr_i64(hid_t obj, const std::string& name);
double read_attr_f64(hid_t obj, const std::string& name);  // any numeric attribute, as double
uint64_t read_attr_u64(hid_t obj, const std::string& name);
std::string read_attr_str(hid_t obj, const std::string& name);

// Text that may outgrow an attribute (HDF5 keeps attributes in the object header, under 64 KiB;
// a BPE tokenizer's table is about 1 MB): a string attribute `name` on the file's root when it
// fits and holds no NUL byte, else a 1-D uint8 dataset `/name` and no attribute. read_text reads
// either.
void write_text(hid_t file, const std::string& name, const std::string& text);
std::string read_text(hid_t file, const std::string& name);

} // namespace dptrain::h5
