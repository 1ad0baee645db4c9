// safetensors: the checked reader and the atomic writer (the format is in safetensors.h).
#include "dptrain/io/safetensors.h"

#include "dptrain/core/bf16.h"
#include "dptrain/core/error.h"
#include "dptrain/core/json.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dptrain {

namespace {

constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit

int itemsize(const std::string& dtype) {
    static const std::map<std::string, int> sizes = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
        {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    auto it = sizes.find(dtype);
    return it == sizes.end() ? 0 : it->second;
}

// IEEE half to float, exactly (every half is a float).
float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    float f;
    if (exp == 0x1F) {
        const uint32_t u = sign | 0x7F800000u | (man << 13);
        std::memcpy(&f, &u, 4);
        return f;
    }
    if (exp == 0) f = std::ldexp((float)man, -24);  // zero and subnormals
    else f = std::ldexp((float)(man | 0x400u), (int)exp - 25);
    return sign ? -f : f;
}

uint64_t get_u64(const Json& v, const std::string& what) {
    if (!v.is_number_unsigned()) throw std::runtime_error(what + " must be a non-negative integer");
    return v.get<uint64_t>();
}

SafeTensor parse_entry(const std::string& name, const Json& e, uint64_t data_size) {
    const std::string at = "tensor '" + name + "'";
    if (!e.is_object()) throw std::runtime_error(at + " is not an object");
    SafeTensor t;
    t.name = name;
    auto dt = e.find("dtype"), sh = e.find("shape"), off = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string() || sh == e.end() || !sh->is_array() || off == e.end() || !off->is_array() ||
        off->size() != 2)
        throw std::runtime_error(at + " needs \"dtype\" (a string), \"shape\" (an array) and \"data_offsets\" "
                                 "([begin, end])");
    t.dtype = dt->get<std::string>();
    const int size = itemsize(t.dtype);
    if (size == 0) throw std::runtime_error(at + " has an unknown dtype '" + t.dtype + "'");
    if (sh->size() > 16) throw std::runtime_error(at + " has more than 16 dimensions");
    uint64_t n = 1;
    for (const Json& d : *sh) {
        const uint64_t v = get_u64(d, at + "'s shape");
        if (v != 0 && n > (UINT64_MAX / 16) / v) throw std::runtime_error(at + "'s shape is too large");
        n *= v;
        t.shape.push_back((int64_t)v);
    }
    t.begin = get_u64((*off)[0], at + "'s data_offsets");
    t.end = get_u64((*off)[1], at + "'s data_offsets");
    if (t.begin > t.end || t.end > data_size)
        throw std::runtime_error(strfmt("%s's data_offsets [%llu, %llu] are outside the %llu bytes of data (a "
                                        "truncated file?)",
                                        at.c_str(), (unsigned long long)t.begin, (unsigned long long)t.end,
                                        (unsigned long long)data_size));
    if (t.end - t.begin != n * (uint64_t)size)
        throw std::runtime_error(strfmt("%s holds %llu bytes, but %s of shape %s needs %llu", at.c_str(),
                                        (unsigned long long)(t.end - t.begin), t.dtype.c_str(), sh->dump().c_str(),
                                        (unsigned long long)(n * size)));
    return t;
}

} // namespace

uint64_t SafeTensor::count() const {
    uint64_t n = 1;
    for (int64_t d : shape) n *= (uint64_t)d;
    return n;
}

Safetensors Safetensors::parse(std::string bytes, const std::string& where) {
    Safetensors s;
    s.where_ = where;
    try {
        if (bytes.size() < 8) throw std::runtime_error("shorter than the 8-byte header length");
        uint64_t n = 0;
        for (int i = 7; i >= 0; --i) n = (n << 8) | (unsigned char)bytes[i];
        if (n > kMaxHeader || n > bytes.size() - 8)
            throw std::runtime_error(strfmt("header length %llu exceeds the file (%zu bytes) or 100 MB; not a "
                                            "safetensors file, or a truncated one",
                                            (unsigned long long)n, bytes.size()));
        Json h;
        try {
            h = parse_json(bytes.substr(8, n));
        } catch (const JsonError& e) {
            throw std::runtime_error(std::string("header is not valid JSON (") + e.what() + ")");
        }
        if (!h.is_object()) throw std::runtime_error("header is not a JSON object");
        s.data_ = 8 + n;
        const uint64_t data_size = bytes.size() - s.data_;
        for (auto it = h.begin(); it != h.end(); ++it) {
            if (it.key() != "__metadata__") {
                s.tensors_.push_back(parse_entry(it.key(), it.value(), data_size));
                continue;
            }
            if (!it.value().is_object()) throw std::runtime_error("__metadata__ is not an object");
            for (auto m = it.value().begin(); m != it.value().end(); ++m) {
                if (!m.value().is_string()) throw std::runtime_error("__metadata__ '" + m.key() + "' is not a string");
                s.metadata_[m.key()] = m.value().get<std::string>();
            }
        }
        std::vector<const SafeTensor*> by_start;
        for (const SafeTensor& t : s.tensors_) by_start.push_back(&t);
        std::sort(by_start.begin(), by_start.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
        for (size_t i = 1; i < by_start.size(); ++i)
            if (by_start[i]->begin < by_start[i - 1]->end)
                throw std::runtime_error("tensors '" + by_start[i - 1]->name + "' and '" + by_start[i]->name +
                                         "' overlap");
    } catch (const std::runtime_error& e) {
        throw UserError(where + ": " + e.what());
    }
    s.bytes_ = std::move(bytes);
    return s;
}

Safetensors Safetensors::read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UserError(strfmt("%s: cannot open: %s", path.c_str(), std::strerror(errno)));
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw UserError(path + ": read failed");
    return parse(std::move(ss).str(), path);
}

const SafeTensor* Safetensors::find(const std::string& name) const {
    for (const SafeTensor& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

void Safetensors::to_float(const SafeTensor& t, float* out) const {
    const unsigned char* p = (const unsigned char*)bytes_.data() + data_ + t.begin;
    const uint64_t n = t.count();
    if (t.dtype == "F32") {
        std::memcpy(out, p, n * 4);
    } else if (t.dtype == "BF16" || t.dtype == "F16") {
        const bool brain = t.dtype == "BF16";
        for (uint64_t i = 0; i < n; ++i) {
            const uint16_t h = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
            out[i] = brain ? bf16_to_float(h) : half_to_float(h);
        }
    } else if (t.dtype == "F64") {
        for (uint64_t i = 0; i < n; ++i) {
            double d;
            std::memcpy(&d, p + 8 * i, 8);
            out[i] = (float)d;
        }
    } else {
        throw UserError(strfmt("%s: tensor '%s' is %s; dptrain reads F32, BF16, F16 and F64 weights", where_.c_str(),
                               t.name.c_str(), t.dtype.c_str()));
    }
}

const char* name_of(TensorDtype d) { return d == TensorDtype::bf16 ? "BF16" : "F32"; }

void write_file_atomically(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) throw UserError(strfmt("%s: cannot write: %s", path.c_str(), std::strerror(errno)));
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    const int err = errno;
    const bool ok = done == text.size() && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw UserError(strfmt("%s: write failed: %s (disk full?)", path.c_str(), std::strerror(ok ? errno : err)));
    }
}

void write_safetensors(const std::string& path, const std::vector<TensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata, TensorDtype dtype) {
    const int size = dtype == TensorDtype::bf16 ? 2 : 4;
    Json h = Json::object();
    if (!metadata.empty()) {
        Json m = Json::object();
        for (const auto& [k, v] : metadata) m[k] = v;
        h["__metadata__"] = m;
    }
    uint64_t at = 0;
    for (const TensorOut& t : tensors) {
        const uint64_t bytes = (uint64_t)t.data.size() * size;
        h[t.name] = Json{{"dtype", name_of(dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
        at += bytes;
    }
    std::string header = json_text(h);
    header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = (char)((uint64_t)header.size() >> (8 * i));
    out.reserve(8 + header.size() + at);
    out += header;
    for (const TensorOut& t : tensors) {
        if (dtype == TensorDtype::f32) {
            out.append((const char*)t.data.data(), t.data.size() * 4);
            continue;
        }
        for (float f : t.data) {
            const bf16 b = float_to_bf16(f);
            out.push_back((char)(b & 0xFF));
            out.push_back((char)(b >> 8));
        }
    }
    write_file_atomically(path, out);
}

} // namespace dptrain
