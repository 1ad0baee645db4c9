// Every value of a dataset directory checked, as `dptrain-data verify` does before a long run:
// tabular features finite and labels in [0, num_classes), token ids inside the vocabulary. Not
// for: the files' checksums (stage.h's SHA256SUMS) or the checks made when shards are opened.
#pragma once

#include <functional>
#include <string>

namespace dptrain {

// Opens both splits of DIR (train and val, with every check of opening them) and reads every
// row or token once. Throws UserError naming the first bad value (shard, row and feature, or
// offset and id). Returns a one-line summary ("tabular: 512 train + 64 val samples in 4 + 1
// shards, 32 features: every feature finite, every label in [0, 10)").
std::string verify_values(const std::string& dir);

// Checks DIR against DIR/SHA256SUMS: every shard of both splits must be listed (a shard added
// after the manifest was written is named), then entries part, part + parts, ... are hashed
// (stage.h's check_sums; alive is called at the start and at every piece hashed). Throws UserError;
// returns the number of files hashed.
long check_manifest(const std::string& dir, int streams, int part = 0, int parts = 1, bool (*give_up)() = nullptr,
                    const std::function<void()>& alive = {});

} // namespace dptrain
