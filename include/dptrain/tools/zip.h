// Reading NumPy's .npz files (stored, deflated, zip64) through libzip.
// Not for: writing archives or encrypted ones.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct zip;  // libzip's

namespace dptrain::zip {

struct Member {
    std::string name;     // e.g. "x.npy"
    uint64_t index = 0;
    uint64_t usize = 0;   // uncompressed
};

class Archive {
  public:
    // Throws UserError ("PATH: ...; what to do").
    static Archive open(const std::string& path);

    const std::string& path() const { return path_; }
    const std::vector<Member>& members() const { return members_; }
    const Member* find(const std::string& name) const;  // exact name, or nullptr
    // CRC-checked; throws UserError naming archive and member.
    std::string read(const Member& m) const;

  private:
    std::string path_;
    std::shared_ptr<::zip> zip_;  // zip_discard with the last copy
    std::vector<Member> members_;
};

} // namespace dptrain::zip
