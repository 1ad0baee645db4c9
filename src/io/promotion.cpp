// The promotion log (promotion.h).
#include "dptrain/io/promotion.h"

#include "dptrain/core/error.h"
#include "dptrain/core/json.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace dptrain {

namespace {

bool is_dir(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Promotion from_json(const Json& j, const std::string& where) {
    Promotion p;
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer() || !j.contains("file") ||
        !j["file"].is_string())
        throw UserError(where + ": not a promotion record (want action, step, file)");
    p.step = j["step"].get<long>();
    p.file = j["file"].get<std::string>();
    p.time = j.value("time", 0.0);
    p.reason = j.value("reason", std::string());
    p.by = j.value("by", std::string());
    return p;
}

// Truncates the file after its last newline (the log is small: read whole).
void drop_cut_record(int fd) {
    const off_t size = ::lseek(fd, 0, SEEK_END);
    if (size <= 0) return;
    std::string text((size_t)size, '\0');
    if (::pread(fd, &text[0], text.size(), 0) != (ssize_t)text.size() || text.back() == '\n') return;
    const size_t nl = text.rfind('\n');
    if (::ftruncate(fd, nl == std::string::npos ? 0 : (off_t)nl + 1) != 0)
        std::fprintf(stderr, "dptrain: warning: cannot drop a cut record from the promotion log: %s\n", std::strerror(errno));
}

} // namespace

std::string checkpoint_dir_of(const std::string& path) {
    if (is_dir(path + "/checkpoints")) return path + "/checkpoints";
    if (is_dir(path)) return path;
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::vector<Promotion> read_promotions(const std::string& dir, bool* has_log) {
    const std::string path = dir + "/" + kPromotionLog;
    std::ifstream in(path);
    if (has_log) *has_log = (bool)in;
    std::vector<Promotion> active;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        if (line.empty()) continue;
        const bool last = in.peek() == std::char_traits<char>::eof();
        Json j;
        try {
            j = parse_json(line);
        } catch (const JsonError&) {
            if (last) break;  // cut short by its writer
            throw UserError(strfmt("%s:%d: not JSON; mend or remove the line", path.c_str(), n));
        }
        const std::string where = strfmt("%s:%d", path.c_str(), n);
        const std::string action = j.is_object() ? j.value("action", std::string()) : std::string();
        const Promotion p = from_json(j, where);
        if (action == "promote") {
            active.push_back(p);
        } else if (action == "withdraw") {
            auto it = std::find_if(active.rbegin(), active.rend(), [&](const Promotion& a) { return a.step == p.step; });
            if (it != active.rend()) active.erase(std::next(it).base());
        } else {
            throw UserError(where + ": action must be promote or withdraw");
        }
    }
    return active;
}

void open_promotion_log(const std::string& dir) {
    const std::string path = dir + "/" + kPromotionLog;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) throw UserError(strfmt("%s: cannot create it: %s", path.c_str(), std::strerror(errno)));
    ::close(fd);
}

void append_promotion(const std::string& dir, const std::string& action, const Promotion& p) {
    const std::string path = dir + "/" + kPromotionLog;
    Json j = {{"action", action}, {"step", p.step}, {"file", p.file}, {"time", p.time}, {"reason", p.reason},
              {"by", p.by}};
    const std::string line = json_text(j) + "\n";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) throw UserError(strfmt("%s: cannot open for appending: %s", path.c_str(), std::strerror(errno)));
    // One writer at a time, each record one write: readers never see two records interleaved. A
    // record an earlier writer left cut short (a full disk) is dropped first: glued to this one it
    // would make a bad line in the middle, which readers refuse.
    ::flock(fd, LOCK_EX);
    drop_cut_record(fd);
    const ssize_t w = ::write(fd, line.data(), line.size());
    const int err = errno;
    const bool synced = w == (ssize_t)line.size() && ::fsync(fd) == 0;
    ::close(fd);
    if (!synced)
        throw UserError(strfmt("%s: the %s record could not be written: %s", path.c_str(), action.c_str(),
                               std::strerror(w < 0 ? err : errno)));
}

} // namespace dptrain
