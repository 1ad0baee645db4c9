// The ingest readers (CSV, .npy, .npz, HDF5): exact values, and one message naming the file and
// the fix for each kind of bad input; the shard plan. Inputs are built byte by byte here (the
// .npy header, the zip records) so the readers are checked against the formats, not themselves.
#include "helpers.h"

#include "dptrain/core/error.h"
#include "dptrain/tools/ingest.h"
#include "dptrain/tools/npy.h"
#include "dptrain/tools/token_files.h"
#include "dptrain/data/tokens.h"
#include "dptrain/tools/zip.h"

#include <catch2/catch.hpp>

#include <zlib.h>

#include <cstring>
#include <fstream>

using namespace dptrain;
using namespace dptrain::ingest;
using testing::temp_dir;

namespace {

void put(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

template <typename T>
std::string raw(const std::vector<T>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// An .npy image as np.save writes it: magic, version, header length, the dict padded with spaces
// to a multiple of 64 bytes and ended by '\n', then the data.
std::string npy_image(const std::string& descr, const std::string& shape, const std::string& data, int major = 1,
                bool fortran = false) {
    std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + shape + ", }";
    size_t pre = major == 1 ? 10 : 12;
    while ((pre + dict.size() + 1) % 64) dict += ' ';
    dict += '\n';
    std::string out = "\x93NUMPY";
    out += (char)major;
    out += '\0';
    uint32_t n = (uint32_t)dict.size();
    out.append(reinterpret_cast<const char*>(&n), major == 1 ? 2 : 4);
    return out + dict + data;
}

void le(std::string& s, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) s += (char)((v >> (8 * i)) & 0xFF);
}

std::string deflate_raw(const std::string& in) {
    z_stream zs;
    std::memset(&zs, 0, sizeof zs);
    REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    std::string out(deflateBound(&zs, in.size()), '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = (uInt)in.size();
    zs.next_out = reinterpret_cast<Bytef*>(&out[0]);
    zs.avail_out = (uInt)out.size();
    REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
}

// A zip archive of `members`: method 0 or 8; with `descriptor`, the local headers carry zero
// sizes and CRC (flag bit 3) and a data descriptor follows each member's data, as streaming
// writers do.
std::string zip_image(const std::vector<std::pair<std::string, std::string>>& members, bool deflate, bool descriptor = false) {
    std::string out, cd;
    for (const auto& m : members) {
        std::string data = deflate ? deflate_raw(m.second) : m.second;
        uint32_t crc = (uint32_t)crc32(0L, reinterpret_cast<const Bytef*>(m.second.data()), (uInt)m.second.size());
        uint64_t at = out.size();
        uint16_t flags = descriptor ? 8 : 0, method = deflate ? 8 : 0;
        le(out, 0x04034b50, 4), le(out, 20, 2), le(out, flags, 2), le(out, method, 2), le(out, 0, 4);
        le(out, descriptor ? 0 : crc, 4), le(out, descriptor ? 0 : data.size(), 4), le(out, descriptor ? 0 : m.second.size(), 4);
        le(out, m.first.size(), 2), le(out, 0, 2);
        out += m.first + data;
        if (descriptor) le(out, 0x08074b50, 4), le(out, crc, 4), le(out, data.size(), 4), le(out, m.second.size(), 4);
        le(cd, 0x02014b50, 4), le(cd, 20, 2), le(cd, 20, 2), le(cd, flags, 2), le(cd, method, 2), le(cd, 0, 4);
        le(cd, crc, 4), le(cd, data.size(), 4), le(cd, m.second.size(), 4), le(cd, m.first.size(), 2);
        le(cd, 0, 2), le(cd, 0, 2), le(cd, 0, 2), le(cd, 0, 2), le(cd, 0, 4), le(cd, at, 4);
        cd += m.first;
    }
    uint64_t cd_at = out.size();
    out += cd;
    le(out, 0x06054b50, 4), le(out, 0, 2), le(out, 0, 2), le(out, members.size(), 2), le(out, members.size(), 2);
    le(out, cd.size(), 4), le(out, cd_at, 4), le(out, 0, 2);
    return out;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const UserError& e) {
        return e.what();
    }
    return "(no error)";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

} // namespace

TEST_CASE("CSV: header detected, label column chosen, values exact", "[ingest]") {
    std::string dir = temp_dir("csv");
    put(dir + "/a.csv", "\xEF\xBB\xBF\"f 1\",f2,label\r\n0.1, -2.5e3 ,2\r\n\n1e-3,7,0\r\n");
    Table t = read_csv(dir + "/a.csv", -1, false);
    REQUIRE(t.n == 2);
    REQUIRE(t.d == 2);
    CHECK(t.x == std::vector<float>{(float)0.1, -2500.0f, (float)1e-3, 7.0f});
    CHECK(t.y == std::vector<int32_t>{2, 0});

    put(dir + "/b.csv", "3\t1.5\t2\n1\t-1\t0\n");  // tabs, no header, label first
    Table u = read_csv(dir + "/b.csv", 0, false);
    CHECK(u.n == 2);
    CHECK(u.x == std::vector<float>{1.5f, 2.0f, -1.0f, 0.0f});
    CHECK(u.y == std::vector<int32_t>{3, 1});
    CHECK(read_csv(dir + "/b.csv", 0, true).n == 2);
    put(dir + "/c.csv", "1,2,3.0\n");  // an integral label written as a float is an integer
    CHECK(read_csv(dir + "/c.csv", -1, false).y == std::vector<int32_t>{3});
    put(dir + "/p.csv", "0,1,2\n5,6,1\n");  // pandas' header of a frame made from an array
    CHECK(read_csv(dir + "/p.csv", -1, false).n == 1);
    CHECK(read_csv(dir + "/p.csv", -1, true).n == 2);
    // Said: a row's worth of numbers was taken as names (data/README.md says a non-numeric first line).
    const std::vector<std::string> notes = read_csv(dir + "/p.csv", -1, false).notes;
    REQUIRE(notes.size() == 1);
    CHECK(has(notes[0], "p.csv: its first line, 0,1,2, is pandas' column names for an array (0, 1, 2, ...), not a "
                        "sample: left out; pass --no-header if it is one"));
    CHECK(read_csv(dir + "/c.csv", -1, false).notes.empty());
    // A delimiter ending every line: no empty last column (the label was read from it, '' refused).
    put(dir + "/t.csv", "a,b,label,\n1,2,0,\n3,4,1,\n");
    const Table tr = read_csv(dir + "/t.csv", -1, false);
    CHECK((tr.n == 2 && tr.d == 2));
    CHECK(tr.y == std::vector<int32_t>{0, 1});
    CHECK(tr.x == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("CSV: a first column without a name is row names (pandas' index), left out with a note", "[ingest]") {
    std::string dir = temp_dir("csv-index");
    // df.to_csv(FILE): the index first, under an empty name (it was read as a feature).
    put(dir + "/i.csv", ",a,b,label\n0,1.5,2.5,0\n1,1.0,2.0,1\n7,3,4,1\n");
    Table t = read_csv(dir + "/i.csv", -1, false);
    CHECK(t.d == 2);
    CHECK(t.x == std::vector<float>{1.5f, 2.5f, 1.0f, 2.0f, 3.0f, 4.0f});
    CHECK(t.y == std::vector<int32_t>{0, 1, 1});
    REQUIRE(t.notes.size() == 1);
    CHECK(has(t.notes[0], dir + "/i.csv: its first column, unnamed, is row names (pandas' index): left out"));
    // A frame made from an array, with its index: ",0,1,...".
    put(dir + "/n.csv", ",0,1,2\n0,5,6,1\n1,7,8,0\n");
    Table u = read_csv(dir + "/n.csv", -1, false);
    CHECK((u.n == 2 && u.d == 2));
    CHECK(u.x == std::vector<float>{5, 6, 7, 8});
    REQUIRE(u.notes.size() == 1);
    CHECK(has(u.notes[0], "is pandas' column names for an array (0, 1, 2, ...), not a sample: left out; pass "
                          "--no-header if it is one; its first column, unnamed, is row names"));
    // Read back and written again by pandas: "Unnamed: 0"; R's write.csv: quoted row names.
    put(dir + "/u.csv", "Unnamed: 0,a,label\n0,1.5,0\n1,2.5,1\n");
    CHECK(read_csv(dir + "/u.csv", -1, false).d == 1);
    put(dir + "/r.csv", "\"\",\"a\",\"label\"\n\"r1\",1.5,0\n\"r2\",2.5,1\n");
    CHECK(read_csv(dir + "/r.csv", -1, false).x == std::vector<float>{1.5f, 2.5f});
    CHECK(has(error_of([&] { read_csv(dir + "/i.csv", 0, false); }), "--label-column 0 is the first column, which has no name"));
    // Without a header the first field is data (empty: a missing value).
    CHECK(has(error_of([&] { read_csv(dir + "/i.csv", -1, true); }), "field 1 is empty"));
}

TEST_CASE("CSV: each bad input gives one message naming the file, the line and the fix", "[ingest]") {
    std::string dir = temp_dir("csv-bad");
    auto err = [&](const std::string& name, const std::string& text, int label_column = -1, bool no_header = false) {
        put(dir + "/" + name, text);
        return error_of([&] { read_csv(dir + "/" + name, label_column, no_header); });
    };
    std::string e = err("ragged.csv", "a,b,y\n1,2,0\n1,2\n");
    CHECK(has(e, dir + "/ragged.csv: line 3 has 2 fields, but line 1 has 3"));
    CHECK(has(e, "same number of columns"));
    e = err("text.csv", "a,b,y\n1,2,0\n1,abc,1\n");
    CHECK(has(e, "text.csv: line 3, field 2 (\"b\"): 'abc' is not a number"));
    e = err("frac.csv", "1,2,0.5\n");
    CHECK(has(e, "frac.csv: line 1, field 3: label '0.5' is not an integer"));
    e = err("neg.csv", "1,2,-1\n");
    CHECK(has(e, "label -1 is negative"));
    e = err("name.csv", "x,y\n1,cat\n");
    CHECK(has(e, "label 'cat' is not a number"));
    e = err("missing.csv", "1,,0\n");
    CHECK(has(e, "line 1, field 2 is empty"));
    e = err("nan.csv", "1,nan,0\n");
    CHECK(has(e, "not a number (nan)"));
    CHECK(has(err("empty.csv", ""), "empty.csv: the file is empty"));
    CHECK(has(err("blank.csv", "\n \n"), "only blank lines"));
    CHECK(has(err("header.csv", "a,b,y\n"), "no data rows after the header on line 1"));
    CHECK(has(err("nohdr.csv", "a,b,y\n1,2,0\n", -1, true), "or drop --no-header"));
    CHECK(has(err("col.csv", "1,2,0\n", 5), "--label-column 5 is outside the 3 columns"));
    CHECK(has(err("one.csv", "1\n2\n"), "has one column"));
}

TEST_CASE("npy: dtypes converted like numpy's astype(float32), versions 1-3, shapes", "[ingest]") {
    std::string dir = temp_dir("npy");
    std::vector<double> f64 = {0.1, -1e-30, 3.141592653589793, 1e30, 2.5, -7};
    put(dir + "/x.npy", npy_image("<f8", "(3, 2)", raw(f64)));
    put(dir + "/y.npy", npy_image("<i8", "(3,)", raw(std::vector<int64_t>{0, 4, 2})));
    Table t = read_npy_pair(dir + "/x.npy", dir + "/y.npy");
    REQUIRE(t.n == 3);
    REQUIRE(t.d == 2);
    for (size_t i = 0; i < f64.size(); ++i) CHECK(t.x[i] == (float)f64[i]);
    CHECK(t.y == std::vector<int32_t>{0, 4, 2});

    // (N,) features are one feature; int16 features, uint8 labels of shape (N, 1); version 2.0.
    put(dir + "/x1.npy", npy_image("<i2", "(3,)", raw(std::vector<int16_t>{-3, 0, 300}), 2));
    put(dir + "/y1.npy", npy_image("|u1", "(3, 1)", raw(std::vector<uint8_t>{1, 0, 1}), 3));
    Table u = read_npy_pair(dir + "/x1.npy", dir + "/y1.npy");
    CHECK(u.d == 1);
    CHECK(u.x == std::vector<float>{-3.0f, 0.0f, 300.0f});
    CHECK(u.y == std::vector<int32_t>{1, 0, 1});
    // float16 converts exactly; Fortran order of one dimension is the same bytes.
    put(dir + "/h.npy", npy_image("<f2", "(2,)", raw(std::vector<uint16_t>{0x3C00, 0xC500}), 1, true));
    put(dir + "/y2.npy", npy_image("<i4", "(2,)", raw(std::vector<int32_t>{1, 1})));
    CHECK(read_npy_pair(dir + "/h.npy", dir + "/y2.npy").x == std::vector<float>{1.0f, -5.0f});
}

TEST_CASE("npy: bad files are named with the fix", "[ingest]") {
    std::string dir = temp_dir("npy-bad");
    put(dir + "/y.npy", npy_image("<i8", "(2,)", raw(std::vector<int64_t>{0, 1})));
    auto err = [&](const std::string& name, const std::string& bytes) {
        put(dir + "/" + name, bytes);
        return error_of([&] { read_npy_pair(dir + "/" + name, dir + "/y.npy"); });
    };
    std::string four = raw(std::vector<float>{1, 2, 3, 4});
    CHECK(has(err("magic.npy", "just text, not numpy"), "magic.npy: not a .npy file"));
    CHECK(has(err("short.npy", npy_image("<f4", "(2, 4)", four)), "short.npy: truncated: the shape needs 8 elements"));
    CHECK(has(err("hdr.npy", npy_image("<f4", "(2, 2)", four).substr(0, 30)), "truncated"));
    std::string e = err("cplx.npy", npy_image("<c8", "(2,)", four));
    CHECK(has(e, "cplx.npy: dtype complex64 ('<c8') is not supported"));
    CHECK(has(e, "arr.real"));
    e = err("fort.npy", npy_image("<f4", "(2, 2)", four, 1, true));
    CHECK(has(e, "fort.npy: fortran_order is True"));
    CHECK(has(e, "np.ascontiguousarray"));
    CHECK(has(err("big.npy", npy_image(">f4", "(2, 2)", four)), "big-endian"));
    CHECK(has(err("str.npy", npy_image("<U1", "(2, 2)", four)), "dtype str"));
    CHECK(has(err("3d.npy", npy_image("<f4", "(2, 1, 2)", four)), "shape (2, 1, 2); need (N, D) or (N,)"));
    CHECK(has(err("v9.npy", [&] { std::string b = npy_image("<f4", "(2, 2)", four); b[6] = 9; return b; }()),
              "version 9.0 is not supported"));
    e = err("n.npy", npy_image("<f4", "(4,)", four));
    CHECK(has(e, dir + "/y.npy: 2 labels, but " + dir + "/n.npy has 4 samples"));
    CHECK(has(err("zero.npy", npy_image("<f4", "(0, 3)", "")), "2 labels, but"));
    put(dir + "/y0.npy", npy_image("<i8", "(0,)", ""));
    put(dir + "/x0.npy", npy_image("<f4", "(0, 3)", ""));
    CHECK(has(error_of([&] { read_npy_pair(dir + "/x0.npy", dir + "/y0.npy"); }), "x0.npy: holds zero samples"));
    put(dir + "/x2.npy", npy_image("<f4", "(2, 2)", four));
    put(dir + "/yf.npy", npy_image("<f8", "(2,)", raw(std::vector<double>{0, 1})));
    CHECK(has(error_of([&] { read_npy_pair(dir + "/x2.npy", dir + "/yf.npy"); }), "yf.npy: labels have dtype float64"));
    put(dir + "/yn.npy", npy_image("<i4", "(2,)", raw(std::vector<int32_t>{0, -2})));
    CHECK(has(error_of([&] { read_npy_pair(dir + "/x2.npy", dir + "/yn.npy"); }), "yn.npy: labels[1] = -2 is negative"));
    // A uint64 above 2^63-1 is named as the file holds it, not as the int64 it would clamp to.
    put(dir + "/yu.npy", npy_image("<u8", "(2,)", raw(std::vector<uint64_t>{0, 18446744073709551615ull})));
    CHECK(has(error_of([&] { read_npy_pair(dir + "/x2.npy", dir + "/yu.npy"); }),
              "yu.npy: element 1 is 18446744073709551615, above any id or label"));
}

TEST_CASE("npz: stored, deflated and streamed members; names tried in order", "[ingest]") {
    std::string dir = temp_dir("npz");
    std::vector<float> x = {1.5f, -2, 0.25f, 8, 9, 10};
    std::string xs = npy_image("<f4", "(3, 2)", raw(x)), ys = npy_image("<i8", "(3,)", raw(std::vector<int64_t>{2, 0, 1}));
    for (int variant = 0; variant < 3; ++variant) {
        put(dir + "/a.npz", zip_image({{"x.npy", xs}, {"y.npy", ys}}, variant >= 1, variant == 2));
        Table t = read_npz(dir + "/a.npz", {"x", "features"}, {"y", "labels"});
        CHECK(t.x == x);
        CHECK(t.y == std::vector<int32_t>{2, 0, 1});
    }
    put(dir + "/b.npz", zip_image({{"features.npy", xs}, {"labels.npy", ys}, {"extra.npy", ys}}, true));
    CHECK(read_npz(dir + "/b.npz", {"x", "features"}, {"y", "labels"}).n == 3);
    CHECK(read_npz(dir + "/b.npz", {"/features"}, {"extra"}).n == 3);
    std::string e = error_of([&] { read_npz(dir + "/b.npz", {"x", "feats"}, {"y"}); });
    CHECK(has(e, "b.npz: no array named x or feats (the archive holds: features, labels, extra); pass --features-dataset"));

    std::string good = zip_image({{"x.npy", xs}, {"y.npy", ys}}, true);
    put(dir + "/trunc.npz", good.substr(0, good.size() - 10));
    CHECK(has(error_of([&] { read_npz(dir + "/trunc.npz", {"x"}, {"y"}); }), "no end-of-central-directory record"));
    std::string bad = good;
    bad[40] ^= 0x55;  // inside x.npy's deflate data
    put(dir + "/crc.npz", bad);
    e = error_of([&] { read_npz(dir + "/crc.npz", {"x"}, {"y"}); });
    CHECK((has(e, "crc.npz: member x.npy: ") && (has(e, "CRC mismatch") || has(e, "corrupt"))));
    put(dir + "/junk.npz", "not a zip file at all, just some text here");
    CHECK(has(error_of([&] { read_npz(dir + "/junk.npz", {"x"}, {"y"}); }), "junk.npz: not a zip archive"));
}

TEST_CASE("HDF5: any dataset names, float64 and int64 converted, missing names listed", "[ingest]") {
    std::string dir = temp_dir("h5in");
    std::vector<double> x = {0.1, 0.2, 1e-8, -3, 5.5, 1.0 / 3};
    std::vector<int64_t> y = {1, 0, 2};
    {
        std::lock_guard<std::mutex> g(h5::lock());
        h5::Hid f = h5::create_file(dir + "/a.h5");
        h5::Hid grp(H5Gcreate2(f.get(), "/data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
        hsize_t xd[2] = {3, 2}, yd[1] = {3};
        h5::Hid xs(H5Screate_simple(2, xd, nullptr), H5Sclose), ys(H5Screate_simple(1, yd, nullptr), H5Sclose);
        h5::Hid dx(H5Dcreate2(f.get(), "/data/X", H5T_IEEE_F64LE, xs.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
        h5::Hid dy(H5Dcreate2(f.get(), "/data/y", H5T_STD_I64LE, ys.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
        h5::Hid dz(H5Dcreate2(f.get(), "/data/yf", H5T_IEEE_F64LE, ys.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
        REQUIRE(H5Dwrite(dx.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()) >= 0);
        REQUIRE(H5Dwrite(dy.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, y.data()) >= 0);
        REQUIRE(H5Dwrite(dz.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()) >= 0);
    }
    Table t = read_hdf5(dir + "/a.h5", "/data/X", "/data/y");
    REQUIRE(t.n == 3);
    REQUIRE(t.d == 2);
    for (size_t i = 0; i < x.size(); ++i) CHECK(t.x[i] == (float)x[i]);
    CHECK(t.y == std::vector<int32_t>{1, 0, 2});
    std::string e = error_of([&] { read_hdf5(dir + "/a.h5", "/features", "/labels"); });
    CHECK(has(e, "a.h5: dataset /features missing (the file holds: /data/X, /data/y, /data/yf); pass --features-dataset"));
    CHECK(has(error_of([&] { read_hdf5(dir + "/a.h5", "/data/X", "/data/yf"); }), "labels are floats, not integers"));
    CHECK(has(error_of([&] { read_hdf5(dir + "/a.h5", "/data/X", "/nope/y"); }), "dataset /nope/y missing"));
    put(dir + "/b.h5", "not hdf5");
    CHECK(has(error_of([&] { read_hdf5(dir + "/b.h5", "/features", "/labels"); }), "b.h5: not an HDF5 file"));
}

TEST_CASE("read_inputs: formats detected, inputs concatenated, mixtures refused", "[ingest]") {
    std::string dir = temp_dir("inputs");
    put(dir + "/a.csv", "f,g,y\n1,2,0\n3,4,1\n");
    put(dir + "/b.txt", "5,6,2\n");
    put(dir + "/x.npy", npy_image("<f4", "(1, 2)", raw(std::vector<float>{7, 8})));
    put(dir + "/y.npy", npy_image("<i4", "(1,)", raw(std::vector<int32_t>{1})));
    put(dir + "/x3.npy", npy_image("<f4", "(1, 3)", raw(std::vector<float>{7, 8, 9})));
    CHECK(detect_format(dir + "/a.csv") == Format::csv);
    CHECK(detect_format(dir + "/x.npy") == Format::npy);
    Options o;
    Format used;
    Table t = read_inputs({dir + "/a.csv", dir + "/b.txt"}, o, &used);
    CHECK(used == Format::csv);
    CHECK(t.n == 3);
    CHECK(t.x == std::vector<float>{1, 2, 3, 4, 5, 6});
    CHECK(t.y == std::vector<int32_t>{0, 1, 2});
    CHECK(read_inputs({dir + "/x.npy", dir + "/y.npy", dir + "/x.npy", dir + "/y.npy"}, o, &used).n == 2);
    CHECK(has(error_of([&] { read_inputs({dir + "/a.csv", dir + "/x.npy"}, o, &used); }), "looks like npy, but"));
    CHECK(has(error_of([&] { read_inputs({dir + "/x.npy"}, o, &used); }), "give features and labels as a pair"));
    CHECK(has(error_of([&] { read_inputs({dir + "/x.npy", dir + "/y.npy", dir + "/x3.npy", dir + "/y.npy"}, o, &used); }),
              "x3.npy: 3 features per sample, but the inputs before it have 2"));
    CHECK(has(error_of([&] { read_inputs({dir + "/none.csv"}, o, &used); }), "none.csv: cannot open it"));
    o.format = parse_format("npy");
    CHECK(has(error_of([&] { read_inputs({dir + "/a.csv", dir + "/y.npy"}, o, &used); }), "a.csv: not a .npy file"));
    CHECK(has(error_of([] { parse_format("parquet"); }), "--format 'parquet' is unknown"));
}

TEST_CASE("classes: max label + 1 unless given; a label at or above --num-classes is refused", "[ingest]") {
    Table t;
    t.n = 3;
    t.d = 1;
    t.x = {0, 0, 0};
    t.y = {0, 4, 1};
    CHECK(resolve_classes(t, 0, "in.csv") == 5);
    CHECK(resolve_classes(t, 7, "in.csv") == 7);
    CHECK(has(error_of([&] { resolve_classes(t, 3, "in.csv"); }), "in.csv: label 4 (sample 1) is not below --num-classes 3"));
    t.y = {0, 0, 0};
    CHECK(has(error_of([&] { resolve_classes(t, 0, "in.csv"); }), "one class"));
    CHECK(resolve_classes(t, 2, "in.csv") == 2);
    // Labels that are not classes (an id column): the largest int32 overflowed to a negative count;
    // 100 million classes from 3 values was taken, and the trainer then ran out of memory.
    t.y = {0, 2147483647, 1};
    CHECK(has(error_of([&] { resolve_classes(t, 0, "in.csv"); }), "label 2147483647 leaves no class count"));
    t.y = {0, 99999999, 1};
    CHECK(has(error_of([&] { resolve_classes(t, 0, "in.csv"); }),
              "in.csv: the labels run up to 99999999, which makes 100000000 classes, but only 3 distinct values occur"));
    CHECK(resolve_classes(t, 100000000, "in.csv") == 100000000);  // said on purpose
    t.y = {0, 9999, 1};  // a few classes of many seen in a small file: as they are
    CHECK(resolve_classes(t, 0, "in.csv") == 10000);
}

TEST_CASE("shard plan: equal train shards, the last val-fraction as val, one split on request", "[ingest]") {
    std::vector<ShardSpec> p = plan_shards(103, 4, 0.1, "");
    REQUIRE(p.size() == 5);
    long next = 0, lo = 1 << 30, hi = 0;
    for (int s = 0; s < 4; ++s) {
        CHECK(p[s].split == "train");
        CHECK(p[s].index == s);
        CHECK(p[s].of == 4);
        CHECK(p[s].first == next);
        next += p[s].rows;
        lo = std::min(lo, p[s].rows);
        hi = std::max(hi, p[s].rows);
    }
    CHECK(hi - lo <= 1);
    CHECK(next == 93);
    CHECK(p[4].split == "val");
    CHECK(p[4].first == 93);
    CHECK(p[4].rows == 10);
    CHECK(p[4].of == 1);

    CHECK(plan_shards(5, 1, 0.01, "")[1].rows == 1);  // a positive fraction keeps at least one val row
    CHECK(plan_shards(5, 2, 0, "").size() == 2);       // 0: no val shard
    std::vector<ShardSpec> v = plan_shards(10, 3, 0.5, "val");
    REQUIRE(v.size() == 3);
    CHECK((v[0].split == "val" && v[0].of == 3 && v[0].rows == 4 && v[2].first == 7));
    CHECK(plan_shards(10, 3, 0.5, "train").back().split == "train");
    CHECK(has(error_of([] { plan_shards(4, 4, 0.5, ""); }), "2 train samples cannot fill --shards 4"));
    CHECK(has(error_of([] { plan_shards(10, 2, 1.0, ""); }), "--val-fraction 1 is outside [0, 1)"));
    CHECK(has(error_of([] { plan_shards(10, 2, 0.1, "test"); }), "--split 'test' is unknown"));

    long first = 0, rows = 0;
    shard_range(10, 4, 1, &first, &rows);
    CHECK((first == 3 && rows == 3));
    shard_range(10, 4, 3, &first, &rows);
    CHECK((first == 8 && rows == 2));
}

// ---- token files: nanoGPT, llm.c, .npy ----

namespace {

// llm.c's .bin: 256 int32 (magic, version, count, zeros), then the ids in 2 (v1) or 4 (v2) bytes.
std::string llmc_image(int version, const std::vector<uint32_t>& ids, int32_t count = -1) {
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520;
    header[1] = version;
    header[2] = count >= 0 ? count : (int32_t)ids.size();
    std::string out = raw(header);
    for (uint32_t v : ids)
        if (version == 1) out += raw(std::vector<uint16_t>{(uint16_t)v});
        else out += raw(std::vector<uint32_t>{v});
    return out;
}

std::string read_error(const std::string& path, token_files::Format f, long vocab) {
    try {
        token_files::read(path, f, vocab);
    } catch (const UserError& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST_CASE("token files: nanoGPT, llm.c and .npy ids, the format told by the first bytes", "[ingest][tokens]") {
    const std::string dir = temp_dir("tokfiles");
    using token_files::Format;
    const std::vector<uint32_t> ids = {50256, 15496, 11, 995, 0};
    put(dir + "/train.bin", raw(std::vector<uint16_t>(ids.begin(), ids.end())));
    put(dir + "/v1.bin", llmc_image(1, ids));
    put(dir + "/v2.bin", llmc_image(2, {70000, 1, 2}));
    put(dir + "/ids.npy", npy_image("<i8", "(5,)", raw(std::vector<int64_t>(ids.begin(), ids.end()))));
    Format used = Format::automatic;
    CHECK(token_files::read(dir + "/train.bin", Format::automatic, 50257, &used) == ids);
    CHECK(used == Format::nanogpt);
    CHECK(token_files::read(dir + "/v1.bin", Format::automatic, 50257, &used) == ids);
    CHECK(used == Format::llmc);
    CHECK(token_files::read(dir + "/v2.bin", Format::llmc, 128256) == std::vector<uint32_t>{70000, 1, 2});
    CHECK(token_files::read(dir + "/ids.npy", Format::automatic, 50257, &used) == ids);
    CHECK(used == Format::npy);
}

TEST_CASE("token files: one line naming the file and what is wrong", "[ingest][tokens]") {
    const std::string dir = temp_dir("tokbad");
    using token_files::Format;
    auto has = [](const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; };
    put(dir + "/odd.bin", "abc");
    CHECK(has(read_error(dir + "/odd.bin", Format::automatic, 50257), "odd.bin: 3 bytes, an odd count"));
    put(dir + "/big.bin", raw(std::vector<uint16_t>{1, 2, 60000}));
    CHECK(has(read_error(dir + "/big.bin", Format::nanogpt, 50257), "big.bin: token 2 is 60000, not below --vocab-size 50257"));
    put(dir + "/short.bin", llmc_image(1, {1, 2, 3}, 4));
    CHECK(has(read_error(dir + "/short.bin", Format::automatic, 50257), "says 4 tokens of 2 bytes, but 6 bytes follow"));
    put(dir + "/v3.bin", llmc_image(3, {1}));
    CHECK(has(read_error(dir + "/v3.bin", Format::automatic, 50257), "llm.c header version 3 is unknown"));
    CHECK(has(read_error(dir + "/big.bin", Format::llmc, 50257), "not an llm.c token file"));
    put(dir + "/f.npy", npy_image("<f4", "(2,)", raw(std::vector<float>{1, 2})));
    CHECK(has(read_error(dir + "/f.npy", Format::automatic, 50257), "f.npy: dtype float32; token ids are integers"));
    put(dir + "/m.npy", npy_image("<i4", "(1, 2)", raw(std::vector<int32_t>{1, 2})));
    CHECK(has(read_error(dir + "/m.npy", Format::automatic, 50257), "2 dimensions"));
    put(dir + "/neg.npy", npy_image("<i4", "(2,)", raw(std::vector<int32_t>{1, -1})));
    CHECK(has(read_error(dir + "/neg.npy", Format::automatic, 50257), "token 1 is -1, not in [0, --vocab-size 50257)"));
    CHECK(has(read_error(dir + "/none.bin", Format::automatic, 50257), "none.bin: cannot open it"));
    CHECK_THROWS_WITH(token_files::parse_format("bpe"), Catch::Contains("use auto, nanogpt, llmc, npy or hdf5"));
}

TEST_CASE("Tokenizer ids: prompts and samples as ids, the vocabulary size as its table", "[tokens]") {
    const TokenizerPtr p = tokenizer_from("ids", "50257");
    const Tokenizer& t = *p;
    CHECK(t.kind() == TokenizerKind::ids);
    CHECK(std::string(t.name()) == "ids");
    CHECK_FALSE(t.reads_text());
    CHECK_FALSE(t.has_table());  // the shards' vocab_size attribute holds it
    CHECK(t.vocab_size() == 50257);
    CHECK(t.table() == "50257");
    CHECK(t.encode("15496 11\n995") == std::vector<int>{15496, 11, 995});
    CHECK(t.decode({15496, 11}) == " 15496 11");
    CHECK(t.bytes_of(5) == 0);  // no text: no bits per byte
    CHECK_THROWS_WITH(t.encode("15496 hello"), Catch::Contains("'hello' is not a token id in [0, 50257)"));
    CHECK_THROWS_WITH(t.encode("50257"), Catch::Contains("'50257' is not a token id"));
    CHECK_THROWS_WITH(tokenizer_from("ids", "many"), Catch::Contains("needs its vocabulary size"));
    CHECK(t.same_as(*tokenizer_from("ids", "50257")));
    CHECK(t.same_as(*make_ids_tokenizer(50257)));
    CHECK_FALSE(t.same_as(*tokenizer_from("ids", "50304")));
    CHECK_FALSE(t.same_as(*make_byte_tokenizer()));
}
