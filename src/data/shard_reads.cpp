// ShardSet's reads: a batch's rows, the labels cached at open, and loading --io memory's node
// buffer. Not for: finding, opening or checking shards (shards.cpp).
#include "dptrain/data/shards.h"

#include "dptrain/comm/communicator.h"
#include "dptrain/core/error.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dptrain {

void read_fully(int fd, void* dst, size_t bytes, long at, const std::string& path) {
    char* p = static_cast<char*>(dst);
    for (size_t done = 0; done < bytes;) {
        ssize_t got = ::pread(fd, p + done, bytes - done, at + (long)done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            throw UserError(strfmt("%s: read of %zu bytes at offset %ld failed (%s); is the file truncated, or the "
                                   "filesystem unavailable?",
                                   path.c_str(), bytes, at, got == 0 ? "end of file" : std::strerror(errno)));
        done += (size_t)got;
    }
}

void ShardSet::load_node_memory() {
    MpiCommunicator node(comm_);
    const int L = node.size(), l = node.rank();
    const size_t D = (size_t)dim_;
    auto copy = std::make_shared<NodeCopy>();
    copy->buf = node_memory(comm_, (double)total_ * (D + 1) * 4, strfmt("the rows of %s/%s", dir_.c_str(), split_.c_str()));
    float* features = reinterpret_cast<float*>(copy->buf->segment(0));
    int* labels = reinterpret_cast<int*>(features + (size_t)total_ * D);
    copy->features = features;
    copy->labels = labels;
    // Kept even when a read below fails: freeing the window is collective over the node, so it
    // waits until every rank gives up together (the caller's all_ok).
    node_copy_ = copy;
    // This rank's share, one sequential run per shard straight into the buffer; labels checked once.
    long lo = total_ * l / L, hi = total_ * (l + 1) / L;
    for (Shard& sh : shards_) {
        long a = std::max(lo, sh.first), b = std::min(hi, sh.first + sh.count);
        if (a >= b) continue;
        float* fdst = features + (size_t)a * D;
        int* ldst = labels + a;
        hsize_t rows = (hsize_t)(b - a), row0 = (hsize_t)(a - sh.first);
        if (sh.fd >= 0) {
            read_fully(sh.fd, fdst, rows * D * sizeof(float), sh.features_at + (long)(row0 * D * sizeof(float)), sh.path);
            read_fully(sh.fd, ldst, rows * sizeof(int), sh.labels_at + (long)(row0 * sizeof(int)), sh.path);
        } else {
            std::lock_guard<std::mutex> g(h5::lock());
            h5::Hid fspace(H5Dget_space(sh.features.get()), H5Sclose), lspace(H5Dget_space(sh.labels.get()), H5Sclose);
            hsize_t start[2] = {row0, 0}, count[2] = {rows, (hsize_t)D}, lcount[2] = {rows, 1};
            H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
            H5Sselect_hyperslab(lspace.get(), H5S_SELECT_SET, start, nullptr, lcount, nullptr);
            h5::Hid mf(H5Screate_simple(2, count, nullptr), H5Sclose), ml(H5Screate_simple(1, count, nullptr), H5Sclose);
            if (H5Dread(sh.features.get(), H5T_NATIVE_FLOAT, mf.get(), fspace.get(), H5P_DEFAULT, fdst) < 0 ||
                H5Dread(sh.labels.get(), H5T_NATIVE_INT32, ml.get(), lspace.get(), H5P_DEFAULT, ldst) < 0)
                throw UserError(strfmt("%s: reading rows %llu..%llu failed (file truncated or corrupt?); regenerate or "
                                       "restore the shard",
                                       sh.path.c_str(), (unsigned long long)row0, (unsigned long long)(row0 + rows)));
        }
        for (long r = 0; r < b - a; ++r)
            if (ldst[r] < 0 || ldst[r] >= classes_)
                bad_label(sh, (long)row0 + r, ldst[r]);
    }
}

// Checked at open, when all fit, so a bad label stops start-up, not mid-training. Direct shards
// keep them (one pread a row, not two); HDF5 shards read them again with their rows.
void ShardSet::cache_labels() {
    if (total_ * 4 > kLabelCacheBytes) return;
    for (Shard& sh : shards_) {
        auto labels = std::make_shared<std::vector<int>>((size_t)sh.count);
        if (sh.fd >= 0) {
            read_fully(sh.fd, labels->data(), (size_t)sh.count * sizeof(int), sh.labels_at, sh.path);
        } else if (H5Dread(sh.labels.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels->data()) < 0) {
            throw UserError(strfmt("%s: reading /labels failed (file truncated or corrupt?); restore or regenerate the "
                                   "shard",
                                   sh.path.c_str()));
        }
        for (long r = 0; r < sh.count; ++r)
            if ((*labels)[r] < 0 || (*labels)[r] >= classes_)
                bad_label(sh, r, (*labels)[r]);
        if (sh.fd >= 0) sh.label_cache = std::move(labels);
    }
}

void ShardSet::read_rows(const long* idx, int n, float* x, int* y) {
    if (n > max_rows_) throw std::invalid_argument("ShardSet::read_rows: more rows than max_rows");
    if (node_copy_) {
        const size_t D = (size_t)dim_;
        // Random rows are latency-bound: prefetch a few ahead.
        const float* F = node_copy_->features;
        const int* Lb = node_copy_->labels;
        for (int i = 0; i < n; ++i) {
            if (i + 8 < n) {
                const char* ahead = reinterpret_cast<const char*>(F + (size_t)idx[i + 8] * D);
                for (size_t off = 0; off < D * sizeof(float); off += 64) __builtin_prefetch(ahead + off);
                __builtin_prefetch(Lb + idx[i + 8]);
            }
            std::memcpy(x + (size_t)i * D, F + (size_t)idx[i] * D, D * sizeof(float));
            y[i] = Lb[idx[i]];
        }
        return;
    }
    order_.clear();
    for (int i = 0; i < n; ++i) order_.emplace_back(idx[i], i);
    std::sort(order_.begin(), order_.end());
    size_t k = 0;
    // Collective reads visit every shard in order on every rank, empty reads included.
    size_t next_shard = 0;
    while (k < order_.size() || (mode_ == IoMode::collective && next_shard < shards_.size())) {
        Shard* shp;
        if (mode_ == IoMode::collective) {
            shp = &shards_[next_shard++];
        } else {

            long gi = order_[k].first;
            auto it = std::upper_bound(shards_.begin(), shards_.end(), gi,
                                       [](long v, const Shard& s) { return v < s.first; });
            shp = &*(it - 1);
        }
        Shard& sh = *shp;
        size_t begin = k;
        while (k < order_.size() && order_[k].first < sh.first + sh.count) ++k;
        if (sh.fd >= 0) read_direct(sh, begin, k);
        else read_hdf5(sh, begin, k);
        // Packed in file order in xs_/ys_: check labels, place in batch order.
        const size_t D = (size_t)dim_;
        for (size_t r = 0; r < k - begin; ++r) {
            auto [row, pos] = order_[begin + r];
            int label = ys_[r];
            if (label < 0 || label >= classes_)
                bad_label(sh, row - sh.first, label);
            std::memcpy(x + (size_t)pos * D, xs_.data() + r * D, D * sizeof(float));
            y[pos] = label;
        }
    }
}

void ShardSet::read_direct(Shard& sh, size_t begin, size_t end) {
    const size_t row_bytes = (size_t)dim_ * sizeof(float);
    for (size_t r = begin; r < end;) {
        size_t e = r + 1;
        while (e < end && order_[e].first == order_[e - 1].first + 1) ++e;
        long row = order_[r].first - sh.first;
        size_t rows = e - r;
        read_fully(sh.fd, xs_.data() + (r - begin) * dim_, rows * row_bytes, sh.features_at + row * (long)row_bytes, sh.path);
        if (sh.label_cache) std::memcpy(ys_.data() + (r - begin), sh.label_cache->data() + row, rows * sizeof(int));
        else read_fully(sh.fd, ys_.data() + (r - begin), rows * sizeof(int), sh.labels_at + row * (long)sizeof(int), sh.path);
        r = e;
    }
}

void ShardSet::read_hdf5(Shard& sh, size_t begin, size_t end) {
    const hsize_t D = (hsize_t)dim_;
    hsize_t rows = end - begin;
    std::lock_guard<std::mutex> g(h5::lock());
    h5::Hid fspace(H5Dget_space(sh.features.get()), H5Sclose);
    h5::Hid lspace(H5Dget_space(sh.labels.get()), H5Sclose);
    if (rows == 0) {  // a collective read must still take part
        hsize_t one[2] = {1, D};
        h5::Hid mf(H5Screate_simple(2, one, nullptr), H5Sclose), ml(H5Screate_simple(1, one, nullptr), H5Sclose);
        H5Sselect_none(fspace.get());
        H5Sselect_none(lspace.get());
        H5Sselect_none(mf.get());
        H5Sselect_none(ml.get());
        if (H5Dread(sh.features.get(), H5T_NATIVE_FLOAT, mf.get(), fspace.get(), xfer_.get(), xs_.data()) < 0 ||
            H5Dread(sh.labels.get(), H5T_NATIVE_INT32, ml.get(), lspace.get(), xfer_.get(), ys_.data()) < 0)
            throw UserError(strfmt("%s: collective read failed", sh.path.c_str()));
        return;
    }
    for (size_t r = begin; r < end;) {
        size_t e = r + 1;
        while (e < end && order_[e].first == order_[e - 1].first + 1) ++e;
        hsize_t start[2] = {(hsize_t)(order_[r].first - sh.first), 0};
        hsize_t count[2] = {(hsize_t)(e - r), D}, lcount[2] = {(hsize_t)(e - r), 1};  // labels (N,) or (N, 1)
        H5S_seloper_t op = r == begin ? H5S_SELECT_SET : H5S_SELECT_OR;
        if (H5Sselect_hyperslab(fspace.get(), op, start, nullptr, count, nullptr) < 0 ||
            H5Sselect_hyperslab(lspace.get(), op, start, nullptr, lcount, nullptr) < 0)
            throw UserError(strfmt("%s: cannot select rows %llu..%llu", sh.path.c_str(), (unsigned long long)start[0],
                                   (unsigned long long)(start[0] + count[0])));
        r = e;
    }
    hsize_t mdims[2] = {rows, D};
    h5::Hid mf(H5Screate_simple(2, mdims, nullptr), H5Sclose);
    h5::Hid ml(H5Screate_simple(1, mdims, nullptr), H5Sclose);
    hid_t xfer = xfer_.get() >= 0 ? xfer_.get() : H5P_DEFAULT;
    if (H5Dread(sh.features.get(), H5T_NATIVE_FLOAT, mf.get(), fspace.get(), xfer, xs_.data()) < 0 ||
        H5Dread(sh.labels.get(), H5T_NATIVE_INT32, ml.get(), lspace.get(), xfer, ys_.data()) < 0)
        throw UserError(strfmt("%s: reading %llu rows failed (file truncated or corrupt?); regenerate or restore the shard",
                               sh.path.c_str(), (unsigned long long)rows));
}

} // namespace dptrain
