// Resident and available memory from /proc, and sizes as people write them ("80GiB").
// Not for: deciding what fits (train/memory_plan.h).
#pragma once

#include <cstddef>
#include <string>

namespace dptrain {

// 0 where /proc does not say.
size_t resident_bytes();
size_t peak_resident_bytes();
size_t available_bytes();
// "80GB" is taken as GiB: memory sizes are binary in practice. Throws UserError naming `what`.
size_t parse_bytes(const std::string& text, const char* what);

} // namespace dptrain
