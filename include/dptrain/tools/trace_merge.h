// dptrain-report trace: ranks' traces merged, a track each; inputs parsed whole, so a file cut
// short fails with one line, not invalid JSON. Not for: writing a rank's trace (core/trace.h).
#pragma once

#include "dptrain/core/json.h"

#include <string>
#include <vector>

namespace dptrain {

// *dropped: otherData.dropped, 0 when absent. Throws UserError naming the file and where.
Json trace_events(const std::string& path, long* dropped = nullptr);

// Returns the inputs' dropped events. Throws UserError.
long merge_traces(const std::string& out, const std::vector<std::string>& inputs);

} // namespace dptrain
