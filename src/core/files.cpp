// make_directories: std::filesystem::create_directories, its error turned into one line.
#include "dptrain/core/files.h"

#include "dptrain/core/error.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <system_error>

namespace dptrain {

void make_directories(const std::string& dir, const std::string& what) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!ec && !fs::is_directory(dir, ec) && !ec) ec = std::make_error_code(std::errc::not_a_directory);
    if (!ec) return;
    if (what.empty())
        throw UserError(strfmt("%s: cannot create the directory: %s", dir.c_str(), ec.message().c_str()));
    throw UserError(strfmt("%s %s: cannot create the directory: %s", what.c_str(), dir.c_str(), ec.message().c_str()));
}

double free_bytes(const std::string& dir) {
    struct statvfs v;
    return statvfs(dir.c_str(), &v) == 0 ? (double)v.f_bavail * (double)v.f_frsize : -1.0;
}

std::pair<uint64_t, uint64_t> file_id(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return {0, 0};
    return {(uint64_t)st.st_dev, (uint64_t)st.st_ino};
}

bool can_write_in(const std::string& dir, std::string* why) {
    const std::string probe = strfmt("%s/.dptrain-write-test-%d", dir.c_str(), (int)getpid());
    FILE* f = std::fopen(probe.c_str(), "w");
    if (!f) {
        *why = std::strerror(errno);
        return false;
    }
    const bool written = std::fputs("ok", f) >= 0;
    const bool closed = std::fclose(f) == 0;  // a full disk may say so only here
    const int err = errno;
    std::remove(probe.c_str());
    if (written && closed) return true;
    *why = std::strerror(err);
    return false;
}

static bool same_file(const std::string& a, const std::string& b) {
    struct stat sa, sb;
    return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

std::string runnable(const std::string& program) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (ec) return program;
    const fs::path file = self.parent_path() / program;
    if (!fs::exists(file, ec)) return program;
    std::istringstream path(std::getenv("PATH") ? std::getenv("PATH") : "");
    for (std::string dir; std::getline(path, dir, ':');)
        if (!dir.empty() && fs::exists(fs::path(dir) / program, ec))
            return same_file((fs::path(dir) / program).string(), file.string()) ? program : file.string();
    const fs::path rel = file.lexically_relative(fs::current_path(ec));
    return !ec && !rel.empty() && *rel.begin() != ".." ? rel.string() : file.string();
}

} // namespace dptrain
