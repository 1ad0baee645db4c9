// `dptrain-data verify`: every value of a dataset checked before a long run. Not for: checksums
// (stage.h) or the checks made when shards are opened.
#pragma once

#include <functional>
#include <string>

namespace dptrain {

// Throws UserError naming the first bad value; returns a one-line summary.
std::string verify_values(const std::string& dir);

// Every shard must be listed (an unlisted one is named); entries part, part + parts, ... are
// hashed, alive() called per piece. Returns the files hashed.
long check_manifest(const std::string& dir, int streams, int part = 0, int parts = 1, bool (*give_up)() = nullptr,
                    const std::function<void()>& alive = {});

} // namespace dptrain
