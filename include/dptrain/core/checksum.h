// FNV-1a over 8-byte words, for checkpoints and the options every rank must share: cheap and
// order-sensitive. Not for: tampering (staging uses SHA-256, data/stage.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dptrain {

uint64_t checksum64(const void* data, size_t bytes);
// Every piece but the last a multiple of 8 bytes.
struct Checksum64 {
    uint64_t h = 0xcbf29ce484222325ull;
    size_t total = 0;
    void update(const void* data, size_t bytes);
    uint64_t value() const { return h ^ total; }
};

} // namespace dptrain
