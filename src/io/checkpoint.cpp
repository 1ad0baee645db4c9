// Atomic, checksummed HDF5 checkpoints: the file's header, writing (also in the background) and
// loading one file. Not for: the checkpoint directory's lock, names and choice of the newest
// (checkpoint_dir.cpp), or deciding when to checkpoint (the trainer).
#include "dptrain/io/checkpoint.h"

#include "dptrain/core/checksum.h"

#include "dptrain/core/error.h"
#include "dptrain/data/h5.h"
#include "dptrain/io/promotion.h"
#include "dptrain/core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

namespace dptrain {

// Checksum from `from` to the end, and the size.
static uint64_t file_checksum(int fd, size_t from, size_t* size) {
    struct stat st;
    if (fstat(fd, &st) != 0) return 0;
    *size = (size_t)st.st_size;
    Checksum64 c;
    std::vector<char> buf(1 << 20);
    for (size_t at = from; at < *size;) {
        ssize_t got = ::pread(fd, buf.data(), std::min(buf.size(), *size - at), (off_t)at);
        if (got <= 0) return 0;
        c.update(buf.data(), (size_t)got);
        at += (size_t)got;
    }
    return c.value();
}

// The format's version follows the magic word; this build writes and reads version 1.
static const char kMagicWord[] = "DPTRAIN-CHECKPOINT";
static const int kFormat = 1;

// Magic, size, checksum of the HDF5 part.
static void write_header(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDWR);
    if (fd < 0) throw UserError(strfmt("cannot reopen %s: %s", path.c_str(), std::strerror(errno)));
    size_t size = 0;
    uint64_t sum = file_checksum(fd, kCheckpointHeader, &size);
    char header[kCheckpointHeader] = {0};
    std::snprintf(header, sizeof header, "%s %d size=%zu sum=%016llx\n", kMagicWord, kFormat, size,
                  (unsigned long long)sum);
    ssize_t w = ::pwrite(fd, header, sizeof header, 0);
    int err = errno;
    ::close(fd);
    if (w != (ssize_t)sizeof header) throw UserError(strfmt("cannot write the header: %s (disk full?)", std::strerror(err)));
}

// Throws UserError unless size and checksum match. A later format on a file that verifies throws
// CheckpointFormatError; any other format number is damage.
static void verify_header(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw UserError(strfmt("%s: cannot open: %s", path.c_str(), std::strerror(errno)));
    char header[kCheckpointHeader + 1] = {0};
    ssize_t got = ::pread(fd, header, kCheckpointHeader, 0);
    size_t want_size = 0, size = 0;
    unsigned long long want_sum = 0;
    int format = 0, at = 0;
    const std::string fmt = std::string(kMagicWord) + " %d %n";
    const bool parsed = got == (ssize_t)kCheckpointHeader && std::sscanf(header, fmt.c_str(), &format, &at) == 1 &&
                        at > 0 && std::sscanf(header + at, "size=%zu sum=%llx", &want_size, &want_sum) == 2;
    uint64_t sum = parsed ? file_checksum(fd, kCheckpointHeader, &size) : 0;
    ::close(fd);
    if (!parsed) throw UserError(strfmt("%s: not a dptrain checkpoint (no valid header)", path.c_str()));
    if (size != want_size)
        throw UserError(strfmt("%s: truncated or extended: %zu bytes, its header says %zu", path.c_str(), size, want_size));
    if (sum != want_sum) throw UserError(strfmt("%s: file checksum mismatch (corrupt file)", path.c_str()));
    if (format > kFormat)
        throw CheckpointFormatError(strfmt("%s: a checkpoint of format %d, written by a later dptrain; this one reads "
                                           "format %d: run the dptrain that wrote it (the file is left as it is)",
                                           path.c_str(), format, kFormat));
    if (format != kFormat)
        throw UserError(strfmt("%s: its header names format %d, which no dptrain writes (a damaged header)",
                               path.c_str(), format));
}

std::string checkpoint_path(const std::string& dir, long step) { return strfmt("%s/ckpt-%08ld.h5", dir.c_str(), step); }

static void fsync_path(const std::string& path, bool dir) {
    int fd = ::open(path.c_str(), dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) throw UserError(strfmt("%s: cannot open to sync: %s", path.c_str(), std::strerror(errno)));
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) throw UserError(strfmt("%s: fsync failed: %s (disk full?)", path.c_str(), std::strerror(err)));
}

// For their checksum (the tensors carry their own).
static std::string meta_text(const CheckpointState& s) {
    return strfmt("step=%ld epoch=%ld offset=%ld batch=%ld seed=%llu world=%d model=%s optimizer=%s\n", s.step, s.epoch,
                  s.epoch_offset, s.global_batch, (unsigned long long)s.seed, s.world_size, s.model.c_str(),
                  s.optimizer.c_str()) +
           s.options + "\ntokenizer=" + s.tokenizer + " vocab=" + s.vocab +
           (s.train_samples > 0 ? strfmt("\ntrain_samples=%ld", s.train_samples) : std::string());  // older: absent
}

// The updates count has its own checksum, outside meta_text's, so older dptrains still verify new
// files (else a roll-back of the binary set every new checkpoint aside as damaged).
static uint64_t updates_checksum(long updates) {
    const std::string t = strfmt("updates=%ld", updates);
    return checksum64(t.data(), t.size());
}

TensorPieces TensorPieces::whole(const float* v, size_t n) {
    TensorPieces t;
    t.size = n;
    bool given = false;
    t.next = [v, n, given](size_t* count) mutable -> const float* {
        *count = given ? 0 : n;
        const float* p = given ? nullptr : v;
        given = true;
        return p;
    };
    return t;
}

// Checksummed as they go (the same sum as the whole).
static void write_checked(hid_t file, const std::string& name, const TensorPieces& t) {
    h5::Hid d = h5::create_dataset(file, name, h5::Kind::f32, (hsize_t)t.size);
    Checksum64 sum;
    size_t at = 0, n = 0;
    while (const float* p = t.next(&n)) {
        if (at + n > t.size || (at + n < t.size && n % 2 != 0))
            throw UserError(strfmt("dataset %s: a piece of %zu floats at %zu runs past its %zu floats, or is odd "
                                   "before the last piece",
                                   name.c_str(), n, at, t.size));
        h5::write_range(d.get(), h5::Kind::f32, at, n, p);
        sum.update(p, n * sizeof(float));
        at += n;
    }
    if (at != t.size) throw UserError(strfmt("dataset %s: %zu of %zu floats written", name.c_str(), at, t.size));
    h5::write_attr_u64(d.get(), "checksum", sum.value());
}

// Keeps the newest `keep`, the one just written, and every promoted one (servers may be loading
// it); an unreadable promotion log keeps them all.
static void rotate(const std::string& dir, const std::string& written, int keep) {
    std::vector<Promotion> promoted;
    try {
        promoted = read_promotions(dir);
    } catch (const UserError&) {
        return;
    }
    const auto all = list_checkpoints(dir);
    for (size_t i = (size_t)keep; i < all.size(); ++i) {
        const long step = checkpoint_step(all[i]);
        const bool kept = std::any_of(promoted.begin(), promoted.end(), [&](const Promotion& p) { return p.step == step; });
        if (all[i] != written && !kept) std::remove(all[i].c_str());
    }
}

std::string save_checkpoint(const std::string& dir, const CheckpointState& s, int keep) {
    return save_checkpoint(dir, s, keep, TensorPieces::whole(s.params.data(), s.params.size()),
                           TensorPieces::whole(s.opt_m.data(), s.opt_m.size()),
                           TensorPieces::whole(s.opt_v.data(), s.opt_v.size()));
}

std::string save_checkpoint(const std::string& dir, const CheckpointState& s, int keep, const TensorPieces& params,
                            const TensorPieces& m, const TensorPieces& v) {
    make_directories(dir, "--checkpoint-dir");
    std::string path = checkpoint_path(dir, s.step);
    std::string tmp = strfmt("%s/.ckpt-%08ld.h5.tmp", dir.c_str(), s.step);
    {
        std::lock_guard<std::mutex> g(h5::lock());
        try {
            h5::Hid f = h5::create_file(tmp, kCheckpointHeader);
            hid_t root = f.get();
            h5::write_attr_i64(root, "step", s.step);
            h5::write_attr_i64(root, "epoch", s.epoch);
            h5::write_attr_i64(root, "epoch_offset", s.epoch_offset);
            h5::write_attr_i64(root, "global_batch", s.global_batch);
            if (s.train_samples > 0) h5::write_attr_i64(root, "train_samples", s.train_samples);
            if (s.updates >= 0) {
                h5::write_attr_i64(root, "updates", s.updates);
                h5::write_attr_u64(root, "updates_checksum", updates_checksum(s.updates));
            }
            h5::write_attr_u64(root, "seed", s.seed);
            h5::write_attr_i64(root, "world_size", s.world_size);
            h5::write_attr_str(root, "model", s.model);
            h5::write_attr_str(root, "optimizer", s.optimizer);
            h5::write_attr_str(root, "options", s.options);
            h5::write_attr_str(root, "tokenizer", s.tokenizer);
            h5::write_text(root, "vocab", s.vocab);
            std::string meta = meta_text(s);
            h5::write_attr_u64(root, "meta_checksum", checksum64(meta.data(), meta.size()));
            write_checked(root, "/params", params);
            write_checked(root, "/opt_m", m);
            write_checked(root, "/opt_v", v);
            errno = 0;
            if (H5Fflush(root, H5F_SCOPE_GLOBAL) < 0) throw UserError("flush failed (" + h5::reason("disk full?") + ")");
            if (H5Fclose(f.release()) < 0) throw UserError("close failed (" + h5::reason("disk full?") + ")");
            write_header(tmp);
        } catch (const UserError& e) {
            std::remove(tmp.c_str());
            throw UserError(strfmt("checkpoint %s: %s; the previous checkpoints are intact", path.c_str(), e.what()));
        }
    }
    try {
        fsync_path(tmp, false);
    } catch (const UserError& e) {
        std::remove(tmp.c_str());
        throw UserError(strfmt("checkpoint %s: %s; the previous checkpoints are intact", path.c_str(), e.what()));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        std::remove(tmp.c_str());
        throw UserError(strfmt("checkpoint %s: rename failed: %s", path.c_str(), std::strerror(err)));
    }
    fsync_path(dir, true);

    rotate(dir, path, keep);
    return path;
}

static std::vector<float> read_checked(hid_t file, const std::string& path, const std::string& name) {
    h5::Hid d = h5::open_dataset(file, path, name, "the checkpoint is incomplete");
    h5::expect_kind(d.get(), h5::Kind::f32, path, name, "the checkpoint is not dptrain's");
    auto dims = h5::dims(d.get());
    if (dims.size() != 1) throw UserError(strfmt("%s: dataset %s is not 1-D", path.c_str(), name.c_str()));
    std::vector<float> v(dims[0]);
    try {
        if (!v.empty()) h5::read_dataset(d.get(), h5::Kind::f32, v.data());
    } catch (const UserError& e) {
        throw UserError(strfmt("%s: dataset %s: %s", path.c_str(), name.c_str(), e.what()));
    }
    uint64_t want = h5::read_attr_u64(d.get(), "checksum");
    if (checksum64(v.data(), v.size() * sizeof(float)) != want)
        throw UserError(strfmt("%s: dataset %s fails its checksum (corrupt file)", path.c_str(), name.c_str()));
    return v;
}

CheckpointState load_checkpoint(const std::string& path) {
    verify_header(path);
    std::lock_guard<std::mutex> g(h5::lock());
    h5::Hid f = h5::open_file(path, "the checkpoint file is missing or damaged");
    CheckpointState s;
    try {
        hid_t root = f.get();
        s.step = h5::read_attr_i64(root, "step");
        s.epoch = h5::read_attr_i64(root, "epoch");
        s.epoch_offset = h5::read_attr_i64(root, "epoch_offset");
        s.global_batch = h5::read_attr_i64(root, "global_batch");
        if (h5::has_attr(root, "train_samples")) s.train_samples = h5::read_attr_i64(root, "train_samples");
        if (h5::has_attr(root, "updates")) {
            s.updates = h5::read_attr_i64(root, "updates");
            if (!h5::has_attr(root, "updates_checksum") ||
                h5::read_attr_u64(root, "updates_checksum") != updates_checksum(s.updates))
                throw UserError("its updates count fails its checksum (corrupt file)");
        }
        s.seed = h5::read_attr_u64(root, "seed");
        s.world_size = (int)h5::read_attr_i64(root, "world_size");
        s.model = h5::read_attr_str(root, "model");
        s.optimizer = h5::read_attr_str(root, "optimizer");
        s.options = h5::read_attr_str(root, "options");
        s.tokenizer = h5::read_attr_str(root, "tokenizer");
        s.vocab = h5::read_text(root, "vocab");
        std::string meta = meta_text(s);
        if (h5::read_attr_u64(root, "meta_checksum") != checksum64(meta.data(), meta.size()))
            throw UserError("its attributes (step, model, options, ...) fail their checksum (corrupt file)");
        s.params = read_checked(root, path, "/params");
        s.opt_m = read_checked(root, path, "/opt_m");
        s.opt_v = read_checked(root, path, "/opt_v");
    } catch (const UserError& e) {
        std::string msg = e.what();
        if (msg.rfind(path, 0) == 0) throw;
        throw UserError(strfmt("%s: %s", path.c_str(), msg.c_str()));
    }
    return s;
}

void corrupt_checkpoint_file(const std::string& path) {
    haddr_t at = HADDR_UNDEF;
    {
        std::lock_guard<std::mutex> g(h5::lock());
        h5::Hid f = h5::open_file(path, "corrupt_checkpoint_file");
        h5::Hid d = h5::open_dataset(f.get(), path, "/params", "");
        at = H5Dget_offset(d.get());
    }
    int fd = ::open(path.c_str(), O_RDWR);
    if (fd < 0 || at == HADDR_UNDEF) throw UserError(strfmt("%s: cannot corrupt it for the injected fault", path.c_str()));
    unsigned char junk[64];
    for (int i = 0; i < 64; ++i) junk[i] = (unsigned char)(0xA5 ^ i);
    ssize_t w = ::pwrite(fd, junk, sizeof junk, (off_t)at);
    ::fsync(fd);
    ::close(fd);
    if (w != (ssize_t)sizeof junk) throw UserError(strfmt("%s: cannot corrupt it for the injected fault", path.c_str()));
}

AsyncCheckpointer::AsyncCheckpointer() : thread_(&AsyncCheckpointer::run, this) {}

AsyncCheckpointer::~AsyncCheckpointer() {
    try {
        wait();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dptrain: error: %s\n", e.what());
    }
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

CheckpointState& AsyncCheckpointer::next() {
    wait();
    return state_;
}

void AsyncCheckpointer::start(const std::string& dir, int keep) {
    {
        std::lock_guard<std::mutex> g(mu_);
        dir_ = dir;
        keep_ = keep;
        pending_ = true;
    }
    cv_.notify_all();
}

std::string AsyncCheckpointer::wait() {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return !pending_; });
    if (!error_.empty()) {
        std::string e = error_;
        error_.clear();
        throw UserError(e);
    }
    return path_;
}

void AsyncCheckpointer::run() {
    std::unique_lock<std::mutex> g(mu_);
    for (;;) {
        cv_.wait(g, [&] { return stop_ || pending_; });
        if (stop_ && !pending_) return;
        g.unlock();
        std::string path, err;
        try {
            path = save_checkpoint(dir_, state_, keep_);
        } catch (const std::exception& e) {
            err = e.what();
        }
        g.lock();
        path_ = path;
        error_ = err;
        pending_ = false;
        cv_.notify_all();
    }
}

} // namespace dptrain
