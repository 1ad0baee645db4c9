// Reading NumPy's .npz files (zip archives: np.savez stores members, np.savez_compressed deflates
// them, zip64 for large arrays) through libzip. Not for: writing archives or encrypted ones.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct zip;  // libzip's archive handle

namespace dptrain::zip {

struct Member {
    std::string name;     // as stored, e.g. "x.npy"
    uint64_t index = 0;   // in the archive
    uint64_t usize = 0;   // uncompressed size
};

class Archive {
  public:
    // Reads the central directory of `path` (checked for consistency); throws UserError
    // ("PATH: ...; what to do") when the file is missing, not a zip archive or truncated.
    static Archive open(const std::string& path);

    const std::string& path() const { return path_; }
    const std::vector<Member>& members() const { return members_; }
    // nullptr when no member has that exact name.
    const Member* find(const std::string& name) const;
    // The member's uncompressed bytes, CRC-checked; throws UserError naming the archive and the
    // member when it is truncated, corrupt, encrypted or compressed with a method libzip lacks.
    std::string read(const Member& m) const;

  private:
    std::string path_;
    std::shared_ptr<::zip> zip_;  // closed (zip_discard) with the last copy
    std::vector<Member> members_;
};

} // namespace dptrain::zip
