// dptrain-report trace: the ranks' Chrome traces (--trace) merged into one file with a track per
// rank. Every input is parsed whole, so a file cut short ends the merge with one line instead of
// making invalid JSON. Not for: writing a rank's trace (core/trace.h).
#pragma once

#include "dptrain/core/json.h"

#include <string>
#include <vector>

namespace dptrain {

// The "traceEvents" array of one rank's trace file; *dropped (when given): the events its rank's
// full buffers left out (otherData.dropped; 0 when absent). Throws UserError naming the file, and
// where it stops parsing, for a file that is missing, cut short or not a trace.
Json trace_events(const std::string& path, long* dropped = nullptr);

// Writes OUT: {"displayTimeUnit":"ms","traceEvents":[every input's events, in input order],
// "otherData":{"dropped":the inputs' dropped events}}; returns those. Throws UserError for a bad
// input or an unwritable OUT.
long merge_traces(const std::string& out, const std::vector<std::string>& inputs);

} // namespace dptrain
