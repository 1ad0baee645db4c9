// Reading what users have (CSV, NumPy .npy/.npz, HDF5 with any dataset names) into one table of
// float32 features and int32 labels, and planning its split into equal shards, for
// `dptrain-data ingest`. Every problem with an input is a UserError "FILE: what; what to do".
// Not for: writing shards (dptrain-data does, with the synth writer) or reading dptrain's own
// shards for training (shards.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dptrain::ingest {

enum class Format { automatic, csv, npy, npz, hdf5 };
const char* format_name(Format f);
// "auto" | "csv" | "npy" | "npz" | "hdf5" (also "h5"); throws UserError naming --format.
Format parse_format(const std::string& s);
// By the file's first bytes (\x93NUMPY, PK, the HDF5 signature), else by its extension, else
// CSV when the start looks like text. Throws UserError when the file cannot be opened.
Format detect_format(const std::string& path);

struct Table {
    long n = 0;              // samples
    int d = 0;               // features per sample
    std::vector<float> x;    // (n, d) row-major
    std::vector<int32_t> y;  // (n) labels, checked >= 0
    std::vector<std::string> notes;  // what reading changed, one line each ("FILE: ..."), for the summary
    int32_t max_label() const;
    // Appends `t` (same d) after this table's rows.
    void append(Table&& t, const std::string& path);
};

// CSV: one sample per line, fields separated by commas (or tabs, when the first line has tabs
// and no commas), one of them the integer label. label_column counts from 0; negative counts from
// the end (-1: last). The first line is a header when a non-empty field is not a number or when it
// is pandas' default "0,1,...,C-1" (C >= 3; or ",0,...,C-2" with its index), unless no_header. A
// header whose first name is empty (or "Unnamed: 0") marks that column as row names, left out
// (with a note). Blank lines are skipped; "quoted" fields are unquoted.
Table read_csv(const std::string& path, int label_column, bool no_header);
// Two .npy files: features (N, D) or (N,) of a float, integer or bool dtype; labels (N,) or (N, 1)
// of an integer or bool dtype.
Table read_npy_pair(const std::string& features_path, const std::string& labels_path);
// An .npz archive: the first member among `features_names` (each tried as NAME and NAME.npy)
// is the features, likewise for labels; same rules as read_npy_pair.
Table read_npz(const std::string& path, const std::vector<std::string>& features_names,
               const std::vector<std::string>& labels_names);
// An HDF5 file: features dataset (N, D) or (N,) of any integer or float type, converted to
// float32 by HDF5; labels (N,) or (N, 1) of an integer type.
Table read_hdf5(const std::string& path, const std::string& features_name, const std::string& labels_name);

struct Options {
    Format format = Format::automatic;
    std::string features_name, labels_name;  // "" -> the format's defaults (npz: x, features; y, labels)
    int label_column = -1;                    // CSV
    bool no_header = false;                   // CSV
};

// Reads every input in order (.npy: in pairs, features then labels) and concatenates them.
// All inputs must be of one format; *used receives it. Throws UserError for an empty input list,
// mixed formats, an odd number of .npy files, differing feature counts or non-finite features.
Table read_inputs(const std::vector<std::string>& inputs, const Options& o, Format* used);

// The number of classes: `requested` when > 0 (every label must be below it), else max label + 1.
// Throws UserError naming `what` (the inputs) when a label is out of range or fewer than 2 classes.
int resolve_classes(const Table& t, int requested, const std::string& what);

// Rows [first, first + rows) of shard s of `shards` over n rows: equal sizes, the first n % shards
// shards one row longer. The split synth and ingest share.
void shard_range(long n, int shards, int s, long* first, long* rows);

struct ShardSpec {
    std::string split;  // "train" or "val"
    int index = 0, of = 1;
    long first = 0, rows = 0;  // rows of the table
};

// The shards of `n` input rows in input order. split "": the last round(n * val_fraction) rows
// (at least one when val_fraction > 0) go to one val shard, the rest to `shards` train shards;
// "train" or "val": every row to `shards` shards of that split. Throws UserError naming the
// option to change when a shard would be empty.
std::vector<ShardSpec> plan_shards(long n, int shards, double val_fraction, const std::string& split);

} // namespace dptrain::ingest
