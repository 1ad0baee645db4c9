// The one clock that every timing in dptrain reads: monotonic seconds (steady_clock), comparable
// only within one process.
#pragma once

#include <chrono>

namespace dptrain {

inline double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

} // namespace dptrain
