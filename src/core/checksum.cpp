// checksum64: FNV-1a's multiply with an extra shift per word, so that 8 bytes at once still mix.
#include "dptrain/core/checksum.h"

#include <cstring>

namespace dptrain {

void Checksum64::update(const void* data, size_t bytes) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    const size_t words = bytes / 8;
    for (size_t i = 0; i < words; ++i) {
        uint64_t w;
        std::memcpy(&w, p + 8 * i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (size_t i = words * 8; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    total += bytes;
}

uint64_t checksum64(const void* data, size_t bytes) {
    Checksum64 c;
    c.update(data, bytes);
    return c.value();
}

} // namespace dptrain
