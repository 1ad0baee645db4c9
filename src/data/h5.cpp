// HDF5 helpers: handles, typed checks with user-facing messages, attributes.
// Not for: any file's layout (shards, checkpoints).
#include "dptrain/data/h5.h"

#include "dptrain/core/error.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dptrain::h5 {

std::mutex& lock() {
    static std::mutex m;
    return m;
}

Hid& Hid::operator=(Hid&& o) noexcept {
    if (this != &o) {
        reset();
        id_ = o.id_;
        close_ = o.close_;
        o.id_ = -1;
    }
    return *this;
}

void Hid::reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
}

void init() {
    std::lock_guard<std::mutex> g(lock());
    H5open();
}

void quiet() {
    static std::once_flag once;
    std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

Hid open_file(const std::string& path, const std::string& hint, hid_t fapl) {
    quiet();
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
        throw UserError(strfmt("%s: file not found; %s", path.c_str(), hint.c_str()));
    if (H5Fis_hdf5(path.c_str()) <= 0)
        throw UserError(strfmt("%s: not an HDF5 file (or truncated before its header); %s", path.c_str(),
                               hint.c_str()));
    // No lock on read-only opens: Lustre without flock fails it, and our files are complete once
    // renamed into place. HDF5_USE_FILE_LOCKING still overrides.
    Hid own;
    if (fapl == H5P_DEFAULT) {
        own = Hid(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
        fapl = own.get();
    }
    H5Pset_file_locking(fapl, false, true);
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
    if (f < 0)
        throw UserError(strfmt("%s: HDF5 cannot open it (truncated or corrupt: its size is %lld bytes); %s",
                               path.c_str(), (long long)st.st_size, hint.c_str()));
    return Hid(f, H5Fclose);
}

Hid create_file(const std::string& path, size_t userblock) {
    quiet();
    Hid fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
    if (userblock > 0) H5Pset_userblock(fcpl.get(), userblock);
    errno = 0;
    hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT);
    if (f < 0)
        throw UserError(strfmt("%s: cannot create the file (%s); check the directory exists and is writable",
                               path.c_str(), reason("no reason given").c_str()));
    return Hid(f, H5Fclose);
}

std::string reason(const char* guess) { return errno != 0 ? std::strerror(errno) : guess; }

Hid open_dataset(hid_t file, const std::string& path, const std::string& name, const std::string& hint, hid_t dapl) {
    if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0)
        throw UserError(strfmt("%s: dataset %s missing; %s", path.c_str(), name.c_str(), hint.c_str()));
    hid_t d = H5Dopen2(file, name.c_str(), dapl);
    if (d < 0) throw UserError(strfmt("%s: dataset %s cannot be opened; %s", path.c_str(), name.c_str(), hint.c_str()));
    return Hid(d, H5Dclose);
}

size_t size_chunk_cache(hid_t file, Hid& dataset, const std::string& name, size_t max_bytes) {
    Hid dcpl(H5Dget_create_plist(dataset.get()), H5Pclose);
    if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return 0;
    hsize_t chunk[H5S_MAX_RANK];
    int rank = H5Pget_chunk(dcpl.get(), H5S_MAX_RANK, chunk);
    Hid type(H5Dget_type(dataset.get()), H5Tclose);
    double chunk_bytes = (double)H5Tget_size(type.get());
    for (int i = 0; i < rank; ++i) chunk_bytes *= (double)chunk[i];
    double total = (double)H5Dget_storage_size(dataset.get());
    Hid space(H5Dget_space(dataset.get()), H5Sclose);
    total = std::max(total, (double)H5Sget_simple_extent_npoints(space.get()) * (double)H5Tget_size(type.get()));
    if (chunk_bytes > (double)max_bytes) return 0;  // not one chunk fits: HDF5's default
    size_t bytes = (size_t)std::max(chunk_bytes, std::min(total, (double)max_bytes));
    // ~100 slots per chunk, a prime, as HDF5 advises; capped, as the array is cleared at open.
    size_t slots = std::max<size_t>(521, (size_t)(100.0 * (double)bytes / std::max(1.0, chunk_bytes)));
    slots = std::min<size_t>(slots, 65521);
    auto is_prime = [](size_t v) {
        for (size_t d = 2; d * d <= v; ++d)
            if (v % d == 0) return false;
        return v > 1;
    };
    while (!is_prime(slots)) ++slots;
    Hid dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
    H5Pset_chunk_cache(dapl.get(), slots, bytes, 1.0);
    // Closed first: reopening while open shares the object and ignores the new cache settings.
    dataset.reset();
    hid_t d = H5Dopen2(file, name.c_str(), dapl.get());
    const bool sized = d >= 0;
    if (!sized) d = H5Dopen2(file, name.c_str(), H5P_DEFAULT);  // HDF5's default cache, then
    if (d < 0) throw UserError(strfmt("dataset %s cannot be opened again", name.c_str()));
    dataset = Hid(d, H5Dclose);
    if (!sized) return 0;
    // A decompressed chunk's buffer grows by doubling: up to twice what HDF5 counts against the limit.
    const size_t held = H5Pget_nfilters(dcpl.get()) > 0 ? 2 * bytes : bytes;
    return held + slots * sizeof(void*);
}

const char* kind_name(Kind k) {
    switch (k) {
    case Kind::f32: return "float32";
    case Kind::i32: return "int32";
    case Kind::u16: return "uint16";
    case Kind::u32: return "uint32";
    case Kind::u8: return "uint8";
    }
    return "?";
}

static hid_t mem_type(Kind k) {
    switch (k) {
    case Kind::f32: return H5T_NATIVE_FLOAT;
    case Kind::i32: return H5T_NATIVE_INT32;
    case Kind::u16: return H5T_NATIVE_UINT16;
    case Kind::u32: return H5T_NATIVE_UINT32;
    case Kind::u8: return H5T_NATIVE_UINT8;
    }
    return H5T_NATIVE_FLOAT;
}

static std::string describe(hid_t type) {
    H5T_class_t c = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    if (c == H5T_FLOAT) return strfmt("float%zu", size * 8);
    if (c == H5T_INTEGER) return strfmt("%sint%zu", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", size * 8);
    if (c == H5T_STRING) return "string";
    return strfmt("HDF5 class %d", (int)c);
}

TypeInfo type_of(hid_t dset) {
    Hid type(H5Dget_type(dset), H5Tclose);
    TypeInfo t;
    t.cls = H5Tget_class(type.get());
    t.size = H5Tget_size(type.get());
    t.is_signed = t.cls == H5T_INTEGER && H5Tget_sign(type.get()) != H5T_SGN_NONE;
    t.name = describe(type.get());
    return t;
}

void expect_kind(hid_t dset, Kind k, const std::string& path, const std::string& name, const std::string& hint) {
    Hid type(H5Dget_type(dset), H5Tclose);
    H5T_class_t c = H5Tget_class(type.get());
    size_t size = H5Tget_size(type.get());
    bool ok = false;
    switch (k) {
    case Kind::f32: ok = c == H5T_FLOAT && size == 4; break;
    case Kind::i32: ok = c == H5T_INTEGER && size == 4 && H5Tget_sign(type.get()) != H5T_SGN_NONE; break;
    case Kind::u16: ok = c == H5T_INTEGER && size == 2 && H5Tget_sign(type.get()) == H5T_SGN_NONE; break;
    case Kind::u32: ok = c == H5T_INTEGER && size == 4 && H5Tget_sign(type.get()) == H5T_SGN_NONE; break;
    case Kind::u8: ok = c == H5T_INTEGER && size == 1 && H5Tget_sign(type.get()) == H5T_SGN_NONE; break;
    }
    if (!ok)
        throw UserError(strfmt("%s: dataset %s has dtype %s, expected %s; %s", path.c_str(), name.c_str(),
                               describe(type.get()).c_str(), kind_name(k), hint.c_str()));
}

std::vector<hsize_t> dims(hid_t dset) {
    Hid space(H5Dget_space(dset), H5Sclose);
    int nd = H5Sget_simple_extent_ndims(space.get());
    std::vector<hsize_t> d(nd > 0 ? nd : 0);
    if (nd > 0) H5Sget_simple_extent_dims(space.get(), d.data(), nullptr);
    return d;
}

void write_dataset(hid_t file, const std::string& name, Kind k, const std::vector<hsize_t>& shape,
                   const void* data) {
    Hid space(H5Screate_simple((int)shape.size(), shape.data(), nullptr), H5Sclose);
    errno = 0;
    Hid d(H5Dcreate2(file, name.c_str(), mem_type(k), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
          H5Dclose);
    if (!d)
        throw UserError(strfmt("cannot create dataset %s (%s)", name.c_str(),
                               reason("disk full or file not writable?").c_str()));
    hsize_t elems = 1;
    for (hsize_t n : shape) elems *= n;
    if (elems > 0 && H5Dwrite(d.get(), mem_type(k), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        throw UserError(strfmt("cannot write dataset %s (%s)", name.c_str(), reason("disk full?").c_str()));
}

Hid create_dataset(hid_t file, const std::string& name, Kind k, hsize_t n) {
    Hid space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    errno = 0;
    Hid d(H5Dcreate2(file, name.c_str(), mem_type(k), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    if (!d)
        throw UserError(strfmt("cannot create dataset %s (%s)", name.c_str(),
                               reason("disk full or file not writable?").c_str()));
    return d;
}

void write_range(hid_t dset, Kind k, hsize_t offset, hsize_t count, const void* data) {
    if (count == 0) return;
    Hid file_space(H5Dget_space(dset), H5Sclose);
    Hid mem_space(H5Screate_simple(1, &count, nullptr), H5Sclose);
    errno = 0;
    if (H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &offset, nullptr, &count, nullptr) < 0 ||
        H5Dwrite(dset, mem_type(k), mem_space.get(), file_space.get(), H5P_DEFAULT, data) < 0)
        throw UserError(strfmt("cannot write %llu elements at %llu (%s)", (unsigned long long)count,
                               (unsigned long long)offset, reason("disk full?").c_str()));
}

void read_dataset(hid_t dset, Kind k, void* out) {
    if (H5Dread(dset, mem_type(k), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
        throw UserError("read failed (truncated or corrupt file)");
}

bool has_attr(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

template <typename T>
static void write_attr(hid_t obj, const std::string& name, hid_t type, T v) {
    if (has_attr(obj, name)) H5Adelete(obj, name.c_str());
    Hid space(H5Screate(H5S_SCALAR), H5Sclose);
    Hid a(H5Acreate2(obj, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (!a || H5Awrite(a.get(), type, &v) < 0) throw UserError(strfmt("cannot write attribute %s", name.c_str()));
}

// Exactly one value: reading an array into one would overrun it.
static void expect_scalar(hid_t attr, const std::string& name) {
    Hid space(H5Aget_space(attr), H5Sclose);
    if (H5Sget_simple_extent_npoints(space.get()) != 1)
        throw UserError(strfmt("attribute %s holds %lld values, expected one", name.c_str(),
                               (long long)H5Sget_simple_extent_npoints(space.get())));
}

template <typename T>
static T read_attr(hid_t obj, const std::string& name, hid_t type) {
    if (!has_attr(obj, name)) throw UserError(strfmt("attribute %s missing", name.c_str()));
    Hid a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
    expect_scalar(a.get(), name);
    Hid t(H5Aget_type(a.get()), H5Tclose);
    if (H5Tget_class(t.get()) != H5T_INTEGER) throw UserError(strfmt("attribute %s is not an integer", name.c_str()));
    T v{};
    if (H5Aread(a.get(), type, &v) < 0) throw UserError(strfmt("attribute %s cannot be read", name.c_str()));
    return v;
}

double read_attr_f64(hid_t obj, const std::string& name) {
    if (!has_attr(obj, name)) throw UserError(strfmt("attribute %s missing", name.c_str()));
    Hid a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
    expect_scalar(a.get(), name);
    Hid t(H5Aget_type(a.get()), H5Tclose);
    H5T_class_t c = H5Tget_class(t.get());
    if (c != H5T_FLOAT && c != H5T_INTEGER) throw UserError(strfmt("attribute %s is not a number", name.c_str()));
    double v = 0;
    if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0) throw UserError(strfmt("attribute %s cannot be read", name.c_str()));
    return v;
}

void write_attr_i64(hid_t obj, const std::string& name, int64_t v) { write_attr(obj, name, H5T_NATIVE_INT64, v); }
void write_attr_u64(hid_t obj, const std::string& name, uint64_t v) { write_attr(obj, name, H5T_NATIVE_UINT64, v); }
int64_t read_attr_i64(hid_t obj, const std::string& name) { return read_attr<int64_t>(obj, name, H5T_NATIVE_INT64); }
uint64_t read_attr_u64(hid_t obj, const std::string& name) { return read_attr<uint64_t>(obj, name, H5T_NATIVE_UINT64); }

void write_attr_str(hid_t obj, const std::string& name, const std::string& v) {
    if (has_attr(obj, name)) H5Adelete(obj, name.c_str());
    Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), v.empty() ? 1 : v.size());
    Hid space(H5Screate(H5S_SCALAR), H5Sclose);
    Hid a(H5Acreate2(obj, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    std::string buf = v.empty() ? std::string(1, '\0') : v;
    if (!a || H5Awrite(a.get(), type.get(), buf.data()) < 0)
        throw UserError(strfmt("cannot write attribute %s", name.c_str()));
}

std::string read_attr_str(hid_t obj, const std::string& name) {
    if (!has_attr(obj, name)) throw UserError(strfmt("attribute %s missing", name.c_str()));
    Hid a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
    expect_scalar(a.get(), name);
    Hid t(H5Aget_type(a.get()), H5Tclose);
    if (H5Tget_class(t.get()) != H5T_STRING) throw UserError(strfmt("attribute %s is not a string", name.c_str()));
    if (H5Tis_variable_str(t.get()) > 0) {
        char* s = nullptr;
        // h5py writes variable-length UTF-8, which HDF5 will not convert to H5T_C_S1's ASCII.
        Hid mt(H5Tcopy(H5T_C_S1), H5Tclose);
        H5Tset_size(mt.get(), H5T_VARIABLE);
        H5Tset_cset(mt.get(), H5Tget_cset(t.get()));
        if (H5Aread(a.get(), mt.get(), &s) < 0) throw UserError(strfmt("attribute %s cannot be read", name.c_str()));
        std::string out = s ? s : "";
        H5free_memory(s);
        return out;
    }
    size_t n = H5Tget_size(t.get());
    std::string out(n, '\0');
    if (H5Aread(a.get(), t.get(), out.data()) < 0) throw UserError(strfmt("attribute %s cannot be read", name.c_str()));
    while (!out.empty() && out.back() == '\0') out.pop_back();
    return out;
}

constexpr size_t kAttrTextMax = 60000;  // under the header's 64 KiB

void write_text(hid_t file, const std::string& name, const std::string& text) {
    // A string attribute ends at its first NUL: binary text goes to a dataset.
    if (text.size() <= kAttrTextMax && text.find('\0') == std::string::npos) return write_attr_str(file, name, text);
    write_dataset(file, "/" + name, Kind::u8, {(hsize_t)text.size()}, text.data());
}

std::string read_text(hid_t file, const std::string& name) {
    const std::string path = "/" + name;
    if (H5Lexists(file, path.c_str(), H5P_DEFAULT) <= 0) return read_attr_str(file, name);
    Hid d(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
    if (!d) throw UserError(strfmt("dataset %s cannot be opened", path.c_str()));
    auto shape = dims(d.get());
    if (shape.size() != 1 || type_of(d.get()).cls != H5T_INTEGER || type_of(d.get()).size != 1)
        throw UserError(strfmt("dataset %s is not 1-D bytes (uint8)", path.c_str()));
    std::string out(shape[0], '\0');
    if (!out.empty()) read_dataset(d.get(), Kind::u8, out.data());
    return out;
}

} // namespace dptrain::h5
