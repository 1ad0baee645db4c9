// Token shards: opening and checking a split, and reading its windows. Not for: the tokenizers
// (tokenizer.cpp) or tabular shards (shards.cpp).
#include "dptrain/data/tokens.h"

#include "dptrain/comm/communicator.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/core/rng.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

namespace dptrain {

// ---- TokenShardSet

// A second reader shares what opening read and checked and opens its own handles: opening again
// would re-read every shard's vocabulary per reader thread (about 1 MB a shard for GPT-2's).
std::unique_ptr<Dataset> TokenShardSet::reopen() const {
    std::lock_guard<std::mutex> g(h5::lock());
    std::unique_ptr<TokenShardSet> s(new TokenShardSet());
    s->dir_ = dir_;
    s->split_ = split_;
    s->tok_ = tok_;
    s->total_ = total_;
    s->tokens_ = tokens_;
    s->T_ = T_;
    s->seed_ = seed_;
    s->shift_ = shift_;
    s->mode_ = mode_;
    s->node_ = node_;
    s->node_copy_ = node_copy_;
    for (const Shard& sh : shards_) {
        Shard c;
        c.path = sh.path;
        c.first = sh.first;
        c.windows = sh.windows;
        c.tokens = sh.tokens;
        c.at = sh.at;
        c.width = sh.width;
        c.mem_at = sh.mem_at;
        if (sh.fd >= 0) {
            c.fd = open_again(sh.path);
        } else {
            c.file = h5::open_file(sh.path, kOpenAgainHint);
            c.data = h5::open_dataset(c.file.get(), sh.path, "/tokens", kOpenAgainHint);
        }
        s->shards_.push_back(std::move(c));
    }
    s->raw_.resize(raw_.size());
    return s;
}

size_t TokenShardSet::held_bytes() const {
    size_t n = 0;
    for (const Shard& sh : shards_)
        if (sh.fd < 0)
            n += h5::kOpenFileBytes + h5::kDefaultChunkSlotBytes +
                 std::min(h5::kDefaultChunkCacheBytes, (size_t)sh.tokens * sh.width);
    return n;
}

double TokenShardSet::memory_bytes() const {
    double b = 0;
    for (const Shard& sh : shards_) b += (double)sh.tokens * sh.width;
    return b;
}

void TokenShardSet::load_node_memory() {
    MpiCommunicator node(node_);
    const int L = node.size(), l = node.rank();
    auto copy = node_memory(node_, memory_bytes(), strfmt("the tokens of %s/%s", dir_.c_str(), split_.c_str()));
    // Kept from here on, even when a read below fails: freeing is collective over the node.
    node_copy_ = copy;
    // This rank's share of all shards' tokens in order, each shard's piece in one read.
    long lo = tokens_ * l / L, hi = tokens_ * (l + 1) / L, first = 0;
    for (Shard& sh : shards_) {
        long a = std::max(lo, first), b = std::min(hi, first + sh.tokens);
        first += sh.tokens;
        if (a >= b) continue;
        long t0 = a - (first - sh.tokens), n = b - a;
        read_stored(sh, t0, n, copy->segment(0) + sh.mem_at + (size_t)t0 * sh.width);
    }
}

// A table equal to the first shard's (first_table, set here when first is null) reuses that
// tokenizer unparsed: a BPE table is ~1 MB and a split may have 1000 shards.
static TokenizerPtr shard_tokenizer(hid_t file, const std::string& path, const std::string& hint,
                                    const TokenizerPtr& first, std::string* first_table, int* vocab) {
    try {
        *vocab = (int)h5::read_attr_i64(file, "vocab_size");
        const TokenizerKind kind = tokenizer_kind(h5::read_attr_str(file, "tokenizer"));
        const std::string table = keeps_table(kind)          ? h5::read_text(file, "vocab")
                                  : kind == TokenizerKind::ids ? std::to_string(*vocab)
                                                               : "";
        if (!first) *first_table = table;
        else if (first->kind() == kind && *first_table == table) return first;
        return tokenizer_from(kind, table);
    } catch (const UserError& e) {
        throw UserError(strfmt("%s: %s; %s", path.c_str(), e.what(), hint.c_str()));
    }
}

// Tabular shards given to the GPT: the fix is the model, not new shards.
static void refuse_tabular(hid_t file, const std::string& path) {
    if (H5Lexists(file, "/tokens", H5P_DEFAULT) <= 0 && H5Lexists(file, "/features", H5P_DEFAULT) > 0)
        throw UserError(strfmt("%s holds tabular shards (datasets /features and /labels): train them with --model mlp "
                               "(--model gpt reads /tokens)",
                               path.c_str()));
}

// Unsigned 16 or 32 bits in either byte order. *native: this host's order, which pread can read.
static int token_width(hid_t data, const std::string& path, const std::string& hint, bool* native) {
    h5::Hid type(H5Dget_type(data), H5Tclose);
    const bool unsigned_int = H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_sign(type.get()) == H5T_SGN_NONE;
    const bool u16 = unsigned_int && H5Tget_size(type.get()) == 2, u32 = unsigned_int && H5Tget_size(type.get()) == 4;
    *native = H5Tequal(type.get(), u16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32) > 0;
    if (!u16 && !u32)
        throw UserError(strfmt("%s: dataset /tokens has dtype %s, expected uint16 or uint32; %s", path.c_str(),
                               h5::type_of(data).name.c_str(), hint.c_str()));
    return u16 ? 2 : 4;
}

static long token_count(hid_t data, const std::string& path, const std::string& hint) {
    auto dims = h5::dims(data);
    if (dims.size() != 1)
        throw UserError(strfmt("%s: /tokens has %zu dimensions, expected 1; %s", path.c_str(), dims.size(), hint.c_str()));
    return (long)dims[0];
}

// Must cover the tokenizer's ids and fit the token type.
static void check_vocab_size(const Tokenizer& tok, int vocab, int width, const std::string& path) {
    if (vocab < tok.vocab_size() || vocab > (width == 2 ? 65536 : INT32_MAX))
        throw UserError(strfmt("%s: vocab_size %d does not fit the %s tokenizer's %d ids or the token type",
                               path.c_str(), vocab, tok.name(), tok.vocab_size()));
}

// pread descriptor for a native, contiguous, unfiltered /tokens at *at; -1 when HDF5 must read.
// Throws when the file is shorter than its tokens.
static int direct_fd(hid_t data, const std::string& path, long bytes, long* at) {
    h5::Hid dcpl(H5Dget_create_plist(data), H5Pclose);
    const haddr_t addr = H5Dget_offset(data);
    if (H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl.get()) != 0 || addr == HADDR_UNDEF)
        return -1;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= (off_t)(addr + bytes)) {
        *at = (long)addr;
        return fd;
    }
    if (fd >= 0) {
        ::close(fd);
        throw UserError(strfmt("%s: truncated: its /tokens need %ld bytes past offset %ld", path.c_str(), bytes,
                               (long)addr));
    }
    return -1;
}

TokenShardSet TokenShardSet::open(const std::string& dir, const std::string& split, int block_size, uint64_t seed,
                                  bool shift_per_epoch, IoMode mode, MPI_Comm node) {
    if (mode == IoMode::collective)
        throw UserError("--io collective reads tabular shards; token shards (--model gpt) are read with --io direct or "
                        "memory");
    // Into a new directory: --out here would meet its shards, and --overwrite deletes them.
    const std::string tool = runnable("dptrain-data");
    const std::string hint = strfmt("make token shards in a new directory: from text with `%s text --input FILE --out "
                                    "NEW_DIR`, from ids (.bin, .npy, .h5) with `%s tokens --input FILE --vocab-size V "
                                    "--out NEW_DIR` (format: data/README.md)",
                                    tool.c_str(), tool.c_str());
    std::vector<std::string> paths = find_shards(dir, split, hint);
    std::lock_guard<std::mutex> g(h5::lock());
    TokenShardSet s;
    s.dir_ = dir;
    s.split_ = split;
    s.T_ = block_size;
    s.seed_ = seed;
    s.shift_ = shift_per_epoch;
    s.mode_ = mode;
    s.node_ = node;
    size_t mem_at = 0;
    std::string first_table;
    for (const std::string& path : paths) {
        Shard sh;
        sh.path = path;
        sh.file = h5::open_file(path, hint);
        refuse_tabular(sh.file.get(), path);
        sh.data = h5::open_dataset(sh.file.get(), path, "/tokens", hint);
        bool native = false;
        sh.width = token_width(sh.data.get(), path, hint, &native);
        const long tokens = token_count(sh.data.get(), path, hint);
        int vocab = 0;
        TokenizerPtr tok = shard_tokenizer(sh.file.get(), path, hint, s.tok_, &first_table, &vocab);
        check_vocab_size(*tok, vocab, sh.width, path);
        if (s.shards_.empty()) s.tok_ = tok;
        else if (!tok->same_as(*s.tok_))
            throw UserError(strfmt("%s: its vocabulary differs from %s's; shards of one set must share it", path.c_str(),
                                   s.shards_[0].path.c_str()));
        sh.tokens = tokens;
        sh.windows = sh.tokens > block_size ? (sh.tokens - block_size) / block_size : 0;
        sh.first = s.total_;
        sh.mem_at = mem_at;
        mem_at += (size_t)sh.tokens * sh.width;
        s.total_ += sh.windows;
        s.tokens_ += sh.tokens;
        if (native) sh.fd = direct_fd(sh.data.get(), path, sh.tokens * sh.width, &sh.at);
        if (sh.fd >= 0) {  // pread alone: HDF5's handles and metadata cache closed
            sh.data.reset();
            sh.file.reset();
        }
        s.shards_.push_back(std::move(sh));
    }
    if (s.total_ == 0) {
        long largest = 0;
        for (const Shard& sh : s.shards_) largest = std::max(largest, sh.tokens);
        throw UserError(strfmt("--data %s: no %s shard holds a window of --block-size %d + 1 (a shard needs at least %d "
                               "tokens; the largest of its %zu holds %ld, %ld in all); make fewer shards (--shards) or "
                               "use a smaller --block-size",
                               dir.c_str(), split.c_str(), block_size, 2 * block_size, s.shards_.size(), largest,
                               s.tokens_));
    }
    s.raw_.resize((size_t)(block_size + 1) * 4);
    return s;
}

std::string TokenShardSet::coverage_note() const {
    const double covered = (double)total_ * T_ / (double)tokens_;
    if (covered >= 0.75) return "";
    return strfmt("note: the %s split's windows of --block-size %d cover %.0f%% of its %ld tokens: each of its %zu shards "
                  "(%ld tokens each, about) leaves up to %d unread; fewer, larger shards (dptrain-data --shards) use "
                  "the rest",
                  split_.c_str(), T_, 100 * covered, tokens_, shards_.size(), tokens_ / (long)shards_.size(), 2 * T_);
}

TokenShardSet::~TokenShardSet() {
    for (Shard& sh : shards_)
        if (sh.fd >= 0) ::close(sh.fd);
}

void TokenShardSet::read(const long* idx, int n, long epoch, float*, int* y) {
    const int W = T_ + 1;
    long shift = shift_ ? (long)(stream_seed(seed_ ^ 0x5EED5EEDull, (uint64_t)epoch) % (uint64_t)T_) : 0;
    for (int i = 0; i < n; ++i) {
        long w = idx[i];
        auto it = std::upper_bound(shards_.begin(), shards_.end(), w, [](long v, const Shard& s) { return v < s.first; });
        Shard& sh = *(it - 1);
        long start = (w - sh.first) * T_ + shift;
        size_t bytes = (size_t)W * sh.width;
        if (node_copy_) {
            std::memcpy(raw_.data(), node_copy_->segment(0) + sh.mem_at + (size_t)start * sh.width, bytes);
        } else {
            read_stored(sh, start, W, raw_.data());
        }
        int* out = y + (size_t)i * W;
        const uint32_t V = (uint32_t)tok_->vocab_size();
        uint32_t top = 0;
        if (sh.width == 2) {
            const uint16_t* p = reinterpret_cast<const uint16_t*>(raw_.data());
            for (int k = 0; k < W; ++k) top = std::max<uint32_t>(top, out[k] = p[k]);
        } else {
            const uint32_t* p = reinterpret_cast<const uint32_t*>(raw_.data());
            for (int k = 0; k < W; ++k) top = std::max(top, p[k]), out[k] = (int)p[k];
        }
        if (top >= V) bad_token(sh, start, W, V);
    }
}

bool TokenShardSet::check_ids(int part, int parts, double max_bytes) {
    if (memory_bytes() > max_bytes) return false;
    const long lo = tokens_ * part / parts, hi = tokens_ * (part + 1) / parts;
    const uint32_t V = (uint32_t)tok_->vocab_size();
    constexpr long kBlock = 1 << 20;  // tokens per read
    std::vector<uint32_t> ids((size_t)kBlock);
    long first = 0;  // the shard's first token in the split
    for (const Shard& sh : shards_) {
        const long a = std::max(lo, first), b = std::min(hi, first + sh.tokens);
        for (long t = a; t < b; t += kBlock) {
            const long n = std::min(kBlock, b - t);
            read_ids(sh, t - first, n, ids.data());
            for (long k = 0; k < n; ++k)
                if (ids[(size_t)k] >= V)
                    throw UserError(strfmt("%s: /tokens[%ld] = %u is outside the %s vocabulary of %u ids; the shard was "
                                           "not written with this tokenizer: make it again with dptrain-data text (or tokens)",
                                           sh.path.c_str(), t - first + k, ids[(size_t)k], tok_->name(), V));
        }
        first += sh.tokens;
    }
    return true;
}

// In their stored width: one pread (contiguous) or one HDF5 hyperslab read.
void TokenShardSet::read_stored(const Shard& sh, long t0, long n, void* dst) const {
    if (sh.fd >= 0) {
        read_fully(sh.fd, dst, (size_t)n * sh.width, sh.at + t0 * sh.width, sh.path);
        return;
    }
    std::lock_guard<std::mutex> g(h5::lock());
    h5::Hid space(H5Dget_space(sh.data.get()), H5Sclose);
    hsize_t off = (hsize_t)t0, cnt = (hsize_t)n;
    h5::Hid mem(H5Screate_simple(1, &cnt, nullptr), H5Sclose);
    if (H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, &off, nullptr, &cnt, nullptr) < 0 ||
        H5Dread(sh.data.get(), sh.width == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32, mem.get(), space.get(),
                H5P_DEFAULT, dst) < 0)
        throw UserError(strfmt("%s: read of tokens %ld..%ld failed (file truncated or corrupt?)", sh.path.c_str(), t0,
                               t0 + n));
}

// Read in the stored width into the back of `out`, then widened in place from the front (element
// k is read before anything overwrites it).
void TokenShardSet::read_ids(const Shard& sh, long t0, long n, uint32_t* out) const {
    unsigned char* raw = reinterpret_cast<unsigned char*>(out) + (size_t)n * (4 - sh.width);
    read_stored(sh, t0, n, raw);
    if (sh.width == 2)
        for (long k = 0; k < n; ++k) {
            uint16_t v;
            std::memcpy(&v, raw + 2 * k, 2);
            out[k] = v;
        }
}

// Names the first id outside the vocabulary: the model would index past its embedding table.
void TokenShardSet::bad_token(const Shard& sh, long start, int n, uint32_t V) const {
    for (int k = 0; k < n; ++k) {
        const uint32_t id = sh.width == 2 ? reinterpret_cast<const uint16_t*>(raw_.data())[k]
                                          : reinterpret_cast<const uint32_t*>(raw_.data())[k];
        if (id >= V)
            throw UserError(strfmt("%s: /tokens[%ld] = %u is outside the %s vocabulary of %u ids; the shard was not "
                                   "written with this tokenizer: make it again with dptrain-data text",
                                   sh.path.c_str(), start + k, id, tok_->name(), V));
    }
    throw UserError(strfmt("%s: tokens %ld..%ld hold an id outside the vocabulary", sh.path.c_str(), start, start + n));
}

} // namespace dptrain
