// ShardSet: finding, opening and checking a split's shards, and the notes and advice about them.
// Not for: reading rows (shard_reads.cpp).
#include "dptrain/data/shards.h"

#include "dptrain/comm/communicator.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

namespace dptrain {

static std::string shard_name(const std::string& dir, const std::string& split, int i, int of) {
    return strfmt("%s/%s-%05d-of-%05d.h5", dir.c_str(), split.c_str(), i, of);
}

// Only a contiguous, allocated, unfiltered native dataset is a plain array at a fixed offset;
// anything else keeps the HDF5 path. Why: docs/NOTES.md, "Note [direct reads]".
static void setup_direct(const std::string& path, hid_t features, hid_t labels, hsize_t rows, hsize_t dim, int* fd,
                         long* features_at, long* labels_at) {
    auto plain = [](hid_t dset, hid_t native) {
        h5::Hid dcpl(H5Dget_create_plist(dset), H5Pclose);
        h5::Hid type(H5Dget_type(dset), H5Tclose);
        return H5Pget_layout(dcpl.get()) == H5D_CONTIGUOUS && H5Pget_nfilters(dcpl.get()) == 0 &&
               H5Tequal(type.get(), native) > 0 && H5Dget_offset(dset) != HADDR_UNDEF;
    };
    if (!plain(features, H5T_NATIVE_FLOAT) || !plain(labels, H5T_NATIVE_INT32)) return;
    long fo = (long)H5Dget_offset(features), lo = (long)H5Dget_offset(labels);
    int f = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f < 0) return;
    struct stat st;
    long need = std::max(fo + (long)(rows * dim * 4), lo + (long)(rows * 4));
    if (fstat(f, &st) != 0 || st.st_size < need) {
        ::close(f);
        throw UserError(strfmt("%s: truncated: %lld bytes, its datasets need %ld; restore or regenerate the shard",
                               path.c_str(), (long long)st.st_size, need));
    }
    *fd = f;
    *features_at = fo;
    *labels_at = lo;
}

// Other types (h5py's defaults are float64 and int64) are converted by HDF5 as read; a label
// beyond int32 is clipped, then refused as out of range. Returns what is converted, or "".
static std::string conversions(hid_t features, hid_t labels, const std::string& path, const std::string& hint) {
    const h5::TypeInfo f = h5::type_of(features), l = h5::type_of(labels);
    if (f.cls != H5T_FLOAT || (f.size != 2 && f.size != 4 && f.size != 8))
        throw UserError(strfmt("%s: dataset /features has dtype %s, expected float32 (float16 and float64 are "
                               "converted as read); %s",
                               path.c_str(), f.name.c_str(), hint.c_str()));
    if (l.cls != H5T_INTEGER || l.size > 8)
        throw UserError(strfmt("%s: dataset /labels has dtype %s, expected int32 (other integer types are converted "
                               "as read); %s",
                               path.c_str(), l.name.c_str(), hint.c_str()));
    std::string out;
    if (f.size != 4) out = f.name + " features";
    if (!(l.size == 4 && l.is_signed)) out += (out.empty() ? "" : ", ") + l.name + " labels";
    return out;
}

ShardSet::~ShardSet() {
    for (Shard& sh : shards_)
        if (sh.fd >= 0) ::close(sh.fd);
}

// Shares what opening read and checked (offsets, label caches, node copy); opening again would
// reread every shard's metadata and labels per reader thread and hold the labels twice.
std::unique_ptr<Dataset> ShardSet::reopen() const {
    if (mode_ == IoMode::collective) throw std::logic_error("ShardSet::reopen: collective reads have one reader");
    std::lock_guard<std::mutex> g(h5::lock());
    std::unique_ptr<ShardSet> s(new ShardSet());
    s->dir_ = dir_;
    s->split_ = split_;
    s->mode_ = mode_;
    s->comm_ = comm_;
    s->node_copy_ = node_copy_;
    s->total_ = total_;
    s->dim_ = dim_;
    s->classes_ = classes_;
    s->max_rows_ = max_rows_;
    for (const Shard& sh : shards_) s->shards_.push_back(sh.reopened(shards_.size()));
    s->order_.reserve(max_rows_);
    s->xs_.resize((size_t)max_rows_ * dim_);
    s->ys_.resize(max_rows_);
    return s;
}

ShardSet::Shard ShardSet::Shard::reopened(size_t n_shards) const {
    Shard c;
    c.path = path;
    c.first = first;
    c.count = count;
    c.converted = converted;
    c.label_dtype = label_dtype;
    c.features_at = features_at;
    c.labels_at = labels_at;
    c.label_cache = label_cache;
    if (fd >= 0) {
        c.fd = open_again(path);
        return c;
    }
    c.file = h5::open_file(path, kOpenAgainHint);
    c.features = h5::open_dataset(c.file.get(), path, "/features", kOpenAgainHint);
    c.labels = h5::open_dataset(c.file.get(), path, "/labels", kOpenAgainHint);
    c.size_chunk_caches(n_shards);
    return c;
}

// Instead of HDF5's 1 MiB: room for the shard's datasets, 256 MiB per reader over all shards.
void ShardSet::Shard::size_chunk_caches(size_t n_shards) {
    const size_t budget = std::min<size_t>(64u << 20, (256u << 20) / n_shards);
    chunk_cache = h5::size_chunk_cache(file.get(), features, "/features", budget / 5 * 4) +
                  h5::size_chunk_cache(file.get(), labels, "/labels", budget / 5);
}

void ShardSet::bad_label(const Shard& sh, long row, int label) const {
    // A wider label beyond int32 arrives clipped: its true value is unknown here.
    const bool clipped = sh.label_dtype != "int32" && (label == INT32_MAX || label == INT32_MIN);
    const std::string value = clipped ? strfmt("is beyond int32 (%s %s label), so", sh.label_dtype[0] == 'i' ? "an" : "a",
                                               sh.label_dtype.c_str())
                                      : strfmt("= %d is", label);
    throw UserError(strfmt("%s: /labels[%ld] %s outside [0, num_classes = %d); fix the labels or the attribute",
                           sh.path.c_str(), row, value.c_str(), classes_));
}

// Rewrites the split as float32/int32 shards into a new directory, never over them.
static std::string convert_command(const std::string& split, const std::vector<std::string>& paths,
                                   const std::string& classes) {
    std::string inputs;
    for (size_t i = 0; i < paths.size() && i < 4; ++i) inputs += " --input " + paths[i];
    if (paths.size() > 4) inputs += strfmt(" ... (all %zu shards in order)", paths.size());
    return strfmt("`%s ingest --split %s --shards %zu --num-classes %s%s --out NEW_DIR`", runnable("dptrain-data").c_str(),
                  split.c_str(), paths.size(), classes.c_str(), inputs.c_str());
}

std::string ShardSet::conversion_note() const {
    const std::string rest = conversion_note_of_shards();
    if (empty_.empty()) return rest;
    return strfmt("note: %s: %zu shard%s of no samples left out (%s%s)%s%s", split_.c_str(), empty_.size(),
                  empty_.size() == 1 ? "" : "s", empty_[0].c_str(), empty_.size() > 1 ? ", ..." : "",
                  rest.empty() ? "" : "\n", rest.c_str());
}

std::string ShardSet::conversion_note_of_shards() const {
    const Shard* first = nullptr;
    int n = 0, chunked = 0;
    for (const Shard& sh : shards_) {
        if (!sh.converted.empty()) {
            if (!first) first = &sh;
            ++n;
        }
        if (sh.fd < 0) ++chunked;
    }
    std::vector<std::string> paths;
    for (const Shard& sh : shards_) paths.push_back(sh.path);
    // Random rows through the chunk cache cost ~4x a step (docs/BENCHMARKS.md); the evaluation
    // reads in order, so only train is told.
    if (!first && chunked > 0 && mode_ == IoMode::direct && split_ == "train")
        return strfmt("note: %s: %d of %zu shards are chunked or compressed: HDF5 reads their rows through its chunk "
                      "cache, not by direct reads (slower per row); --io memory holds them decompressed in the node's "
                      "memory, or store them contiguous once: %s",
                      split_.c_str(), chunked, shards_.size(), convert_command(split_, paths, std::to_string(classes_)).c_str());
    if (!first) return "";
    return strfmt("note: %s: %d of %zu shards hold %s (h5py's defaults); HDF5 converts them to float32 and int32 as "
                  "they are read, without direct reads%s. To convert once: %s",
                  split_.c_str(), n, shards_.size(), first->converted.c_str(),
                  first->converted.find("float64") != std::string::npos ? " (float64: twice the bytes)" : "",
                  convert_command(split_, paths, std::to_string(classes_)).c_str());
}

size_t ShardSet::held_bytes() const {
    size_t n = 0;
    for (const Shard& sh : shards_)
        n += (sh.label_cache ? sh.label_cache->size() * sizeof(int) : 0) +
             (sh.fd < 0 ? h5::kOpenFileBytes + sh.chunk_cache : 0);
    return n;
}

bool ShardSet::direct() const {
    for (const Shard& sh : shards_)
        if (sh.fd < 0) return false;
    return !shards_.empty();
}

std::vector<std::string> find_shards(const std::string& dir, const std::string& split, const std::string& hint) {
    DIR* d = opendir(dir.c_str());
    if (!d) throw UserError(strfmt("--data %s: directory not found; %s", dir.c_str(), hint.c_str()));
    std::map<int, int> of_counts;  // "of" value -> files seen with it
    bool train_seen = false;
    while (dirent* e = readdir(d)) {
        int i = 0, of = 0, used = 0;
        std::string fmt = split + "-%5d-of-%5d.h5%n";
        if (std::sscanf(e->d_name, fmt.c_str(), &i, &of, &used) == 2 && used == (int)std::strlen(e->d_name))
            of_counts[of]++;
        train_seen |= std::strncmp(e->d_name, "train-", 6) == 0;
    }
    closedir(d);
    if (of_counts.empty() && split == "val" && train_seen)  // written with --val-fraction 0, or --split train alone
        throw UserError(strfmt("--data %s: training shards but no val-NNNNN-of-NNNNN.h5 (the validation split, which "
                               "dptrain evaluates on); write it into %s with --split val (dptrain-data ingest or "
                               "tokens), or make the set again with a --val-fraction above 0",
                               dir.c_str(), dir.c_str()));
    if (of_counts.empty())
        throw UserError(strfmt("--data %s: no %s-NNNNN-of-NNNNN.h5 shards; %s", dir.c_str(), split.c_str(), hint.c_str()));
    if (of_counts.size() > 1)
        throw UserError(strfmt("--data %s: %s shards from different sets (differing -of-NNNNN counts); keep one set per directory",
                               dir.c_str(), split.c_str()));
    int of = of_counts.begin()->first;
    std::vector<std::string> paths;
    for (int i = 0; i < of; ++i) {
        paths.push_back(shard_name(dir, split, i, of));
        FILE* probe = std::fopen(paths.back().c_str(), "rb");
        if (!probe)
            throw UserError(strfmt("%s: shard missing (%d of %d %s shards present); restore it or %s", paths.back().c_str(),
                                   of_counts.begin()->second, of, split.c_str(), hint.c_str()));
        std::fclose(probe);
    }
    return paths;
}

int open_again(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        throw UserError(strfmt("%s: cannot open it again for another reader (%s); %s", path.c_str(),
                               std::strerror(errno), kOpenAgainHint));
    return fd;
}

std::shared_ptr<SharedWindow> node_memory(MPI_Comm node, double bytes, const std::string& what) {
    const double GiB = 1073741824.0, phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (bytes > 0.5 * phys)
        throw UserError(strfmt("--io memory: %s need %.2f GiB, more than half of this node's %.2f GiB of memory; use "
                               "--io direct",
                               what.c_str(), bytes / GiB, phys / GiB));
    const bool holder = MpiCommunicator(node).rank() == 0;
    return std::make_shared<SharedWindow>(node, holder ? (size_t)bytes : 0, /*own_pages=*/false,
                                          strfmt("--io memory: %s (%.2f GiB)", what.c_str(), bytes / GiB),
                                          "use --io direct, or give /dev/shm more room");
}

std::string ShardSet::where(long i) const {
    auto it = std::upper_bound(shards_.begin(), shards_.end(), i, [](long v, const Shard& s) { return v < s.first; });
    if (it == shards_.begin()) return Dataset::where(i);
    --it;
    return strfmt("%s row %ld", it->path.c_str(), i - it->first);
}

ShardSet ShardSet::open(const std::string& dir, const std::string& split, int max_rows, IoMode mode, MPI_Comm comm) {
    const std::string tool = runnable("dptrain-data");
    const std::string hint = strfmt("make shards of your data with `%s ingest --input FILE --out %s`, or synthetic "
                                    "ones with `%s synth --out %s` (format: data/README.md)",
                                    tool.c_str(), dir.c_str(), tool.c_str(), dir.c_str());
    std::vector<std::string> paths = find_shards(dir, split, hint);
    std::lock_guard<std::mutex> g(h5::lock());
    ShardSet s;
    s.dir_ = dir;
    s.split_ = split;
    s.max_rows_ = max_rows;
    s.mode_ = mode;
    s.comm_ = comm;
    h5::Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    if (mode == IoMode::collective) {
        H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL);
        s.xfer_ = h5::Hid(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
        H5Pset_dxpl_mpio(s.xfer_.get(), H5FD_MPIO_COLLECTIVE);
    }
    // The hint converts into a new directory, never over the shard itself.
    for (const std::string& path : paths)
        s.add_shard(path,
                    strfmt("convert the split with %s (K: the shards' num_classes; it takes any float or integer "
                           "features and integer labels; format: data/README.md)",
                           convert_command(split, paths, "K").c_str()),
                    fapl.get(), paths.size());
    if (s.shards_.empty())
        throw UserError(strfmt("--data %s: each of its %zu %s shards holds no samples; make the split again from data "
                               "that has some (format: data/README.md)",
                               dir.c_str(), paths.size(), split.c_str()));
    s.cache_labels();
    s.order_.reserve(max_rows);
    s.xs_.resize((size_t)max_rows * s.dim_);
    s.ys_.resize(max_rows);
    return s;
}

// Checks it alone and against the shards before it.
void ShardSet::add_shard(const std::string& path, const std::string& hint, hid_t fapl, size_t n_shards) {
    Shard sh;
    sh.path = path;
    sh.file = h5::open_file(sh.path,
                            strfmt("copy it again from its source, or make the set anew into a new directory "
                                   "(`%s ingest --input FILE --out NEW_DIR`)",
                                   runnable("dptrain-data").c_str()),
                            fapl);
    // Token shards given to the MLP: the fix is the model, not a conversion.
    if (H5Lexists(sh.file.get(), "/features", H5P_DEFAULT) <= 0 && H5Lexists(sh.file.get(), "/tokens", H5P_DEFAULT) > 0)
        throw UserError(strfmt("%s holds token shards (dataset /tokens): train a language model on them with --model "
                               "gpt (--model mlp reads /features and /labels)",
                               path.c_str()));
    sh.features = h5::open_dataset(sh.file.get(), sh.path, "/features", hint);
    sh.labels = h5::open_dataset(sh.file.get(), sh.path, "/labels", hint);
    sh.converted = conversions(sh.features.get(), sh.labels.get(), sh.path, hint);
    sh.label_dtype = h5::type_of(sh.labels.get()).name;
    auto fd = h5::dims(sh.features.get());
    auto ld = h5::dims(sh.labels.get());
    if (fd.size() != 2)
        throw UserError(strfmt("%s: /features has %zu dimensions, expected 2 (samples, features); %s", sh.path.c_str(),
                               fd.size(), hint.c_str()));
    // (N, 1) is how h5py writes a column; reads select rows x 1 either way.
    if (!(ld.size() == 1 || (ld.size() == 2 && ld[1] == 1)) || ld[0] != fd[0])
        throw UserError(strfmt("%s: /labels shape does not match /features (%llu samples): expected (%llu,) or (%llu, "
                               "1); %s",
                               sh.path.c_str(), (unsigned long long)fd[0], (unsigned long long)fd[0],
                               (unsigned long long)fd[0], hint.c_str()));
    // Any number type: h5py writes a Python int as int64, a float as float64.
    double k = 0;
    try {
        k = h5::read_attr_f64(sh.file.get(), "num_classes");
    } catch (const UserError& e) {
        throw UserError(strfmt("%s: %s (the number of classes); %s", sh.path.c_str(), e.what(), hint.c_str()));
    }
    if (!(k >= 2 && k <= 1e9 && k == std::floor(k)))
        throw UserError(strfmt("%s: num_classes = %g, expected a whole number of at least 2", sh.path.c_str(), k));
    const int classes = (int)k;
    if (shards_.empty()) {
        dim_ = (int)fd[1];
        classes_ = classes;
    } else if ((int)fd[1] != dim_ || classes != classes_) {
        throw UserError(strfmt("%s: %llu features and %d classes, but %s has %d and %d; shards of one set must agree",
                               sh.path.c_str(), (unsigned long long)fd[1], classes, shards_[0].path.c_str(), dim_,
                               classes_));
    }
    // Legal (data/README.md lets N differ); left out, and said in conversion_note.
    if (fd[0] == 0) {
        empty_.push_back(sh.path);
        return;
    }
    // A batch is staged in memory: refuse rows no batch could hold.
    if (fd[1] == 0 || (double)fd[1] * 4.0 * max_rows_ > (double)(1ull << 32))
        throw UserError(strfmt("%s: /features has %llu features per sample; a batch of %d such rows does not fit "
                               "in 4 GiB of host memory",
                               sh.path.c_str(), (unsigned long long)fd[1], max_rows_));
    if (mode_ != IoMode::collective)
        setup_direct(sh.path, sh.features.get(), sh.labels.get(), fd[0], fd[1], &sh.fd, &sh.features_at, &sh.labels_at);
    if (sh.fd >= 0) {
        // pread from here on: closed, as an open file holds ~0.5 MiB of HDF5 metadata cache
        // (docs/BENCHMARKS.md, "Memory per shard: HDF5 handles closed after open").
        sh.labels.reset();
        sh.features.reset();
        sh.file.reset();
    } else {
        sh.size_chunk_caches(n_shards);
    }
    sh.first = total_;
    sh.count = (long)fd[0];
    total_ += sh.count;
    shards_.push_back(std::move(sh));
}

} // namespace dptrain
