// `dptrain-data ingest` around the readers: format, inputs into one Table, classes, shard plan.
// Not for: parsing a file's contents (ingest.cpp) or writing shards (src/tools/dptrain_data.cpp).
#include "dptrain/tools/ingest.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

namespace dptrain::ingest {

namespace {

std::string lower_ext(const std::string& path) {
    size_t slash = path.find_last_of('/'), dot = path.find_last_of('.');
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
    std::string e = path.substr(dot + 1);
    for (char& c : e) c = (char)std::tolower((unsigned char)c);
    return e;
}

} // namespace

const char* format_name(Format f) {
    switch (f) {
    case Format::automatic: return "auto";
    case Format::csv: return "csv";
    case Format::npy: return "npy";
    case Format::npz: return "npz";
    case Format::hdf5: return "hdf5";
    }
    return "?";
}

Format parse_format(const std::string& s) {
    if (s == "auto") return Format::automatic;
    if (s == "csv") return Format::csv;
    if (s == "npy") return Format::npy;
    if (s == "npz") return Format::npz;
    if (s == "hdf5" || s == "h5") return Format::hdf5;
    throw UserError(strfmt("--format '%s' is unknown; use auto, csv, npy, npz or hdf5", s.c_str()));
}

Format detect_format(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UserError(strfmt("%s: cannot open it: %s; check the --input path", path.c_str(), std::strerror(errno)));
    char buf[4096];
    in.read(buf, sizeof buf);
    std::string head(buf, (size_t)in.gcount());
    if (head.compare(0, 6, "\x93NUMPY") == 0) return Format::npy;
    if (head.compare(0, 4, std::string("PK\x03\x04", 4)) == 0 || head.compare(0, 4, std::string("PK\x05\x06", 4)) == 0)
        return Format::npz;
    if (head.compare(0, 8, "\x89HDF\r\n\x1a\n") == 0) return Format::hdf5;
    // No known signature: trust the name, so a damaged x.npy is reported as a bad .npy file.
    std::string e = lower_ext(path);
    if (e == "npy") return Format::npy;
    if (e == "npz") return Format::npz;
    if (e == "h5" || e == "hdf5" || e == "hdf" || e == "he5") return Format::hdf5;
    if (e == "csv" || e == "tsv" || e == "txt" || head.find('\0') == std::string::npos) return Format::csv;
    throw UserError(strfmt("%s: cannot tell its format (not CSV text, and no .npy, .npz or HDF5 signature); pass --format",
                           path.c_str()));
}

Table read_inputs(const std::vector<std::string>& inputs, const Options& o, Format* used) {
    if (inputs.empty())
        throw UserError("ingest: give the data with --input FILE (see " + runnable("dptrain-data") + " ingest --help)");
    Format fmt = o.format;
    if (fmt == Format::automatic) {
        fmt = detect_format(inputs[0]);
        for (const std::string& p : inputs) {
            Format f = detect_format(p);
            if (f != fmt)
                throw UserError(strfmt("%s: looks like %s, but %s looks like %s; convert inputs of one format per run (or "
                                       "pass --format)",
                                       p.c_str(), format_name(f), inputs[0].c_str(), format_name(fmt)));
        }
    }
    *used = fmt;
    Table all;
    if (fmt == Format::npy) {
        if (inputs.size() % 2 != 0)
            throw UserError(strfmt("%s: a .npy file holds one array; give features and labels as a pair: "
                                   "--input features.npy --input labels.npy (%zu .npy files given)",
                                   inputs.back().c_str(), inputs.size()));
        for (size_t i = 0; i < inputs.size(); i += 2) all.append(read_npy_pair(inputs[i], inputs[i + 1]), inputs[i]);
        return all;
    }
    for (const std::string& p : inputs) {
        if (fmt == Format::csv) {
            all.append(read_csv(p, o.label_column, o.no_header), p);
        } else if (fmt == Format::npz) {
            std::vector<std::string> fn = o.features_name.empty() ? std::vector<std::string>{"x", "features"}
                                                                  : std::vector<std::string>{o.features_name};
            std::vector<std::string> ln = o.labels_name.empty() ? std::vector<std::string>{"y", "labels"}
                                                                : std::vector<std::string>{o.labels_name};
            all.append(read_npz(p, fn, ln), p);
        } else {
            all.append(read_hdf5(p, o.features_name.empty() ? "/features" : o.features_name,
                                 o.labels_name.empty() ? "/labels" : o.labels_name),
                       p);
        }
    }
    return all;
}

// Up to this many classes, max label + 1 is taken as is.
constexpr long kFewClasses = 10000;

int resolve_classes(const Table& t, int requested, const std::string& what) {
    int32_t top = t.max_label();
    if (requested > 0) {
        if (requested < 2) throw UserError(strfmt("--num-classes %d: a classifier needs at least 2 classes", requested));
        if (top >= requested) {
            long row = std::find(t.y.begin(), t.y.end(), top) - t.y.begin();
            throw UserError(strfmt("%s: label %d (sample %ld) is not below --num-classes %d; raise --num-classes or fix "
                                   "the labels",
                                   what.c_str(), top, row, requested));
        }
        return requested;
    }
    if (top < 1)
        throw UserError(strfmt("%s: every label is 0, so there is one class; pass --num-classes K with the data's number "
                               "of classes",
                               what.c_str()));
    if (top == std::numeric_limits<int32_t>::max())
        throw UserError(strfmt("%s: label %d leaves no class count that fits int32; is it the label column? (choose it "
                               "with --label-column)",
                               what.c_str(), top));
    // Labels far above their count of values are rarely classes (an id or price taken for the
    // label), and each class costs the model an output.
    const long classes = (long)top + 1;
    if (classes > kFewClasses) {
        std::vector<int32_t> values(t.y);
        std::sort(values.begin(), values.end());
        const long distinct = std::unique(values.begin(), values.end()) - values.begin();
        if (classes > 100 * distinct)
            throw UserError(strfmt("%s: the labels run up to %d, which makes %ld classes, but only %ld distinct values "
                                   "occur; is it the label column? (choose it with --label-column) If %ld classes is "
                                   "right, say so with --num-classes %ld",
                                   what.c_str(), top, classes, distinct, classes, classes));
    }
    return (int)classes;
}

void shard_range(long n, int shards, int s, long* first, long* rows) {
    long base = n / shards, extra = n % shards;
    *first = base * s + std::min<long>(s, extra);
    *rows = base + (s < extra ? 1 : 0);
}

std::vector<ShardSpec> plan_shards(long n, int shards, double val_fraction, const std::string& split) {
    if (shards < 1) throw UserError(strfmt("--shards %d: need at least 1", shards));
    if (!split.empty() && split != "train" && split != "val")
        throw UserError(strfmt("--split '%s' is unknown; use train or val (or leave it out for both, by --val-fraction)",
                               split.c_str()));
    if (split.empty() && !(val_fraction >= 0 && val_fraction < 1))
        throw UserError(strfmt("--val-fraction %g is outside [0, 1)", val_fraction));
    long n_val = 0;
    if (split == "val") n_val = n;
    else if (split.empty() && val_fraction > 0) n_val = std::max(1L, (long)std::llround((double)n * val_fraction));
    long n_train = n - n_val;
    std::vector<ShardSpec> plan;
    auto add = [&](const std::string& name, long rows_total, long offset, int count) {
        if (rows_total < count)
            throw UserError(strfmt("%ld %s samples cannot fill --shards %d (a shard may not be empty); lower --shards%s",
                                   rows_total, name.c_str(), count, split.empty() ? " or --val-fraction" : ""));
        for (int s = 0; s < count; ++s) {
            ShardSpec sp;
            sp.split = name;
            sp.index = s;
            sp.of = count;
            shard_range(rows_total, count, s, &sp.first, &sp.rows);
            sp.first += offset;
            plan.push_back(sp);
        }
    };
    if (split != "val") add("train", n_train, 0, shards);
    if (split == "val") add("val", n_val, 0, shards);
    else if (n_val > 0) add("val", n_val, n_train, 1);
    return plan;
}

} // namespace dptrain::ingest
