// The checkpoint directory: one run's lock on it, the checkpoints' names and order, and the newest
// one that verifies (damaged ones skipped or set aside). Not for: the file format (checkpoint.cpp).
#include "dptrain/io/checkpoint.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

namespace dptrain {

static std::string lock_holder(int fd) {
    char buf[256] = {};
    const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    long pid = 0;
    char host[128] = "?";
    double since = 0;
    if (n > 0 && std::sscanf(buf, "%ld %127s %lf", &pid, host, &since) == 3)
        return strfmt("pid %ld on %s, for %.0f s", pid, host, std::difftime(std::time(nullptr), (time_t)since));
    return "a process that has not written its name yet";
}

static int open_lock_file(const std::string& dir, const char* option = "--checkpoint-dir") {
    make_directories(dir, option);
    const std::string path = dir + "/.lock";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        throw UserError(strfmt("%s %s: cannot open %s: %s; choose a writable directory", option, dir.c_str(),
                               path.c_str(), std::strerror(errno)));
    return fd;
}

// "PID HOST UNIX_TIME" into the lock held.
static void sign_lock(int fd, const std::string& path) {
    char host[128] = "?";
    gethostname(host, sizeof host - 1);
    const std::string me = strfmt("%ld %s %ld\n", (long)getpid(), host, (long)std::time(nullptr));
    if (ftruncate(fd, 0) != 0 || pwrite(fd, me.data(), me.size(), 0) != (ssize_t)me.size())
        std::fprintf(stderr, "dptrain: warning: %s: cannot write this run's name into the lock: %s\n", path.c_str(),
                     std::strerror(errno));
}

int relock_checkpoint_dir(const std::string& dir, std::string* holder) {
    const int fd = open_lock_file(dir);
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        sign_lock(fd, dir + "/.lock");
        return fd;
    }
    const int err = errno;
    if (err == EWOULDBLOCK) *holder = lock_holder(fd);
    ::close(fd);
    return err == EWOULDBLOCK ? -2 : -1;
}

int lock_checkpoint_dir(const std::string& dir, double wait_s, bool (*give_up)(), const char* option) {
    const std::string path = dir + "/.lock";
    const int fd = open_lock_file(dir, option);
    const auto t0 = std::chrono::steady_clock::now();
    bool said = false;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        if (err != EWOULDBLOCK && err != EINTR) {
            std::fprintf(stderr, "dptrain: warning: %s %s: no lock (flock: %s): two runs could share it unnoticed\n",
                         option, dir.c_str(), std::strerror(err));
            ::close(fd);
            return -1;
        }
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (give_up && give_up()) {  // the run ends
            const std::string who = lock_holder(fd);
            ::close(fd);
            throw StopRequested(strfmt("%s %s: a stop signal came while this run waited %.0f s for its lock (held by %s)",
                                       option, dir.c_str(), waited, who.c_str()));
        }
        if (waited >= wait_s) {
            const std::string who = lock_holder(fd);
            ::close(fd);
            throw UserError(strfmt("%s %s is in use by another dptrain (%s); waited %.0f s (--lock-wait): let it end or "
                                   "stop it, or give this run another --run-dir",
                                   option, dir.c_str(), who.c_str(), waited));
        }
        if (!said) {
            std::fprintf(stderr, "dptrain: %s %s is in use by another dptrain (%s): waiting up to %.0f s for it to end "
                                 "(--lock-wait)\n", option, dir.c_str(), lock_holder(fd).c_str(), wait_s);
            said = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    sign_lock(fd, path);
    return fd;
}

bool holds_checkpoint_lock(const std::string& dir, int fd) {
    struct stat held {};
    if (::fstat(fd, &held) != 0) return false;
    return file_id(dir + "/.lock") == std::make_pair((uint64_t)held.st_dev, (uint64_t)held.st_ino);
}

void prepare_checkpoint_dir(const std::string& dir) {
    make_directories(dir, "--checkpoint-dir");
    std::string why;
    if (!can_write_in(dir, &why))
        throw UserError(strfmt("--checkpoint-dir %s: cannot write there: %s; choose a writable directory", dir.c_str(),
                               why.c_str()));
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d)) {
            std::string n = e->d_name;
            if (n.rfind(".ckpt-", 0) == 0 && n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0)
                std::remove((dir + "/" + n).c_str());
        }
        closedir(d);
    }
}

// Only checkpoint_path's exact names count: a hand copy "ckpt-10.h5" must neither be resumed from
// as the newest nor make the rotation delete the real ones.
long checkpoint_step(const std::string& path) {
    const size_t slash = path.rfind('/');
    const std::string name = path.substr(slash == std::string::npos ? 0 : slash + 1);
    const size_t digits = name.size() - std::min(name.size(), sizeof "ckpt-.h5" - 1);
    if (digits < 8 || digits > 18 || name.compare(0, 5, "ckpt-") != 0 || name.compare(5 + digits, 3, ".h5") != 0)
        return -1;
    long step = 0;
    for (size_t i = 5; i < 5 + digits; ++i) {
        if (name[i] < '0' || name[i] > '9') return -1;
        step = step * 10 + (name[i] - '0');
    }
    return strfmt("ckpt-%08ld.h5", step) == name ? step : -1;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
    std::vector<std::pair<long, std::string>> found;
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d))
            if (long step = checkpoint_step(e->d_name); step >= 0) found.emplace_back(step, e->d_name);
        closedir(d);
    }
    std::sort(found.rbegin(), found.rend());  // by step: past 99,999,999 a name has 9 digits
    std::vector<std::string> paths;
    for (auto& [step, name] : found) paths.push_back(dir + "/" + name);
    return paths;
}

bool load_latest(const std::string& dir, CheckpointState* out, std::string* path, std::vector<std::string>* damaged) {
    for (const std::string& p : list_checkpoints(dir)) {
        try {
            *out = load_checkpoint(p);
            *path = p;
            return true;
        } catch (const CheckpointFormatError&) {
            throw;  // not damaged: an older one would lose the newer run's work
        } catch (const UserError& e) {
            damaged->push_back(e.what());
        }
    }
    return false;
}

std::string set_aside(const std::string& path, const std::string& why) {
    std::string to = path + "." + why;
    struct stat st;
    for (int n = 2; stat(to.c_str(), &st) == 0; ++n) to = strfmt("%s.%s.%d", path.c_str(), why.c_str(), n);
    if (std::rename(path.c_str(), to.c_str()) != 0)
        throw UserError(strfmt("%s: %s, and cannot be moved aside to %s: %s", path.c_str(), why.c_str(), to.c_str(),
                               std::strerror(errno)));
    return to;
}

CheckpointState load_checkpoint_or_newest(std::string* path, const std::string& option) {
    const std::string by = option.empty() ? "" : option + " ";
    struct stat st;
    if (::stat(path->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        try {
            return load_checkpoint(*path);
        } catch (const UserError& e) {
            throw UserError(by + e.what());
        }
    }
    const std::string sub = *path + "/checkpoints";
    const std::string dir = ::stat(sub.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? sub : *path;
    CheckpointState ck;
    std::vector<std::string> damaged;
    std::string found;
    if (!load_latest(dir, &ck, &found, &damaged)) {
        std::string why;
        for (const std::string& d : damaged) why += (why.empty() ? " (" : "; ") + d;
        throw UserError(strfmt("%s%s: no complete checkpoint in %s%s; train there first or give a ckpt-NNNNNNNN.h5 file",
                               by.c_str(), path->c_str(), dir.c_str(), why.empty() ? "" : (why + ")").c_str()));
    }
    for (const std::string& d : damaged)
        std::fprintf(stderr, "dptrain: skipping checkpoint: %s; using the older %s\n", d.c_str(), found.c_str());
    *path = found;
    return ck;
}

} // namespace dptrain
