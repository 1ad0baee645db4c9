// `dptrain-data ingest`: CSV, .npy/.npz or HDF5 into one float32/int32 table, and its shard plan.
// Input problems are UserError "FILE: what; what to do". Not for: writing shards (dptrain-data) or
// reading dptrain's own (shards.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dptrain::ingest {

enum class Format { automatic, csv, npy, npz, hdf5 };
const char* format_name(Format f);
Format parse_format(const std::string& s);  // also "h5"; throws UserError naming --format
// Magic bytes, else the extension, else CSV when it looks like text.
Format detect_format(const std::string& path);

struct Table {
    long n = 0;
    int d = 0;
    std::vector<float> x;    // (n, d) row-major
    std::vector<int32_t> y;  // (n), checked >= 0
    std::vector<std::string> notes;  // what reading changed ("FILE: ..."), for the summary
    int32_t max_label() const;
    void append(Table&& t, const std::string& path);  // same d
};

// Commas (tabs when line 1 has tabs and no commas); label_column < 0 counts from the end. Line 1
// is a header when a field is not a number or it is pandas' "0,1,...,C-1" (C >= 3), unless
// no_header; an empty (or "Unnamed: 0") first name marks a row-name column, left out.
Table read_csv(const std::string& path, int label_column, bool no_header);
// features (N, D) or (N,); labels (N,) or (N, 1), integer or bool.
Table read_npy_pair(const std::string& features_path, const std::string& labels_path);
// The first member found among the names (NAME or NAME.npy); rules as read_npy_pair.
Table read_npz(const std::string& path, const std::vector<std::string>& features_names,
               const std::vector<std::string>& labels_names);
// Any integer or float features, converted by HDF5; shapes as read_npy_pair.
Table read_hdf5(const std::string& path, const std::string& features_name, const std::string& labels_name);

struct Options {
    Format format = Format::automatic;
    std::string features_name, labels_name;  // "" -> the format's defaults
    int label_column = -1;                    // CSV
    bool no_header = false;                   // CSV
};

// Concatenated in order (.npy in feature, label pairs); one format for all, returned in *used.
Table read_inputs(const std::vector<std::string>& inputs, const Options& o, Format* used);

// `requested` when > 0, else max label + 1; throws UserError below 2 classes or out of range.
int resolve_classes(const Table& t, int requested, const std::string& what);

// Equal shards, the first n % shards one row longer; shared by synth and ingest.
void shard_range(long n, int shards, int s, long* first, long* rows);

struct ShardSpec {
    std::string split;  // "train" or "val"
    int index = 0, of = 1;
    long first = 0, rows = 0;  // of the table
};

// split "": the last round(n * val_fraction) rows (at least 1) to one val shard, the rest to
// train; else all to that split. Throws UserError naming the option when a shard would be empty.
std::vector<ShardSpec> plan_shards(long n, int shards, double val_fraction, const std::string& split);

} // namespace dptrain::ingest
