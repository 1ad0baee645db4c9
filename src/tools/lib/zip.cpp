// Zip reader for .npz: the central directory (zip64 aware) and stored/deflate members. Reads
// through pread so a multi-gigabyte archive is never held whole; only the member asked for is.
// Not for: writing, or any zip feature NumPy does not produce.
#include "dptrain/tools/zip.h"

#include "dptrain/core/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace dptrain::zip {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50, kEnd64LocatorSig = 0x07064b50;
constexpr size_t kEndSize = 22, kCentralSize = 46, kLocalSize = 30, kLocatorSize = 20;
const char* const kResave = "write it again with np.savez or np.savez_compressed";

// Zip fields are little-endian whatever the host; decode byte by byte.
uint64_t le(const std::string& b, size_t at, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | (unsigned char)b[at + i];
    return v;
}

class File {
  public:
    explicit File(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY)) {
        if (fd_ < 0)
            throw UserError(strfmt("%s: cannot open it: %s; check the --input path", path.c_str(), std::strerror(errno)));
    }
    ~File() { ::close(fd_); }
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    uint64_t size() const {
        struct stat st;
        return fstat(fd_, &st) == 0 ? (uint64_t)st.st_size : 0;
    }
    // Exactly n bytes at `off`; a short read means the file ends early.
    std::string read_at(uint64_t off, uint64_t n, const char* what) const {
        std::string out(n, '\0');
        uint64_t got = 0;
        while (got < n) {
            ssize_t r = ::pread(fd_, &out[got], (size_t)std::min<uint64_t>(n - got, 1u << 30), (off_t)(off + got));
            if (r <= 0)
                throw UserError(strfmt("%s: truncated: %s at byte %llu is cut off; %s", path_.c_str(), what,
                                       (unsigned long long)(off + got), kResave));
            got += (uint64_t)r;
        }
        return out;
    }

  private:
    std::string path_;
    int fd_;
};

uint32_t crc_of(const std::string& b) {
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t at = 0; at < b.size(); at += 1u << 30) {
        size_t n = std::min<size_t>(b.size() - at, 1u << 30);
        crc = crc32(crc, reinterpret_cast<const Bytef*>(b.data() + at), (uInt)n);
    }
    return (uint32_t)crc;
}

// Raw deflate (no zlib header: windowBits -MAX_WBITS) of `in` into exactly `usize` bytes. Fed in
// pieces because zlib counts in 32-bit unsigned ints.
std::string inflate_raw(const std::string& in, uint64_t usize, const std::string& where) {
    std::string out(usize, '\0');
    z_stream zs;
    std::memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) throw UserError(where + ": zlib cannot start inflating");
    size_t in_pos = 0, out_pos = 0;
    int rc = Z_OK;
    for (;;) {
        size_t in_n = std::min<size_t>(in.size() - in_pos, 1u << 30), out_n = std::min<size_t>(out.size() - out_pos, 1u << 30);
        zs.next_in = const_cast<Bytef*>(reinterpret_cast<const Bytef*>(in.data() + in_pos));
        zs.avail_in = (uInt)in_n;
        zs.next_out = reinterpret_cast<Bytef*>(&out[0] + out_pos);
        zs.avail_out = (uInt)out_n;
        rc = inflate(&zs, Z_NO_FLUSH);
        size_t used = in_n - zs.avail_in, made = out_n - zs.avail_out;
        in_pos += used;
        out_pos += made;
        if (rc == Z_STREAM_END) break;
        // Z_BUF_ERROR with nothing consumed or produced: the input ended before the stream did,
        // or the output is already as long as the directory says.
        if (rc != Z_OK && !(rc == Z_BUF_ERROR && (used || made))) break;
    }
    inflateEnd(&zs);
    if (rc != Z_STREAM_END || out_pos != usize)
        throw UserError(strfmt("%s: the compressed data is corrupt or truncated (%s, %zu of %llu bytes inflated); %s",
                               where.c_str(), rc == Z_DATA_ERROR ? "invalid deflate data" : "stream ended early",
                               out_pos, (unsigned long long)usize, kResave));
    return out;
}

} // namespace

Archive Archive::open(const std::string& path) {
    File f(path);
    Archive a;
    a.path_ = path;
    a.size_ = f.size();
    if (a.size_ < kEndSize)
        throw UserError(strfmt("%s: not a zip archive (.npz): only %llu bytes; %s", path.c_str(),
                               (unsigned long long)a.size_, kResave));
    std::string head = f.read_at(0, 4, "the signature");
    if (head != std::string("PK\x03\x04", 4) && head != std::string("PK\x05\x06", 4))
        throw UserError(strfmt("%s: not a zip archive (.npz): it does not start with \"PK\"; %s", path.c_str(), kResave));

    // 1. The end-of-central-directory record: the last 22 bytes plus a comment of up to 64 KiB,
    //    so search backwards for its signature, accepting only a position whose comment length
    //    reaches the end of the file exactly.
    uint64_t tail_n = std::min<uint64_t>(a.size_, kEndSize + 0xFFFF), tail_at = a.size_ - tail_n;
    std::string tail = f.read_at(tail_at, tail_n, "the end record");
    long end = -1;
    for (long i = (long)tail_n - (long)kEndSize; i >= 0; --i)
        if (le(tail, i, 4) == kEndSig && i + kEndSize + le(tail, i + 20, 2) == tail_n) {
            end = i;
            break;
        }
    if (end < 0)
        throw UserError(strfmt("%s: truncated or not a zip archive: no end-of-central-directory record; %s",
                               path.c_str(), kResave));
    uint64_t count = le(tail, end + 10, 2), cd_size = le(tail, end + 12, 4), cd_off = le(tail, end + 16, 4);

    // 2. Zip64: saturated fields mean the real values are in the zip64 end record, found through
    //    the locator just before the end record.
    if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {
        uint64_t end_abs = tail_at + (uint64_t)end;
        if (end_abs < kLocatorSize) throw UserError(strfmt("%s: zip64 locator missing; %s", path.c_str(), kResave));
        std::string loc = f.read_at(end_abs - kLocatorSize, kLocatorSize, "the zip64 locator");
        if (le(loc, 0, 4) != kEnd64LocatorSig)
            throw UserError(strfmt("%s: zip64 locator missing; %s", path.c_str(), kResave));
        std::string rec = f.read_at(le(loc, 8, 8), 56, "the zip64 end record");
        if (le(rec, 0, 4) != kEnd64Sig) throw UserError(strfmt("%s: zip64 end record corrupt; %s", path.c_str(), kResave));
        count = le(rec, 32, 8);
        cd_size = le(rec, 40, 8);
        cd_off = le(rec, 48, 8);
    }
    if (cd_off > a.size_ || cd_size > a.size_ - cd_off || count > cd_size / kCentralSize)
        throw UserError(strfmt("%s: the central directory lies outside the file (truncated?); %s", path.c_str(), kResave));

    // 3. The central directory: one fixed 46-byte header per member, then name, extra, comment.
    std::string cd = f.read_at(cd_off, cd_size, "the central directory");
    size_t at = 0;
    for (uint64_t k = 0; k < count; ++k) {
        if (at + kCentralSize > cd.size() || le(cd, at, 4) != kCentralSig)
            throw UserError(strfmt("%s: central directory entry %llu is corrupt; %s", path.c_str(),
                                   (unsigned long long)k, kResave));
        Member m;
        m.flags = (uint16_t)le(cd, at + 8, 2);
        m.method = (uint16_t)le(cd, at + 10, 2);
        m.crc = (uint32_t)le(cd, at + 16, 4);
        m.csize = le(cd, at + 20, 4);
        m.usize = le(cd, at + 24, 4);
        size_t name_n = le(cd, at + 28, 2), extra_n = le(cd, at + 30, 2), comment_n = le(cd, at + 32, 2);
        m.local_offset = le(cd, at + 42, 4);
        if (at + kCentralSize + name_n + extra_n + comment_n > cd.size())
            throw UserError(strfmt("%s: central directory entry %llu is corrupt; %s", path.c_str(),
                                   (unsigned long long)k, kResave));
        m.name = cd.substr(at + kCentralSize, name_n);
        // The zip64 extra field (id 1) holds, in this order, only the values saturated above.
        size_t x = at + kCentralSize + name_n, x_end = x + extra_n;
        while (x + 4 <= x_end) {
            size_t id = le(cd, x, 2), n = le(cd, x + 2, 2), p = x + 4;
            if (p + n > x_end) break;
            if (id == 1) {
                uint64_t* fields[3] = {&m.usize, &m.csize, &m.local_offset};
                for (uint64_t* v : fields)
                    if (*v == 0xFFFFFFFF && p + 8 <= x + 4 + n) {
                        *v = le(cd, p, 8);
                        p += 8;
                    }
            }
            x += 4 + n;
        }
        a.members_.push_back(m);
        at += kCentralSize + name_n + extra_n + comment_n;
    }
    return a;
}

const Member* Archive::find(const std::string& name) const {
    for (const Member& m : members_)
        if (m.name == name) return &m;
    return nullptr;
}

std::string Archive::read(const Member& m) const {
    std::string where = strfmt("%s: member %s", path_.c_str(), m.name.c_str());
    if (m.flags & 1) throw UserError(where + ": encrypted; save the arrays again without encryption (np.savez)");
    if (m.method != 0 && m.method != 8)
        throw UserError(strfmt("%s: compression method %u is not supported (only stored and deflate); %s", where.c_str(),
                               (unsigned)m.method, kResave));
    // Deflate expands at most ~1032x; a larger claim is a corrupt directory, not a reason to
    // allocate it.
    if ((m.method == 0 && m.usize != m.csize) || (m.method == 8 && m.usize / 1100 > m.csize + 1024))
        throw UserError(strfmt("%s: sizes in the directory are inconsistent (%llu compressed, %llu uncompressed); %s",
                               where.c_str(), (unsigned long long)m.csize, (unsigned long long)m.usize, kResave));
    File f(path_);
    // The data follows the local header, whose name and extra lengths may differ from the
    // central directory's (NumPy puts a zip64 extra only in the local header). Sizes and CRC come
    // from the central directory, which is right even when bit 3 (data descriptor) left the
    // local header's zero.
    std::string local = f.read_at(m.local_offset, kLocalSize, "a local file header");
    if (le(local, 0, 4) != kLocalSig) throw UserError(where + ": local file header corrupt; " + kResave);
    uint64_t data_at = m.local_offset + kLocalSize + le(local, 26, 2) + le(local, 28, 2);
    if (data_at > size_ || m.csize > size_ - data_at)
        throw UserError(strfmt("%s: truncated: its %llu bytes of data run past the end of the file (%llu bytes); %s",
                               where.c_str(), (unsigned long long)m.csize, (unsigned long long)size_, kResave));
    std::string data = f.read_at(data_at, m.csize, "member data");
    if (m.method == 8) data = inflate_raw(data, m.usize, where);
    if (crc_of(data) != m.crc) throw UserError(where + ": CRC mismatch (the file is corrupt); " + kResave);
    return data;
}

} // namespace dptrain::zip
