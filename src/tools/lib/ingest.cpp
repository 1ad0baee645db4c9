// The readers behind `dptrain-data ingest`: CSV, .npy pairs, .npz (through npy.h and zip.h) and
// HDF5, each ending in one checked Table, plus the shard plan. Errors name the file, the line or
// row, and the fix, because the user's own export is what has to change.
// Not for: writing shards or MPI (src/tools/dptrain_data.cpp).
#include "dptrain/tools/ingest.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/data/h5.h"
#include "dptrain/tools/npy.h"
#include "dptrain/tools/zip.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

namespace dptrain::ingest {

namespace {

const char* const kLabelsAre = "labels must be class numbers 0, 1, ..., K-1";

std::string lower_ext(const std::string& path) {
    size_t slash = path.find_last_of('/'), dot = path.find_last_of('.');
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
    std::string e = path.substr(dot + 1);
    for (char& c : e) c = (char)std::tolower((unsigned char)c);
    return e;
}

std::string shape_str(const std::vector<uint64_t>& s) {
    std::string out = "(";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + (s.size() == 1 ? ",)" : ")");
}

// The common end of every reader: features (n, d) already float32, labels as int64 from the
// file; checks the counts, finiteness and label range, naming the file and the row.
Table make_table(const std::string& fwhere, std::vector<float>&& x, long n, int d, const std::string& lwhere,
                 const std::vector<int64_t>& labels) {
    if ((long)labels.size() != n)
        throw UserError(strfmt("%s: %zu labels, but %s has %ld samples; features and labels must have the same length",
                               lwhere.c_str(), labels.size(), fwhere.c_str(), n));
    if (n == 0)
        throw UserError(strfmt("%s: holds zero samples; nothing to convert (check that the export wrote the data)",
                               fwhere.c_str()));
    for (size_t i = 0; i < x.size(); ++i)
        if (!std::isfinite(x[i]))
            throw UserError(strfmt("%s: features[%zu, %zu] is %s%s; fill in or drop missing values first", fwhere.c_str(),
                                   i / d, i % d, std::isnan(x[i]) ? "nan" : "inf",
                                   std::isnan(x[i]) ? "" : " (or beyond float32 range)"));
    Table t;
    t.n = n;
    t.d = d;
    t.x = std::move(x);
    t.y.resize(n);
    for (long i = 0; i < n; ++i) {
        if (labels[i] < 0)
            throw UserError(strfmt("%s: labels[%ld] = %lld is negative; %s", lwhere.c_str(), i, (long long)labels[i],
                                   kLabelsAre));
        if (labels[i] > std::numeric_limits<int32_t>::max())
            throw UserError(strfmt("%s: labels[%ld] = %lld does not fit int32; %s", lwhere.c_str(), i, (long long)labels[i],
                                   kLabelsAre));
        t.y[i] = (int32_t)labels[i];
    }
    return t;
}

// ---- CSV ----

// Splits one line at `delim`, honouring "quoted, fields" ("" inside quotes is a quote), and trims
// spaces around each field.
void split_fields(const std::string& line, char delim, std::vector<std::string>* out) {
    out->clear();
    std::string f;
    bool quoted = false;
    for (size_t i = 0; i <= line.size(); ++i) {
        char c = i < line.size() ? line[i] : delim;
        if (quoted) {
            if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
                f += '"';
                ++i;
            } else if (c == '"') {
                quoted = false;
            } else {
                f += c;
            }
        } else if (c == '"') {
            quoted = true;
        } else if (c == delim) {
            size_t b = f.find_first_not_of(" \t"), e = f.find_last_not_of(" \t");
            out->push_back(b == std::string::npos ? "" : f.substr(b, e - b + 1));
            f.clear();
        } else {
            f += c;
        }
    }
}

bool parse_double(const std::string& s, double* v) {
    if (s.empty()) return false;
    char* end = nullptr;
    errno = 0;
    *v = std::strtod(s.c_str(), &end);
    return end == s.c_str() + s.size();
}

} // namespace

Table read_csv(const std::string& path, int label_column, bool no_header) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UserError(strfmt("%s: cannot open it: %s; check the --input path", path.c_str(), std::strerror(errno)));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string how = "export one row per sample, e.g. df.to_csv(FILE, index=False)";
    if (text.empty()) throw UserError(strfmt("%s: the file is empty; %s", path.c_str(), how.c_str()));
    size_t pos = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;  // a UTF-8 byte-order mark (Excel)

    std::vector<std::string> fields, names;
    std::vector<float> x;
    std::vector<int64_t> y;
    char delim = 0;
    size_t ncols = 0, first_line = 0;
    int lc = 0, index_column = -1;  // the label's column; a column of row names left out, or -1
    bool trailing = false;          // every line ends in a delimiter
    std::string note;
    long line_no = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string::npos) nl = text.size();
        std::string line = text.substr(pos, nl - pos);
        pos = nl + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        if (!delim) {
            delim = line.find(',') != std::string::npos    ? ','
                    : line.find('\t') != std::string::npos ? '\t'
                    : line.find(';') != std::string::npos  ? ';'
                                                           : ',';
        }
        split_fields(line, delim, &fields);
        // A delimiter at the end of every line (some writers put one): an empty last field, left
        // out. The first line decides; a later line without it then has a field too few.
        if (!ncols) trailing = fields.size() >= 3 && fields.back().empty();
        if (trailing && !fields.empty() && fields.back().empty()) fields.pop_back();
        double v;
        if (!ncols) {
            ncols = fields.size();
            first_line = line_no;
            if (ncols < 2)
                throw UserError(strfmt("%s: line %ld has one column; need the features and a label column, separated by "
                                       "commas",
                                       path.c_str(), line_no));
            lc = label_column < 0 ? (int)ncols + label_column : label_column;
            if (lc < 0 || lc >= (int)ncols)
                throw UserError(strfmt("%s: --label-column %d is outside the %zu columns (0..%zu, or -1 for the last)",
                                       path.c_str(), label_column, ncols, ncols - 1));
            bool header = false;
            // An empty field is a missing value, not a column name (pandas' index column has none).
            // "0,1,...,C-1" is pandas' header for a frame made from an array (",0,1,...,C-2" with
            // its index): read as data it would add a sample labelled C-1, and real rows are hardly
            // ever exactly that.
            bool pandas = true, pandas_indexed = fields[0].empty();
            for (size_t c = 0; c < ncols; ++c) {
                header |= !fields[c].empty() && !parse_double(fields[c], &v);
                pandas &= fields[c] == std::to_string(c);
                if (c > 0) pandas_indexed &= fields[c] == std::to_string(c - 1);
            }
            // All numbers, taken as pandas' column names: said, since it is a row's worth of data.
            const bool numeric_names = !header && (pandas || pandas_indexed) && ncols >= 3;
            header |= numeric_names;
            if (header && !no_header) {
                names = fields;
                if (numeric_names)
                    note = "its first line, " + line.substr(0, 40) + (line.size() > 40 ? "..." : "") +
                           ", is pandas' column names for an array (0, 1, 2, ...), not a sample: left out; pass "
                           "--no-header if it is one";
                // A first column without a name holds row names: pandas' index (to_csv writes it
                // unless index=False; read back it is "Unnamed: 0") or R's write.csv row names. As
                // a feature it would tell the model each row's position (the order of a sorted or
                // time-ordered file): left out, and said so.
                if (fields[0].empty() || fields[0] == "Unnamed: 0") {
                    if (lc == 0)
                        throw UserError(strfmt("%s: --label-column 0 is the first column, which has no name: row names "
                                               "(pandas' index), not labels; give the label column's index",
                                               path.c_str()));
                    index_column = 0;
                    note += std::string(note.empty() ? "" : "; ") +
                            "its first column, unnamed, is row names (pandas' index): left out; write the file with "
                            "df.to_csv(FILE, index=False) to say so";
                }
                continue;
            }
        }
        if (fields.size() != ncols)
            throw UserError(strfmt("%s: line %ld has %zu fields, but line %zu has %zu; every row needs the same number of "
                                   "columns (a missing value or a stray '%c'?)",
                                   path.c_str(), line_no, fields.size(), first_line, ncols, delim));
        for (size_t c = 0; c < ncols; ++c) {
            if ((int)c == index_column) continue;
            const std::string& f = fields[c];
            std::string col = strfmt("line %ld, field %zu%s", line_no, c + 1,
                                     names.empty() ? "" : (" (\"" + names[c] + "\")").c_str());
            bool num = parse_double(f, &v);
            if ((int)c == lc) {
                if (!num)
                    throw UserError(strfmt("%s: %s: label '%s' is not a number; %s (map names to numbers first)",
                                           path.c_str(), col.c_str(), f.c_str(), kLabelsAre));
                if (!std::isfinite(v) || v != std::floor(v))
                    throw UserError(strfmt("%s: %s: label '%s' is not an integer; %s (or pick the label column with "
                                           "--label-column)",
                                           path.c_str(), col.c_str(), f.c_str(), kLabelsAre));
                if (v < 0)
                    throw UserError(strfmt("%s: %s: label %s is negative; %s", path.c_str(), col.c_str(), f.c_str(), kLabelsAre));
                if (v > std::numeric_limits<int32_t>::max())
                    throw UserError(strfmt("%s: %s: label %s does not fit int32; %s", path.c_str(), col.c_str(), f.c_str(),
                                           kLabelsAre));
                y.push_back((int64_t)v);
                continue;
            }
            if (f.empty())
                throw UserError(strfmt("%s: %s is empty (a missing value); fill in or drop missing values first",
                                       path.c_str(), col.c_str()));
            if (!num)
                throw UserError(strfmt("%s: %s: '%s' is not a number; every feature must be numeric (encode categories "
                                       "as numbers%s)",
                                       path.c_str(), col.c_str(), f.c_str(),
                                       line_no == (long)first_line && no_header ? ", or drop --no-header if this is a header"
                                                                                : ""));
            float fv = (float)v;  // rounded to nearest, like numpy's astype(np.float32)
            if (!std::isfinite(fv))
                throw UserError(strfmt("%s: %s: '%s' is %s; fill in or drop missing values first", path.c_str(),
                                       col.c_str(), f.c_str(),
                                       std::isnan(fv) ? "not a number (nan)" : "infinite or beyond float32 range"));
            x.push_back(fv);
        }
    }
    if (!ncols) throw UserError(strfmt("%s: the file has only blank lines; %s", path.c_str(), how.c_str()));
    if (y.empty())
        throw UserError(strfmt("%s: no data rows after the header on line %zu; %s", path.c_str(), first_line, how.c_str()));
    long n = (long)y.size();
    Table t = make_table(path, std::move(x), n, (int)ncols - 1 - (index_column >= 0 ? 1 : 0), path, y);
    if (!note.empty()) t.notes.push_back(path + ": " + note);
    return t;
}

// ---- NumPy ----

namespace {

Table from_arrays(const npy::Array& f, const npy::Array& l) {
    if (f.shape.empty() || f.shape.size() > 2)
        throw UserError(strfmt("%s: features have shape %s; need (N, D) or (N,): np.save(f, x.reshape(len(x), -1))",
                               f.where.c_str(), shape_str(f.shape).c_str()));
    if (f.shape.size() == 2 && f.shape[1] == 0)
        throw UserError(strfmt("%s: features have shape %s: no columns; check the export", f.where.c_str(),
                               shape_str(f.shape).c_str()));
    if (f.shape.size() == 2 && f.shape[1] > (uint64_t)std::numeric_limits<int>::max())
        throw UserError(strfmt("%s: %llu features per sample is too many", f.where.c_str(), (unsigned long long)f.shape[1]));
    if (l.shape.empty() || l.shape.size() > 2 || (l.shape.size() == 2 && l.shape[1] != 1))
        throw UserError(strfmt("%s: labels have shape %s; need (N,): np.save(f, y.ravel())", l.where.c_str(),
                               shape_str(l.shape).c_str()));
    if (l.kind != 'i' && l.kind != 'u' && l.kind != 'b')
        throw UserError(strfmt("%s: labels have dtype %s; %s, an integer dtype: np.save(f, y.astype(np.int64))",
                               l.where.c_str(), npy::dtype_name(l).c_str(), kLabelsAre));
    long n = (long)f.shape[0];
    int d = f.shape.size() == 2 ? (int)f.shape[1] : 1;
    return make_table(f.where, npy::to_float32(f), n, d, l.where, npy::to_int64(l));
}

std::string strip_slash(const std::string& s) { return !s.empty() && s[0] == '/' ? s.substr(1) : s; }

const zip::Member* find_member(const zip::Archive& a, const std::vector<std::string>& names, const char* option) {
    for (const std::string& n : names) {
        std::string base = strip_slash(n);
        if (const zip::Member* m = a.find(base)) return m;
        if (const zip::Member* m = a.find(base + ".npy")) return m;
    }
    std::string tried, have;
    for (const std::string& n : names) tried += (tried.empty() ? "" : " or ") + strip_slash(n);
    for (const zip::Member& m : a.members()) {
        std::string s = m.name.size() > 4 && m.name.compare(m.name.size() - 4, 4, ".npy") == 0
                            ? m.name.substr(0, m.name.size() - 4)
                            : m.name;
        have += (have.empty() ? "" : ", ") + s;
    }
    throw UserError(strfmt("%s: no array named %s (the archive holds: %s); pass %s NAME", a.path().c_str(), tried.c_str(),
                           have.empty() ? "nothing" : have.c_str(), option));
}

} // namespace

Table read_npy_pair(const std::string& features_path, const std::string& labels_path) {
    npy::Array f = npy::read_file(features_path);
    npy::Array l = npy::read_file(labels_path);
    return from_arrays(f, l);
}

Table read_npz(const std::string& path, const std::vector<std::string>& features_names,
               const std::vector<std::string>& labels_names) {
    zip::Archive a = zip::Archive::open(path);
    const zip::Member* fm = find_member(a, features_names, "--features-dataset");
    const zip::Member* lm = find_member(a, labels_names, "--labels-dataset");
    npy::Array f = npy::parse(a.read(*fm), path + ": member " + fm->name);
    npy::Array l = npy::parse(a.read(*lm), path + ": member " + lm->name);
    return from_arrays(f, l);
}

// ---- HDF5 ----

namespace {

// H5Lvisit callback: the datasets of a file, for the message when a name is wrong. Opening the
// object (rather than H5Oget_info) keeps one signature across HDF5 1.10 and 1.12.
herr_t collect_dataset(hid_t loc, const char* name, const H5L_info_t*, void* out) {
    hid_t obj = H5Oopen(loc, name, H5P_DEFAULT);
    if (obj < 0) return 0;
    if (H5Iget_type(obj) == H5I_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(std::string("/") + name);
    H5Oclose(obj);
    return 0;
}

h5::Hid open_named(hid_t file, const std::string& path, const std::string& name, const char* option) {
    if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0 || H5Oexists_by_name(file, name.c_str(), H5P_DEFAULT) <= 0) {
        std::vector<std::string> found;
        H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &found);
        std::string have;
        for (const std::string& s : found) have += (have.empty() ? "" : ", ") + s;
        throw UserError(strfmt("%s: dataset %s missing (the file holds: %s); pass %s NAME", path.c_str(), name.c_str(),
                               have.empty() ? "no datasets" : have.c_str(), option));
    }
    hid_t d = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
    if (d < 0) throw UserError(strfmt("%s: %s is not a dataset (a group?); pass %s NAME", path.c_str(), name.c_str(), option));
    return h5::Hid(d, H5Dclose);
}

} // namespace

Table read_hdf5(const std::string& path, const std::string& features_name, const std::string& labels_name) {
    std::lock_guard<std::mutex> g(h5::lock());
    h5::Hid file = h5::open_file(path, "write it again with h5py, or pass --format if it is not HDF5");
    h5::Hid fd = open_named(file.get(), path, features_name, "--features-dataset");
    h5::Hid ld = open_named(file.get(), path, labels_name, "--labels-dataset");
    std::string fwhere = path + ": " + features_name, lwhere = path + ": " + labels_name;

    h5::Hid ft(H5Dget_type(fd.get()), H5Tclose), lt(H5Dget_type(ld.get()), H5Tclose);
    H5T_class_t fc = H5Tget_class(ft.get()), lcls = H5Tget_class(lt.get());
    if (fc != H5T_FLOAT && fc != H5T_INTEGER)
        throw UserError(strfmt("%s: features are not numbers (HDF5 type class %d); store a float or integer array",
                               fwhere.c_str(), (int)fc));
    if (lcls != H5T_INTEGER)
        throw UserError(strfmt("%s: labels are %s, not integers; %s: store y.astype(np.int64)", lwhere.c_str(),
                               lcls == H5T_FLOAT ? "floats" : "not numbers", kLabelsAre));
    std::vector<hsize_t> fdims = h5::dims(fd.get()), ldims = h5::dims(ld.get());
    std::vector<uint64_t> fshape(fdims.begin(), fdims.end()), lshape(ldims.begin(), ldims.end());
    if (fshape.empty() || fshape.size() > 2 || (fshape.size() == 2 && fshape[1] == 0))
        throw UserError(strfmt("%s: features have shape %s; need (N, D) or (N,) (reshape to (len(x), -1))", fwhere.c_str(),
                               shape_str(fshape).c_str()));
    if (lshape.empty() || lshape.size() > 2 || (lshape.size() == 2 && lshape[1] != 1))
        throw UserError(strfmt("%s: labels have shape %s; need (N,) (store y.ravel())", lwhere.c_str(),
                               shape_str(lshape).c_str()));
    long n = (long)fshape[0];
    int d = fshape.size() == 2 ? (int)fshape[1] : 1;
    if ((long)lshape[0] != n)
        throw UserError(strfmt("%s: %llu labels, but %s has %ld samples; features and labels must have the same length",
                               lwhere.c_str(), (unsigned long long)lshape[0], fwhere.c_str(), n));
    // HDF5 converts any stored float or integer type to float32 (round to nearest) and the labels
    // to int64, wide enough that an out-of-range label is seen rather than clipped to int32.
    std::vector<float> x((size_t)n * d);
    std::vector<int64_t> y(n);
    if (n > 0 && H5Dread(fd.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()) < 0)
        throw UserError(fwhere + ": reading the features failed (truncated or corrupt file?); write it again with h5py");
    if (n > 0 && H5Dread(ld.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, y.data()) < 0)
        throw UserError(lwhere + ": reading the labels failed (truncated or corrupt file?); write it again with h5py");
    return make_table(fwhere, std::move(x), n, d, lwhere, y);
}

// ---- Formats, inputs, classes, shards ----

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

int32_t Table::max_label() const { return y.empty() ? -1 : *std::max_element(y.begin(), y.end()); }

void Table::append(Table&& t, const std::string& path) {
    if (n == 0) {
        *this = std::move(t);
        return;
    }
    if (t.d != d)
        throw UserError(strfmt("%s: %d features per sample, but the inputs before it have %d; inputs of one dataset "
                               "need the same columns",
                               path.c_str(), t.d, d));
    x.insert(x.end(), t.x.begin(), t.x.end());
    y.insert(y.end(), t.y.begin(), t.y.end());
    notes.insert(notes.end(), t.notes.begin(), t.notes.end());
    n += t.n;
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

// Up to this many classes, max label + 1 is taken as it is.
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
    // Labels far above their number of values are rarely classes (an id or a price taken for the
    // label): each class is an output of the model, so a wrong guess would cost its memory.
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
