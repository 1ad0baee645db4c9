// The checksum of checkpoints and of the options every rank must share: 64-bit FNV-1a over 8-byte
// words (tail bytes folded in), cheap and order-sensitive. Not for: verifying data against
// tampering (staging uses SHA-256, data/stage.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dptrain {

uint64_t checksum64(const void* data, size_t bytes);
// The same, fed in pieces: every piece but the last must be a multiple of 8 bytes.
struct Checksum64 {
    uint64_t h = 0xcbf29ce484222325ull;
    size_t total = 0;
    void update(const void* data, size_t bytes);
    uint64_t value() const { return h ^ total; }
};

} // namespace dptrain
