// TensorBoard's event files: protobuf fields by hand, TFRecord framing, CRC-32C by table.
// Not for: what is recorded (the reporter).
#include "dptrain/io/tensorboard.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

namespace dptrain {

namespace {

// Reflected, polynomial 0x82F63B78.
struct Crc32cTable {
    uint32_t t[256];
    Crc32cTable() {
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            t[i] = c;
        }
    }
};

// Protocol-buffer wire format: a field's key is (number << 3) | wire type.
void varint(std::string& out, uint64_t v) {
    while (v >= 0x80) {
        out += (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    out += (char)v;
}
void key(std::string& out, int field, int wire) { varint(out, ((uint64_t)field << 3) | (uint64_t)wire); }
template <typename T>
void fixed(std::string& out, T v) {  // little-endian, as the wire format and x86 are
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof b);
    out.append(b, sizeof b);
}
void bytes_field(std::string& out, int field, const std::string& v) {
    key(out, field, 2);
    varint(out, v.size());
    out += v;
}

// Event: wall_time (1, double), step (2, int64), then one of file_version (3, string),
// summary (5, Summary) or session_log (6, SessionLog).
std::string event_head(double wall_time, long step) {
    std::string e;
    key(e, 1, 1);
    fixed(e, wall_time);
    if (step != 0) {  // proto3 leaves a zero out
        key(e, 2, 0);
        varint(e, (uint64_t)step);
    }
    return e;
}

double wall_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

} // namespace

uint32_t crc32c(const void* data, size_t n) {
    static const Crc32cTable table;
    const unsigned char* p = static_cast<const unsigned char*>(data);
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) c = table.t[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
    const uint32_t c = crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string tb_file_version_event(double wall_time) {
    std::string e = event_head(wall_time, 0);
    bytes_field(e, 3, "brain.Event:2");
    return e;
}

// Summary: repeated Value (1); Value: tag (1, string), simple_value (2, float).
std::string tb_scalars_event(double wall_time, long step, const std::vector<std::pair<std::string, float>>& values) {
    std::string summary;
    for (const auto& [tag, v] : values) {
        std::string value;
        bytes_field(value, 1, tag);
        key(value, 2, 5);
        fixed(value, v);
        bytes_field(summary, 1, value);
    }
    std::string e = event_head(wall_time, step);
    bytes_field(e, 5, summary);
    return e;
}

// SessionLog: status (1, enum; START = 1).
std::string tb_session_start_event(double wall_time, long step) {
    std::string log;
    key(log, 1, 0);
    varint(log, 1);
    std::string e = event_head(wall_time, step);
    bytes_field(e, 7, log);  // session_log is 7; 6 is the deprecated log_message
    return e;
}

std::string tfrecord(const std::string& data) {
    std::string r;
    fixed(r, (uint64_t)data.size());
    fixed(r, masked_crc32c(r.data(), 8));
    r += data;
    fixed(r, masked_crc32c(data.data(), data.size()));
    return r;
}

TensorBoardWriter::~TensorBoardWriter() {
    if (f_) std::fclose(f_);
}

void TensorBoardWriter::open(const std::string& dir, const std::string& host, long start_step) {
    make_directories(dir, "--run-dir");
    const double now = wall_now();
    // A run in the same second (or with a clock behind) takes a later one, to sort after the last.
    std::string newest;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.rfind("events.out.tfevents.", 0) == 0 && name > newest) newest = name;
    }
    long long secs = (long long)now;
    auto name_of = [&](long long t) {
        return strfmt("events.out.tfevents.%010lld.%s.%d", t, host.c_str(), (int)::getpid());
    };
    while (!newest.empty() && name_of(secs) <= newest) ++secs;
    path_ = dir + "/" + name_of(secs);
    f_ = std::fopen(path_.c_str(), "wbx");  // never over another file
    if (!f_) throw UserError(strfmt("--tensorboard: cannot write %s: %s", path_.c_str(), std::strerror(errno)));
    put(tb_file_version_event(now));
    put(tb_session_start_event(now, start_step + 1));
}

void TensorBoardWriter::scalars(long step, const std::vector<std::pair<std::string, float>>& values) {
    if (f_) put(tb_scalars_event(wall_now(), step, values));
}

// A failed write (a full disk) costs the charts, not the run: one warning, then no events.
void TensorBoardWriter::put(const std::string& event) {
    const std::string r = tfrecord(event);
    if (std::fwrite(r.data(), 1, r.size(), f_) == r.size() && std::fflush(f_) == 0) return;
    std::fprintf(stderr, "dptrain: warning: --tensorboard: write to %s failed (%s); no more TensorBoard events this run\n",
                 path_.c_str(), std::strerror(errno));
    std::fclose(f_);
    f_ = nullptr;
}

} // namespace dptrain
