// Staging a dataset to node-local storage: list, compare, copy (temporary name, flush, rename),
// verify sizes, and `dptrain stage`.
// Not for: SHA-256 and SHA256SUMS (stage_sums.cpp), reading the shards (shards.cpp).
#include "dptrain/data/stage.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/data/stage_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

namespace dptrain {

using stage_files::Entry;
using stage_files::list_files;
using stage_files::parallel_for;
using stage_files::write_text;

// ---- Listing, copying, checking ----

namespace {

bool is_stage_file(const char* name) { return std::strncmp(name, ".stage-", 7) == 0; }

void list_into(const std::string& root, const std::string& rel, std::vector<Entry>& out) {
    std::string dir = rel.empty() ? root : root + "/" + rel;
    DIR* d = opendir(dir.c_str());
    if (!d) throw UserError(strfmt("%s: cannot list it: %s", dir.c_str(), std::strerror(errno)));
    while (dirent* e = readdir(d)) {
        if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..") || is_stage_file(e->d_name)) continue;
        std::string r = rel.empty() ? e->d_name : rel + "/" + e->d_name;
        struct stat st;
        if (stat((root + "/" + r).c_str(), &st) != 0) continue;  // vanished while listing
        if (S_ISDIR(st.st_mode)) list_into(root, r, out);
        else if (S_ISREG(st.st_mode))
            out.push_back({r, (long long)st.st_size, (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec});
    }
    closedir(d);
}

// An interrupted copy's temporary files (the caller holds the lock: none is in use).
void remove_stale_temporaries(const std::string& dir) {
    DIR* d = opendir(dir.c_str());
    if (!d) return;
    std::vector<std::string> subdirs;
    while (dirent* e = readdir(d)) {
        if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
        std::string path = dir + "/" + e->d_name;
        struct stat st;
        if (lstat(path.c_str(), &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) subdirs.push_back(path);
        else if (std::strncmp(e->d_name, ".stage-tmp-", 11) == 0) ::unlink(path.c_str());
    }
    closedir(d);
    for (const std::string& sd : subdirs) remove_stale_temporaries(sd);
}

std::string manifest_of(const std::vector<Entry>& files) {
    std::string m;
    for (const Entry& e : files) m += strfmt("%s\t%lld\t%lld\n", e.path.c_str(), e.size, e.mtime_ns);
    return m;
}

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void make_dirs(const std::string& path) { make_directories(path); }

std::string human_bytes(double b) {
    return b >= 1073741824.0 ? strfmt("%.2f GiB", b / 1073741824.0) : strfmt("%.1f MiB", b / 1048576.0);
}

// Through DIR/.stage-tmp-NAME: written, flushed, given the source's mtime, renamed over dst.
void copy_file(const std::string& src, const std::string& dst, std::vector<char>& buf,
               const std::function<void()>& alive) {
    size_t slash = dst.rfind('/');
    std::string tmp = dst.substr(0, slash + 1) + ".stage-tmp-" + dst.substr(slash + 1);
    int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) throw UserError(strfmt("%s: cannot open it: %s", src.c_str(), std::strerror(errno)));
    int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        int e = errno;
        ::close(in);
        throw UserError(strfmt("%s: cannot create it: %s", tmp.c_str(), std::strerror(e)));
    }
    posix_fadvise(in, 0, 0, POSIX_FADV_SEQUENTIAL);
    // Closes only what is still open: another copy thread may already own a number closed here.
    auto fail = [&](const std::string& what) {
        int e = errno;
        if (in >= 0) ::close(in);
        if (out >= 0) ::close(out);
        ::unlink(tmp.c_str());
        throw UserError(strfmt("%s: %s: %s", what.c_str(), dst.c_str(), std::strerror(e)));
    };
    for (;;) {
        ssize_t got = ::read(in, buf.data(), buf.size());
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) fail("reading " + src + " for");
        if (got == 0) break;
        for (ssize_t put = 0; put < got;) {
            ssize_t w = ::write(out, buf.data() + put, (size_t)(got - put));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) fail("writing (disk full?)");
            put += w;
        }
        if (alive) alive();
    }
    struct stat st;
    if (fstat(in, &st) != 0) fail("stat of the source of");
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    if (fdatasync(out) != 0 || futimens(out, times) != 0) fail("flushing");
    ::close(in);
    in = -1;
    int closed = ::close(out);
    out = -1;
    if (closed != 0) fail("closing");
    if (std::rename(tmp.c_str(), dst.c_str()) != 0) fail("renaming the copy to");
}

// An exclusive lock on DEST/.stage-lock while this object lives. While another stager holds it,
// alive() is called every 0.1 s: that stager's own watchdog watches its copy.
struct DirLock {
    int fd = -1;
    DirLock(const std::string& dir, const std::function<void()>& alive) {
        std::string path = dir + "/.stage-lock";
        fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) throw UserError(strfmt("%s: cannot create the lock file: %s", path.c_str(), std::strerror(errno)));
        int rc;
        while ((rc = flock(fd, LOCK_EX | LOCK_NB)) != 0 && (errno == EINTR || errno == EWOULDBLOCK)) {
            if (errno == EWOULDBLOCK) {
                if (alive) alive();
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
        }
        if (rc != 0) {
            int e = errno;
            ::close(fd);
            throw UserError(strfmt("%s: cannot lock it (%s): two stagers could overwrite each other; stage to a "
                                   "filesystem with file locks (node-local storage has them)",
                                   path.c_str(), std::strerror(e)));
        }
    }
    ~DirLock() { ::close(fd); }
};

} // namespace

// ---- What staging and SHA256SUMS share (stage_files.h) ----

namespace stage_files {

std::vector<Entry> list_files(const std::string& root) {
    std::vector<Entry> out;
    list_into(root, "", out);
    std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.path < b.path; });
    return out;
}

void write_text(const std::string& path, const std::string& text) {
    std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f || std::fputs(text.c_str(), f) < 0 || std::fflush(f) != 0 || fsync(fileno(f)) != 0 || std::fclose(f) != 0 ||
        std::rename(tmp.c_str(), path.c_str()) != 0)
        throw UserError(strfmt("%s: cannot write it: %s", path.c_str(), std::strerror(errno)));
}

void parallel_for(long n, int streams, const std::function<void(long, std::vector<char>&)>& job, bool (*give_up)()) {
    std::atomic<long> next{0};
    std::mutex mu;
    std::exception_ptr err;
    auto worker = [&] {
        std::vector<char> buf(4 << 20);
        for (long i; (i = next++) < n;) {
            {
                std::lock_guard<std::mutex> g(mu);
                if (err) return;
            }
            try {
                if (give_up && give_up())
                    throw StopRequested(strfmt("a stop signal came: stopped after %ld of %ld files (a later run goes on "
                                           "from there)",
                                           i, n));
                job(i, buf);
            } catch (...) {
                std::lock_guard<std::mutex> g(mu);
                if (!err) err = std::current_exception();
            }
        }
    };
    std::vector<std::thread> threads;
    for (int t = 1; t < std::min<long>(streams, n); ++t) threads.emplace_back(worker);
    worker();
    for (auto& t : threads) t.join();
    if (err) std::rethrow_exception(err);
}

} // namespace stage_files

std::string StageResult::summary() const {
    double t = std::max(seconds, 1e-3);
    return strfmt("copied %ld of %ld files, %s in %.1f s: %.0f MB/s%s", copied_files, files, human_bytes(copied_bytes).c_str(),
                  seconds, copied_bytes / t / 1e6, sums_checked ? ", SHA256SUMS verified" : "");
}

namespace {

[[noreturn]] void refuse_foreign(const std::string& dest) {
    throw UserError(strfmt("%s holds files that staging did not put there (no .stage-manifest); staging removes files "
                           "not in the source, so give it an empty or dedicated directory",
                           dest.c_str()));
}

// Manifest, completion mark and every file's size; refuses a destination with files staging did
// not put there.
bool copy_is_complete(const std::string& dest, const std::vector<Entry>& local, const std::vector<Entry>& source,
                      const std::string& manifest) {
    struct stat st;
    if (!local.empty() && stat((dest + "/.stage-manifest").c_str(), &st) != 0) refuse_foreign(dest);
    std::map<std::string, long long> have;
    for (const Entry& e : local) have[e.path] = e.size;
    bool sizes_match = local.size() == source.size();
    for (const Entry& e : source) sizes_match = sizes_match && have.count(e.path) && have[e.path] == e.size;
    return sizes_match && stat((dest + "/.stage-complete").c_str(), &st) == 0 &&
           read_text(dest + "/.stage-manifest") == manifest;
}

// Files missing, or of another size or mtime (a copy carries its source's mtime, so another mtime
// means a regenerated file even at the same size). Files gone from the source go. Refuses when
// dest lacks the space.
std::vector<const Entry*> plan_copy(const std::string& src, const std::string& dest, const std::vector<Entry>& source,
                                    const std::vector<Entry>& local, StageResult& r) {
    std::map<std::string, const Entry*> have;
    for (const Entry& e : local) have[e.path] = &e;
    std::vector<const Entry*> pending;
    std::map<std::string, bool> wanted;
    double replaced = 0;  // bytes that pending files overwrite
    for (const Entry& e : source) {
        wanted[e.path] = true;
        auto it = have.find(e.path);
        if (it != have.end() && it->second->size == e.size && it->second->mtime_ns == e.mtime_ns) continue;
        pending.push_back(&e);
        r.copied_bytes += (double)e.size;
        if (it != have.end()) replaced += (double)it->second->size;
    }
    for (const Entry& e : local)
        if (!wanted.count(e.path)) ::unlink((dest + "/" + e.path).c_str());
    r.copied_files = (long)pending.size();
    if (const double avail = free_bytes(dest); avail >= 0) {
        const double need = r.copied_bytes - replaced;
        if (need > avail)
            throw UserError(strfmt("%s has %s free; %s needs %s more: free space there or choose another --stage-dir",
                                   dest.c_str(), human_bytes(avail).c_str(), src.c_str(), human_bytes(need).c_str()));
    }
    return pending;
}

// Every source file is in dest with its size, and nothing else.
void verify_copy(const std::string& src, const std::string& dest, const std::vector<Entry>& source) {
    std::vector<Entry> got = list_files(dest);
    bool same = got.size() == source.size();
    for (size_t i = 0; same && i < got.size(); ++i) same = got[i].path == source[i].path && got[i].size == source[i].size;
    if (!same)
        throw UserError(strfmt("the copy in %s does not match %s (names or sizes differ; the source changed while "
                               "copying?); run the staging again",
                               dest.c_str(), src.c_str()));
}

} // namespace

StageResult stage_directory(const std::string& src_in, const std::string& dest_in, int streams, bool check,
                            const std::function<void(const std::string&)>& say, bool (*give_up)(),
                            const std::function<void()>& alive) {
    // Watched from here: a hanging source filesystem usually hangs at the first stat or open.
    if (alive) alive();
    std::string src = src_in, dest = dest_in;
    while (src.size() > 1 && src.back() == '/') src.pop_back();
    while (dest.size() > 1 && dest.back() == '/') dest.pop_back();
    struct stat st;
    if (stat(src.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw UserError(strfmt("%s: no such directory; give the dataset directory to stage", src.c_str()));
    make_dirs(dest);
    struct stat dst;
    if (stat(dest.c_str(), &dst) == 0 && dst.st_dev == st.st_dev && dst.st_ino == st.st_ino)
        throw UserError(strfmt("%s: staging would copy the directory onto itself; give a --stage-dir on node-local "
                               "storage, apart from --data",
                               dest.c_str()));
    // A directory of other files is refused before the lock file is made in it (and again under
    // the lock by copy_is_complete).
    if (!list_files(dest).empty() && stat((dest + "/.stage-lock").c_str(), &dst) != 0 &&
        stat((dest + "/.stage-manifest").c_str(), &dst) != 0)
        refuse_foreign(dest);
    DirLock lock(dest, alive);
    remove_stale_temporaries(dest);
    StageResult r;
    r.dest = dest;

    std::vector<Entry> source = list_files(src);
    if (source.empty()) throw UserError(strfmt("%s holds no files; nothing to stage", src.c_str()));
    const std::string manifest = manifest_of(source);
    r.files = (long)source.size();
    for (const Entry& e : source) r.bytes += (double)e.size;

    const std::vector<Entry> local = list_files(dest);
    if (copy_is_complete(dest, local, source, manifest)) {
        r.reused = true;
        say(strfmt("reusing the copy in %s of %s: %ld files, %s, names and sizes match", dest.c_str(), src.c_str(), r.files,
                   human_bytes(r.bytes).c_str()));
        return r;
    }
    ::unlink((dest + "/.stage-complete").c_str());
    // Marked as staging's before copying, so the next run may complete an interrupted copy.
    write_text(dest + "/.stage-manifest", manifest);
    const std::vector<const Entry*> pending = plan_copy(src, dest, source, local, r);
    say(strfmt("copying %ld of %ld files (%s of %s) from %s to %s, %d streams", r.copied_files, r.files,
               human_bytes(r.copied_bytes).c_str(), human_bytes(r.bytes).c_str(), src.c_str(), dest.c_str(), streams));
    auto t0 = std::chrono::steady_clock::now();
    parallel_for((long)pending.size(), streams, [&](long i, std::vector<char>& buf) {
        const std::string& rel = pending[i]->path;
        size_t slash = rel.rfind('/');
        if (slash != std::string::npos) make_dirs(dest + "/" + rel.substr(0, slash));
        copy_file(src + "/" + rel, dest + "/" + rel, buf, alive);
    }, give_up);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    verify_copy(src, dest, source);
    if (check && std::any_of(source.begin(), source.end(), [](const Entry& e) { return e.path == "SHA256SUMS"; })) {
        check_sums(dest, streams, true, 0, 1, give_up, alive);
        r.sums_checked = true;
    }
    write_text(dest + "/.stage-manifest", manifest);
    write_text(dest + "/.stage-complete", "");
    return r;
}

int run_stage_command(int argc, char** argv) {
    const char* usage =
        "usage: dptrain stage SRC DEST [--streams N] [--no-sums]   copy a dataset directory to local storage, or reuse\n"
        "                                                          a valid earlier copy; prints DEST last\n"
        "       dptrain stage --check DIR [--streams N]            verify DIR against DIR/SHA256SUMS\n"
        "       dptrain stage --write-sums DIR [--streams N]       write DIR/SHA256SUMS (sha256sum's format)\n";
    std::vector<std::string> pos;
    int streams = 8;
    bool sums = true;
    std::string mode = "copy";
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--streams" && i + 1 < argc) {
            streams = std::atoi(argv[++i]);
            if (streams < 1 || streams > 256) throw UserError(strfmt("--streams %s must be in 1..256", argv[i]));
        } else if (a == "--no-sums") sums = false;
        else if (a == "--check" || a == "--write-sums") mode = a.substr(2);
        else if (a == "-h" || a == "--help") {
            std::fputs(usage, stdout);
            return 0;
        } else if (!a.empty() && a[0] == '-') throw UserError(strfmt("unknown option '%s'\n%s", a.c_str(), usage));
        else pos.push_back(a);
    }
    const char* me = "dptrain stage";
    if (mode == "check" || mode == "write-sums") {
        if (pos.size() != 1) throw UserError(strfmt("--%s takes one directory\n%s", mode.c_str(), usage));
        long n = mode == "check" ? check_sums(pos[0], streams) : write_sums(pos[0], streams);
        std::fprintf(stderr, "%s: %s %s/SHA256SUMS (%ld files)\n", me, mode == "check" ? "verified" : "wrote", pos[0].c_str(), n);
        return 0;
    }
    if (pos.size() != 2) throw UserError(strfmt("give SRC and DEST\n%s", usage));
    StageResult r = stage_directory(pos[0], pos[1], streams, sums, [&](const std::string& s) {
        std::fprintf(stderr, "%s: %s\n", me, s.c_str());
    });
    if (!r.reused) std::fprintf(stderr, "%s: %s\n", me, r.summary().c_str());
    std::printf("%s\n", r.dest.c_str());
    return 0;
}

} // namespace dptrain
