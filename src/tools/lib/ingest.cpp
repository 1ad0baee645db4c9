// The readers behind `dptrain-data ingest`: CSV, .npy pairs, .npz and HDF5, each ending in one
// checked Table. Errors name the file, the row and the fix: the user's export has to change.
// Not for: the shard plan (ingest_plan.cpp), writing shards or MPI (src/tools/dptrain_data.cpp).
#include "dptrain/tools/ingest.h"

#include "dptrain/core/error.h"
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

std::string shape_str(const std::vector<uint64_t>& s) {
    std::string out = "(";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + (s.size() == 1 ? ",)" : ")");
}

// Every reader's end: checks counts, finiteness and label range, naming the file and the row.
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

// Honours "quoted, fields" ("" inside quotes is a quote); trims spaces around each field.
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

const char* const kCsvHow = "export one row per sample, e.g. df.to_csv(FILE, index=False)";

// One CSV file being read: what its first row settled, and the values so far.
struct Csv {
    std::string path;
    int label_column = -1;
    bool no_header = false;
    char delim = 0;
    size_t ncols = 0, first_line = 0;  // 0 until the first non-blank line
    int lc = 0, index_column = -1;     // the label's column; a row-name column left out, or -1
    bool trailing = false;             // every line ends in a delimiter
    std::vector<std::string> fields, names;  // the line being read; the header's names
    std::vector<float> x;
    std::vector<int64_t> y;
    std::string note;
};

std::string read_whole(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UserError(strfmt("%s: cannot open it: %s; check the --input path", path.c_str(), std::strerror(errno)));
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// *pos moves past the line and its "\r\n" or "\n".
std::string next_line(const std::string& text, size_t* pos) {
    size_t nl = text.find('\n', *pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(*pos, nl - *pos);
    *pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return line;
}

// Commas, else tabs, else semicolons, by the first line that has one.
char guess_delimiter(const std::string& line) {
    if (line.find(',') != std::string::npos) return ',';
    if (line.find('\t') != std::string::npos) return '\t';
    if (line.find(';') != std::string::npos) return ';';
    return ',';
}

void split_row(Csv* c, const std::string& line) {
    split_fields(line, c->delim, &c->fields);
    // Some writers end every line in a delimiter: that empty last field is left out. The first
    // line decides.
    if (!c->ncols) c->trailing = c->fields.size() >= 3 && c->fields.back().empty();
    if (c->trailing && !c->fields.empty() && c->fields.back().empty()) c->fields.pop_back();
}

// An empty field is a missing value, not a name (pandas' index column has none). "0,1,...,C-1" is
// pandas' header for a frame from an array: read as data it would add a sample labelled C-1, and
// real rows are hardly ever exactly that; *numeric_names says it was taken so.
bool is_header(const std::vector<std::string>& fields, bool* numeric_names) {
    bool header = false, pandas = true, pandas_indexed = fields[0].empty();
    double v;
    for (size_t c = 0; c < fields.size(); ++c) {
        header |= !fields[c].empty() && !parse_double(fields[c], &v);
        pandas &= fields[c] == std::to_string(c);
        if (c > 0) pandas_indexed &= fields[c] == std::to_string(c - 1);
    }
    *numeric_names = !header && (pandas || pandas_indexed) && fields.size() >= 3;
    return header || *numeric_names;
}

void take_header(Csv* c, const std::string& line, bool numeric_names) {
    c->names = c->fields;
    // All numbers, taken as pandas' column names: said, since it is a row's worth of data.
    if (numeric_names)
        c->note = "its first line, " + line.substr(0, 40) + (line.size() > 40 ? "..." : "") +
                  ", is pandas' column names for an array (0, 1, 2, ...), not a sample: left out; pass "
                  "--no-header if it is one";
    // An unnamed first column holds row names (pandas' index, R's write.csv). As a feature it would
    // tell the model each row's position in a sorted file: left out, and said.
    if (!c->fields[0].empty() && c->fields[0] != "Unnamed: 0") return;
    if (c->lc == 0)
        throw UserError(strfmt("%s: --label-column 0 is the first column, which has no name: row names (pandas' "
                               "index), not labels; give the label column's index",
                               c->path.c_str()));
    c->index_column = 0;
    c->note += std::string(c->note.empty() ? "" : "; ") +
               "its first column, unnamed, is row names (pandas' index): left out; write the file with "
               "df.to_csv(FILE, index=False) to say so";
}

// Sets the columns and the label's; returns whether the line is a header.
bool take_first_row(Csv* c, const std::string& line, long line_no) {
    c->ncols = c->fields.size();
    c->first_line = line_no;
    if (c->ncols < 2)
        throw UserError(strfmt("%s: line %ld has one column; need the features and a label column, separated by commas",
                               c->path.c_str(), line_no));
    c->lc = c->label_column < 0 ? (int)c->ncols + c->label_column : c->label_column;
    if (c->lc < 0 || c->lc >= (int)c->ncols)
        throw UserError(strfmt("%s: --label-column %d is outside the %zu columns (0..%zu, or -1 for the last)",
                               c->path.c_str(), c->label_column, c->ncols, c->ncols - 1));
    bool numeric_names = false;
    if (!is_header(c->fields, &numeric_names) || c->no_header) return false;
    take_header(c, line, numeric_names);
    return true;
}

// An integer in [0, INT32_MAX]; `col` names the field.
int64_t csv_label(const Csv& c, const std::string& f, const std::string& col) {
    const char* path = c.path.c_str();
    double v;
    if (!parse_double(f, &v))
        throw UserError(strfmt("%s: %s: label '%s' is not a number; %s (map names to numbers first)", path, col.c_str(),
                               f.c_str(), kLabelsAre));
    if (!std::isfinite(v) || v != std::floor(v))
        throw UserError(strfmt("%s: %s: label '%s' is not an integer; %s (or pick the label column with "
                               "--label-column)",
                               path, col.c_str(), f.c_str(), kLabelsAre));
    if (v < 0) throw UserError(strfmt("%s: %s: label %s is negative; %s", path, col.c_str(), f.c_str(), kLabelsAre));
    if (v > std::numeric_limits<int32_t>::max())
        throw UserError(strfmt("%s: %s: label %s does not fit int32; %s", path, col.c_str(), f.c_str(), kLabelsAre));
    return (int64_t)v;
}

// Finite as float32; `col` names the field.
float csv_feature(const Csv& c, const std::string& f, const std::string& col, long line_no) {
    const char* path = c.path.c_str();
    double v;
    if (f.empty())
        throw UserError(strfmt("%s: %s is empty (a missing value); fill in or drop missing values first", path,
                               col.c_str()));
    if (!parse_double(f, &v))
        throw UserError(strfmt("%s: %s: '%s' is not a number; every feature must be numeric (encode categories as "
                               "numbers%s)",
                               path, col.c_str(), f.c_str(),
                               line_no == (long)c.first_line && c.no_header ? ", or drop --no-header if this is a header"
                                                                            : ""));
    float fv = (float)v;  // rounded to nearest, like numpy's astype(np.float32)
    if (!std::isfinite(fv))
        throw UserError(strfmt("%s: %s: '%s' is %s; fill in or drop missing values first", path, col.c_str(), f.c_str(),
                               std::isnan(fv) ? "not a number (nan)" : "infinite or beyond float32 range"));
    return fv;
}

void take_row(Csv* c, long line_no) {
    if (c->fields.size() != c->ncols)
        throw UserError(strfmt("%s: line %ld has %zu fields, but line %zu has %zu; every row needs the same number of "
                               "columns (a missing value or a stray '%c'?)",
                               c->path.c_str(), line_no, c->fields.size(), c->first_line, c->ncols, c->delim));
    for (size_t i = 0; i < c->ncols; ++i) {
        if ((int)i == c->index_column) continue;
        const std::string& f = c->fields[i];
        std::string col = strfmt("line %ld, field %zu%s", line_no, i + 1,
                                 c->names.empty() ? "" : (" (\"" + c->names[i] + "\")").c_str());
        if ((int)i == c->lc) c->y.push_back(csv_label(*c, f, col));
        else c->x.push_back(csv_feature(*c, f, col, line_no));
    }
}

} // namespace

Table read_csv(const std::string& path, int label_column, bool no_header) {
    const std::string text = read_whole(path);
    if (text.empty()) throw UserError(strfmt("%s: the file is empty; %s", path.c_str(), kCsvHow));
    size_t pos = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;  // Excel's UTF-8 byte-order mark
    Csv c;
    c.path = path;
    c.label_column = label_column;
    c.no_header = no_header;
    for (long line_no = 1; pos < text.size(); ++line_no) {
        const std::string line = next_line(text, &pos);
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        if (!c.delim) c.delim = guess_delimiter(line);
        split_row(&c, line);
        if (!c.ncols && take_first_row(&c, line, line_no)) continue;
        take_row(&c, line_no);
    }
    if (!c.ncols) throw UserError(strfmt("%s: the file has only blank lines; %s", path.c_str(), kCsvHow));
    if (c.y.empty())
        throw UserError(strfmt("%s: no data rows after the header on line %zu; %s", path.c_str(), c.first_line, kCsvHow));
    long n = (long)c.y.size();
    Table t = make_table(path, std::move(c.x), n, (int)c.ncols - 1 - (c.index_column >= 0 ? 1 : 0), path, c.y);
    if (!c.note.empty()) t.notes.push_back(path + ": " + c.note);
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

// H5Lvisit callback listing datasets for the error message. H5Oopen, not H5Oget_info: one
// signature across HDF5 1.10 and 1.12.
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
    // HDF5 converts to float32 (nearest) and labels to int64, so an out-of-range label is seen
    // rather than clipped to int32.
    std::vector<float> x((size_t)n * d);
    std::vector<int64_t> y(n);
    if (n > 0 && H5Dread(fd.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()) < 0)
        throw UserError(fwhere + ": reading the features failed (truncated or corrupt file?); write it again with h5py");
    if (n > 0 && H5Dread(ld.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, y.data()) < 0)
        throw UserError(lwhere + ": reading the labels failed (truncated or corrupt file?); write it again with h5py");
    return make_table(fwhere, std::move(x), n, d, lwhere, y);
}

// ---- Table ----

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

} // namespace dptrain::ingest
