// Thin HDF5 helpers: RAII handles, typed checks that name path and dataset in one UserError, and
// the process-wide lock. Not for: the shard layout (shards.h).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace dptrain::h5 {

// Around every sequence of HDF5 calls: the packaged library is not thread-safe, and readers run
// beside checkpoints.
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
    hid_t release() {  // the caller closes it
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

// Its state is allocated on first use; calling early puts that in start-up. Idempotent.
void init();

// We report one line instead of HDF5's error stack. Idempotent.
void quiet();

// UserError("PATH: ... HINT"). fapl with H5Pset_fapl_mpio: collective.
Hid open_file(const std::string& path, const std::string& hint, hid_t fapl = H5P_DEFAULT);
// Truncates. userblock > 0 (a power of two >= 512): bytes reserved at the start for the caller.
Hid create_file(const std::string& path, size_t userblock = 0);
// Why the HDF5 call just made failed: the system's error (set errno = 0 before the call), else guess.
std::string reason(const char* guess);
Hid open_dataset(hid_t file, const std::string& path, const std::string& name, const std::string& hint,
                 hid_t dapl = H5P_DEFAULT);
// For the memory plan: HDF5 1.10's per open file (the metadata cache's 64k-slot table), as malloc
// counts it (tests/unit/test_data.cpp); reopening in-process shares it.
constexpr size_t kOpenFileBytes = (size_t)528 << 10;
// HDF5's default chunk cache: 521 8-byte slots allocated at open, up to 1 MiB of chunks.
constexpr size_t kDefaultChunkSlotBytes = 521 * 8;
constexpr size_t kDefaultChunkCacheBytes = (size_t)1 << 20;

// Reopens a chunked dataset with a cache holding all of it (to max_bytes), so rows read again
// find their chunk decompressed; the default holds a handful. Returns the cache's bytes (0:
// contiguous, returned as it is).
size_t size_chunk_cache(hid_t file, Hid& dataset, const std::string& name, size_t max_bytes);

// name: e.g. "float64", "uint16".
struct TypeInfo {
    H5T_class_t cls = H5T_NO_CLASS;
    size_t size = 0;
    bool is_signed = false;
    std::string name;
};
TypeInfo type_of(hid_t dset);

enum class Kind { f32, i32, u16, u32, u8 };
const char* kind_name(Kind k);
void expect_kind(hid_t dset, Kind k, const std::string& path, const std::string& name, const std::string& hint);
std::vector<hsize_t> dims(hid_t dset);

void write_dataset(hid_t file, const std::string& name, Kind k, const std::vector<hsize_t>& shape,
                   const void* data);
void read_dataset(hid_t dset, Kind k, void* out);
// 1-D, written in pieces.
Hid create_dataset(hid_t file, const std::string& name, Kind k, hsize_t n);
void write_range(hid_t dset, Kind k, hsize_t offset, hsize_t count, const void* data);

bool has_attr(hid_t obj, const std::string& name);
void write_attr_i64(hid_t obj, const std::string& name, int64_t v);
void write_attr_u64(hid_t obj, const std::string& name, uint64_t v);
void write_attr_str(hid_t obj, const std::string& name, const std::string& v);
int64_t read_attr_i64(hid_t obj, const std::string& name);
double read_attr_f64(hid_t obj, const std::string& name);  // any numeric attribute, as double
uint64_t read_attr_u64(hid_t obj, const std::string& name);
std::string read_attr_str(hid_t obj, const std::string& name);

// Attributes must fit the 64 KiB object header and a BPE table is ~1 MB: a root attribute when
// it fits without NULs, else a uint8 dataset `/name`. read_text reads either.
void write_text(hid_t file, const std::string& name, const std::string& text);
std::string read_text(hid_t file, const std::string& name);

} // namespace dptrain::h5
