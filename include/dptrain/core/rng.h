// Counter-based random streams, pure functions of (seed, id), so the sample order is world-size
// independent and a resume exact. Not for: cryptography.
#pragma once

#include <cmath>
#include <cstdint>

namespace dptrain {

inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// e.g. id = epoch, or sample index
inline uint64_t stream_seed(uint64_t seed, uint64_t id) { return splitmix64(splitmix64(seed) ^ (id * 0xD1B54A32D192ED03ull)); }

struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed) : state(seed) {}
    uint64_t next() { return splitmix64(state++); }
    // 24 bits: exact in float.
    float uniform() { return (next() >> 40) * (1.0f / 16777216.0f); }
    // Multiply-shift; bias < n / 2^64.
    uint64_t below(uint64_t n) { return (uint64_t)(((unsigned __int128)next() * n) >> 64); }
    // Box-Muller, one value a call: simple over fast.
    float normal() {
        double u1 = ((next() >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0, 1]
        double u2 = (next() >> 11) * (1.0 / 9007199254740992.0);
        return (float)(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
};

} // namespace dptrain
