// Gradient buckets, the one cutter both gradient paths share (GradSync on the host, DeviceStep on
// a GPU): ranges of the flat gradient buffer of about --bucket-mb each, cut from the buffer's end
// to its start, since backward finishes the last layer's gradients first and those are what a
// bucket can start summing while backward goes on. A bucket may end inside a parameter: all of a
// parameter's gradient becomes final at once, so a split only means both pieces launch together.
// Not for: launching or waiting for the sums.
#pragma once

#include <cstddef>
#include <vector>

namespace dptrain {

struct Bucket {
    size_t begin, end;  // range of the flat buffer, in floats
};

// Buckets covering [0, total) in launch order (highest offsets first), each at most bucket_mb MiB
// of floats (at least 16 floats); none for total = 0.
std::vector<Bucket> cut_buckets(size_t total, double bucket_mb);

} // namespace dptrain
