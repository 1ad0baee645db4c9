// This process's memory as the kernel counts it (resident set now and at its peak) and the
// memory the machine has available, from /proc; and sizes as people write them ("80GiB").
// Not for: deciding what fits (train/memory_plan.h).
#pragma once

#include <cstddef>
#include <string>

namespace dptrain {

// Resident bytes of this process now (VmRSS) and at its peak so far (VmHWM); 0 where /proc does not
// say.
size_t resident_bytes();
size_t peak_resident_bytes();
// The machine's MemAvailable; 0 where /proc does not say.
size_t available_bytes();
// "80GiB", "80 GiB", "512MiB", "1.5TiB", "80GB" (taken as GiB: memory sizes are binary in
// practice), or plain bytes. Throws UserError naming `what` for anything else.
size_t parse_bytes(const std::string& text, const char* what);

} // namespace dptrain
