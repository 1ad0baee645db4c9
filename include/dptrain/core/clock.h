// The one clock every timing reads: monotonic seconds, comparable only within one process.
// Not for: wall-clock timestamps.
#pragma once

#include <chrono>

namespace dptrain {

inline double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

} // namespace dptrain
