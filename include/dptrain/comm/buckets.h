// Gradient buckets for both paths (GradSync, DeviceStep), cut from the buffer's end since
// backward finishes the last layer first. Not for: launching or waiting for the sums.
#pragma once

#include <cstddef>
#include <vector>

namespace dptrain {

struct Bucket {
    size_t begin, end;  // floats
};

// Launch order; at least 16 floats each. A bucket may end inside a parameter: its gradient is
// final at once, so both pieces just launch together.
std::vector<Bucket> cut_buckets(size_t total, double bucket_mb);

} // namespace dptrain
