// Shared helpers of the unit tests: temporary directories and small shard sets.
#pragma once

#include "dptrain/h5.h"

#include <string>
#include <vector>

namespace testing {

// A fresh empty directory under /tmp.
std::string temp_dir(const std::string& tag);

// Writes DIR/SPLIT-i-of-S.h5 shards of the given sizes; features of global row r are
// (r, r + 0.5, ...) and labels r % classes, so reads can be checked by value.
void write_shards(const std::string& dir, const std::string& split, const std::vector<long>& rows, int dim,
                  int classes);

} // namespace testing
