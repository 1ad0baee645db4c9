// .npy reader: magic and version, the header dict (a Python literal, parsed by a small lexer
// that accepts what np.save writes), and element conversion. Not for: choosing which arrays are
// features and labels, or their shapes (ingest.cpp).
#include "dptrain/tools/npy.h"

#include "dptrain/core/error.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <type_traits>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.cpp reads little-endian arrays by copying bytes; it needs a little-endian host"
#endif

namespace dptrain::npy {

namespace {

const char* const kResave = "save it again with np.save";

// A Python dict literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (100, 32), }
// padded with spaces: only strings, True/False, tuples of ints and (structured dtypes) lists.
class Lexer {
  public:
    Lexer(const std::string& s, const std::string& where) : s_(s), where_(where) {}
    void ws() {
        while (p_ < s_.size() && std::strchr(" \t\r\n", s_[p_])) ++p_;
    }
    bool eat(char c) {
        ws();
        if (p_ < s_.size() && s_[p_] == c) return ++p_, true;
        return false;
    }
    void expect(char c) {
        if (!eat(c)) fail(strfmt("expected '%c'", c));
    }
    bool at_quote() {
        ws();
        return p_ < s_.size() && (s_[p_] == '\'' || s_[p_] == '"');
    }
    std::string str() {
        if (!at_quote()) fail("expected a quoted string");
        char q = s_[p_++];
        size_t end = s_.find(q, p_);
        if (end == std::string::npos) fail("unterminated string");
        std::string out = s_.substr(p_, end - p_);
        p_ = end + 1;
        return out;
    }
    std::string word() {
        ws();
        size_t b = p_;
        while (p_ < s_.size() && std::isalnum((unsigned char)s_[p_])) ++p_;
        return s_.substr(b, p_ - b);
    }
    uint64_t integer() {
        std::string w = word();
        if (!w.empty() && (w.back() == 'L' || w.back() == 'l')) w.pop_back();  // Python 2's 3L
        if (w.empty() || w.find_first_not_of("0123456789") != std::string::npos) fail("expected a dimension");
        errno = 0;
        unsigned long long v = std::strtoull(w.c_str(), nullptr, 10);
        if (errno) fail("dimension too large");
        return v;
    }
    // Skips a bracketed value (a structured dtype's list), nesting included.
    void skip_brackets() {
        int depth = 0;
        do {
            if (p_ >= s_.size()) fail("unbalanced brackets");
            char c = s_[p_++];
            if (c == '[' || c == '(') ++depth;
            if (c == ']' || c == ')') --depth;
        } while (depth > 0);
    }
    [[noreturn]] void fail(const std::string& what) const {
        // The header ends with '\n' and may be garbage: quote a trimmed start of it.
        std::string shown = s_.substr(0, 80);
        while (!shown.empty() && std::isspace((unsigned char)shown.back())) shown.pop_back();
        throw UserError(strfmt("%s: cannot read the .npy header (%s at character %zu of \"%s%s\"); %s", where_.c_str(),
                               what.c_str(), p_, shown.c_str(), s_.size() > 80 ? "..." : "", kResave));
    }

  private:
    const std::string& s_;
    std::string where_;
    size_t p_ = 0;
};

float half_to_float(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float v;
    if (exp == 0) v = std::ldexp((float)mant, -24);  // zero and subnormals
    else if (exp == 31) v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    else v = std::ldexp((float)(mant | 0x400), exp - 25);
    return sign ? -v : v;
}

template <typename T>
T load(const char* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// f(value) per element, read as its own type.
template <typename F>
void each(const Array& a, F&& f) {
    const char* p = a.data();
    uint64_t n = a.count();
    int s = a.itemsize;
    for (uint64_t i = 0; i < n; ++i, p += s) {
        switch (a.kind) {
        case 'f':
            if (s == 2) f(half_to_float(load<uint16_t>(p)));
            else if (s == 4) f(load<float>(p));
            else f(load<double>(p));
            break;
        case 'i':
            if (s == 1) f(load<int8_t>(p));
            else if (s == 2) f(load<int16_t>(p));
            else if (s == 4) f(load<int32_t>(p));
            else f(load<int64_t>(p));
            break;
        default:  // 'u' and 'b'
            if (s == 1) f(load<uint8_t>(p));
            else if (s == 2) f(load<uint16_t>(p));
            else if (s == 4) f(load<uint32_t>(p));
            else f(load<uint64_t>(p));
            break;
        }
    }
}

bool plain_number(char kind, int size) {
    if (kind == 'f') return size == 2 || size == 4 || size == 8;
    if (kind == 'i' || kind == 'u') return size == 1 || size == 2 || size == 4 || size == 8;
    return kind == 'b' && size == 1;
}

// The header dict's text; *offset becomes where the array's data starts.
std::string header_text(const std::string& bytes, const std::string& where, size_t* offset) {
    if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) {
        std::string size = bytes.size() < 10 ? strfmt(", and is only %zu bytes", bytes.size()) : "";
        throw UserError(strfmt("%s: not a .npy file (it does not start with \\x93NUMPY%s); %s", where.c_str(),
                               size.c_str(), kResave));
    }
    int major = (unsigned char)bytes[6], minor = (unsigned char)bytes[7];
    if (major < 1 || major > 3 || minor != 0)
        throw UserError(strfmt("%s: .npy version %d.%d is not supported (1.0, 2.0 and 3.0 are); %s", where.c_str(), major,
                               minor, kResave));
    // Version 1.0 stores the header length in 2 bytes; 2.0 and 3.0 (3.0: UTF-8 header) in 4.
    size_t len_bytes = major == 1 ? 2 : 4, start = 8 + len_bytes;
    if (bytes.size() < start) throw UserError(strfmt("%s: truncated inside the .npy header; %s", where.c_str(), kResave));
    size_t hlen = 0;
    for (size_t i = 0; i < len_bytes; ++i) hlen |= (size_t)(unsigned char)bytes[8 + i] << (8 * i);
    if (bytes.size() - start < hlen)
        throw UserError(strfmt("%s: truncated: the .npy header says %zu bytes but only %zu follow; %s", where.c_str(), hlen,
                               bytes.size() - start, kResave));
    *offset = start + hlen;
    return bytes.substr(start, hlen);
}

struct HeaderFlags {
    bool fortran = false, structured = false;
};

// 'shape': a tuple of dimensions, "()" for a scalar.
void read_shape(Lexer& lx, std::vector<uint64_t>* shape) {
    lx.expect('(');
    while (!lx.eat(')')) {
        shape->push_back(lx.integer());
        if (!lx.eat(',')) {
            lx.expect(')');
            break;
        }
    }
}

// One key's value into a (descr, shape) or *flags; unknown keys are refused.
void read_entry(Lexer& lx, const std::string& key, Array* a, HeaderFlags* flags) {
    if (key == "descr") {
        if (lx.at_quote()) {
            a->descr = lx.str();
        } else {
            lx.skip_brackets();
            flags->structured = true;
        }
    } else if (key == "fortran_order") {
        std::string w = lx.word();
        if (w != "True" && w != "False") lx.fail("fortran_order is not True or False");
        flags->fortran = w == "True";
    } else if (key == "shape") {
        read_shape(lx, &a->shape);
    } else {
        lx.fail("unknown key '" + key + "'");
    }
}

// Each key once or more; all three needed.
HeaderFlags read_dict(Lexer& lx, Array* a) {
    HeaderFlags flags;
    bool have_descr = false, have_order = false, have_shape = false;
    lx.expect('{');
    while (!lx.eat('}')) {
        std::string key = lx.str();
        lx.expect(':');
        read_entry(lx, key, a, &flags);
        have_descr |= key == "descr";
        have_order |= key == "fortran_order";
        have_shape |= key == "shape";
        if (!lx.eat(',')) {
            lx.expect('}');
            break;
        }
    }
    if (!have_descr || !have_order || !have_shape) lx.fail("'descr', 'fortran_order' or 'shape' missing");
    return flags;
}

// From a->descr ("<f4", "|u1": byte order, kind, size); refuses what is not readable by copying
// little-endian bytes.
void check_dtype(Array* a, const HeaderFlags& flags) {
    const char* where = a->where.c_str();
    if (flags.structured)
        throw UserError(strfmt("%s: structured dtype (named fields) is not supported; save each field as its own plain "
                               "array (np.save(f, arr['name']))",
                               where));
    const std::string& d = a->descr;
    char order = !d.empty() && std::strchr("<>|=", d[0]) ? d[0] : '=';
    size_t k = std::strchr("<>|=", d.empty() ? 'x' : d[0]) ? 1 : 0;
    a->kind = k < d.size() ? d[k] : 0;
    a->itemsize = std::atoi(d.c_str() + std::min(k + 1, d.size()));
    if (!plain_number(a->kind, a->itemsize)) {
        std::string hint = a->kind == 'c' ? "keep the real part: np.save(f, arr.real.astype(np.float32))"
                           : a->kind == 'f' ? "convert it: np.save(f, arr.astype(np.float64))"
                                            : "convert it to numbers first (arr.astype(np.float32) for features, "
                                              "arr.astype(np.int64) for labels)";
        throw UserError(strfmt("%s: dtype %s ('%s') is not supported (float16/32/64, int, uint and bool are); %s", where,
                               dtype_name(*a).c_str(), d.c_str(), hint.c_str()));
    }
    if (order == '>' && a->itemsize > 1)
        throw UserError(strfmt("%s: the array is big-endian ('%s'); save it little-endian: "
                               "np.save(f, arr.astype(arr.dtype.newbyteorder('<')))",
                               where, d.c_str()));
    // One dimension is laid out the same in either order; beyond that the rows would be columns.
    if (flags.fortran && a->shape.size() > 1)
        throw UserError(strfmt("%s: fortran_order is True (column-major); save it in C order: "
                               "np.save(f, np.ascontiguousarray(arr))",
                               where));
}

// Refuses a shape whose elements overflow a count or outrun the `bytes` after the header.
void check_size(const Array& a, const Lexer& lx, const std::string& bytes) {
    uint64_t n = 1;
    for (uint64_t dim : a.shape) {
        if (dim != 0 && n > std::numeric_limits<uint64_t>::max() / dim) lx.fail("shape too large");
        n *= dim;
    }
    uint64_t have = bytes.size() - a.offset;
    if (n > have / (uint64_t)a.itemsize)
        throw UserError(strfmt("%s: truncated: the shape needs %llu elements of %d bytes but only %llu bytes follow the "
                               "header; %s",
                               a.where.c_str(), (unsigned long long)n, a.itemsize, (unsigned long long)have, kResave));
}

} // namespace

uint64_t Array::count() const {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    return n;
}

std::string dtype_name(const Array& a) {
    int bits = a.itemsize * 8;
    switch (a.kind) {
    case 'f': return strfmt("float%d", bits);
    case 'i': return strfmt("int%d", bits);
    case 'u': return strfmt("uint%d", bits);
    case 'c': return strfmt("complex%d", bits);
    case 'b': return "bool";
    case 'U': return "str";
    case 'S': return "bytes";
    case 'O': return "object";
    case 'M': return "datetime64";
    case 'm': return "timedelta64";
    case 'V': return "void (structured)";
    }
    return "unknown";
}

Array parse(std::string bytes, const std::string& where) {
    Array a;
    a.where = where;
    const std::string header = header_text(bytes, where, &a.offset);
    Lexer lx(header, where);
    const HeaderFlags flags = read_dict(lx, &a);
    check_dtype(&a, flags);
    check_size(a, lx, bytes);
    a.bytes = std::move(bytes);
    return a;
}

Array read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UserError(strfmt("%s: cannot open it: %s; check the --input path", path.c_str(), std::strerror(errno)));
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw UserError(strfmt("%s: read failed: %s", path.c_str(), std::strerror(errno)));
    return parse(std::move(bytes), path);
}

std::vector<float> to_float32(const Array& a) {
    std::vector<float> out;
    out.reserve(a.count());
    each(a, [&](auto v) { out.push_back((float)v); });
    return out;
}

std::vector<int64_t> to_int64(const Array& a) {
    std::vector<int64_t> out;
    out.reserve(a.count());
    each(a, [&](auto v) {
        using T = decltype(v);
        if constexpr (std::is_same_v<T, uint64_t>) {
            // Clamped, the value would be reported as 2^63-1: name the one the file holds.
            if (v > (uint64_t)std::numeric_limits<int64_t>::max())
                throw UserError(strfmt("%s: element %zu is %llu, above any id or label (2^63-1)", a.where.c_str(),
                                       out.size(), (unsigned long long)v));
            out.push_back((int64_t)v);
        } else if constexpr (std::is_floating_point_v<T>)
            throw std::invalid_argument("npy::to_int64: " + a.where + " is not an integer array");
        else
            out.push_back((int64_t)v);
    });
    return out;
}

std::vector<uint32_t> to_ids(const Array& a, long limit,
                             const std::function<void(size_t, const std::string&)>& bad) {
    std::vector<uint32_t> ids(a.count());
    size_t i = 0;
    each(a, [&](auto v) {
        using T = decltype(v);
        if constexpr (std::is_floating_point_v<T>) {
            throw std::invalid_argument("npy::to_ids: " + a.where + " is not an integer array");
        } else {
            bool in = (unsigned long long)v < (unsigned long long)limit;
            if constexpr (std::is_signed_v<T>) in = in && v >= 0;
            if (!in) bad(i, std::to_string(v));
            ids[i++] = (uint32_t)v;
        }
    });
    return ids;
}

} // namespace dptrain::npy
