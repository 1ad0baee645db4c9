// cut_buckets: the walk from the buffer's end down.
#include "dptrain/comm/buckets.h"

#include <algorithm>

namespace dptrain {

std::vector<Bucket> cut_buckets(size_t total, double bucket_mb) {
    const size_t cap = std::max<size_t>(16, (size_t)(bucket_mb * (1 << 20) / sizeof(float)));
    std::vector<Bucket> out;
    for (size_t end = total; end > 0;) {
        const size_t begin = end > cap ? end - cap : 0;
        out.push_back({begin, end});
        end = begin;
    }
    return out;
}

} // namespace dptrain
