// A minimal zip archive reader, enough for NumPy's .npz files (np.savez: stored members;
// np.savez_compressed: deflate), including the zip64 records NumPy writes for large arrays.
// Not for: writing archives, encryption, multi-disk archives or methods other than 0 and 8.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dptrain::zip {

struct Member {
    std::string name;       // as stored, e.g. "x.npy"
    uint16_t method = 0;    // 0 stored, 8 deflate
    uint16_t flags = 0;     // general purpose bit flags (bit 0: encrypted)
    uint32_t crc = 0;       // CRC-32 of the uncompressed bytes
    uint64_t csize = 0;     // compressed size
    uint64_t usize = 0;     // uncompressed size
    uint64_t local_offset = 0;  // of the member's local file header
};

class Archive {
  public:
    // Reads the central directory of `path`; throws UserError ("PATH: ...; what to do") when the
    // file is missing, not a zip archive or truncated.
    static Archive open(const std::string& path);

    const std::string& path() const { return path_; }
    const std::vector<Member>& members() const { return members_; }
    // nullptr when no member has that exact name.
    const Member* find(const std::string& name) const;
    // The member's uncompressed bytes, CRC-checked; throws UserError naming the archive and the
    // member when it is truncated, corrupt or uses an unsupported method.
    std::string read(const Member& m) const;

  private:
    std::string path_;
    uint64_t size_ = 0;
    std::vector<Member> members_;
};

} // namespace dptrain::zip
