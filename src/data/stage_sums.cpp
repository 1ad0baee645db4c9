// SHA-256 (OpenSSL EVP, with the CPU's SHA extensions) and a directory's SHA256SUMS in sha256sum's
// format: read, checked, written, edited. Not for: copying a dataset (stage.cpp).
#include "dptrain/data/stage.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/data/stage_files.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

namespace dptrain {

using stage_files::Entry;
using stage_files::list_files;
using stage_files::parallel_for;
using stage_files::write_text;

namespace {

// Freed however the caller leaves.
class Sha256 {
  public:
    Sha256() : ctx_(EVP_MD_CTX_new()) {
        if (!ctx_ || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) fatal("OpenSSL: cannot start a SHA-256 digest");
    }
    ~Sha256() { EVP_MD_CTX_free(ctx_); }
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;
    void update(const void* p, size_t n) {
        if (EVP_DigestUpdate(ctx_, p, n) != 1) fatal("OpenSSL: SHA-256 update failed");
    }
    std::string hex() {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (EVP_DigestFinal_ex(ctx_, md, &len) != 1) fatal("OpenSSL: SHA-256 final failed");
        std::string out;
        for (unsigned int i = 0; i < len; ++i) out += strfmt("%02x", md[i]);
        return out;
    }

  private:
    EVP_MD_CTX* ctx_;
};

} // namespace

std::string sha256_hex(const void* data, size_t n) {
    Sha256 s;
    s.update(data, n);
    return s.hex();
}

std::string sha256_file(const std::string& path, const std::function<void()>& alive) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw UserError(strfmt("%s: cannot open it: %s", path.c_str(), std::strerror(errno)));
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    std::vector<unsigned char> buf(4 << 20);
    Sha256 s;
    for (;;) {
        ssize_t got = ::read(fd, buf.data(), buf.size());
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            ::close(fd);
            throw UserError(strfmt("%s: read failed: %s", path.c_str(), std::strerror(e)));
        }
        if (got == 0) break;
        s.update(buf.data(), (size_t)got);
        if (alive) alive();
    }
    ::close(fd);
    return s.hex();
}

std::vector<std::pair<std::string, std::string>> read_sums(const std::string& dir) {
    std::vector<std::pair<std::string, std::string>> want;  // (sum, name)
    std::ifstream in(dir + "/SHA256SUMS");
    if (!in)
        throw UserError(strfmt("%s/SHA256SUMS: cannot open it; write it with `%s verify %s`", dir.c_str(),
                               runnable("dptrain-data").c_str(), dir.c_str()));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        if (!line.empty() && line.back() == '\r') line.pop_back();  // written on Windows
        if (line.empty()) continue;
        // sha256sum's format: 64 hex digits, a space, ' ' (text) or '*' (binary), the name.
        if (line.size() < 67 || line[64] != ' ' || (line[65] != ' ' && line[65] != '*') ||
            line.find_first_not_of("0123456789abcdefABCDEF") < 64)
            throw UserError(strfmt("%s/SHA256SUMS:%d: not a sha256sum line; regenerate it with `%s stage --write-sums "
                                   "%s`",
                                   dir.c_str(), n, runnable("dptrain").c_str(), dir.c_str()));
        std::string name = line.substr(66);
        if (name.compare(0, 2, "./") == 0) name = name.substr(2);
        // Checking (and removing a bad staged copy) must never reach a file outside the directory.
        const std::string padded = "/" + name + "/";
        if (name.empty() || name[0] == '/' || padded.find("/../") != std::string::npos)
            throw UserError(strfmt("%s/SHA256SUMS:%d: '%s' is not a file inside %s (empty, absolute or with ..); "
                                   "regenerate it with `%s verify --update-sums %s`",
                                   dir.c_str(), n, name.c_str(), dir.c_str(), runnable("dptrain-data").c_str(),
                                   dir.c_str()));
        want.emplace_back(line.substr(0, 64), name);
    }
    return want;
}

long check_sums(const std::string& dir, int streams, bool remove_bad, int part, int parts, bool (*give_up)(),
                const std::function<void()>& alive) {
    // Entries part, part + parts, ...
    const auto all = read_sums(dir);
    std::vector<std::pair<std::string, std::string>> want;
    for (size_t i = (size_t)part; i < all.size(); i += (size_t)parts) want.push_back(all[i]);
    parallel_for((long)want.size(), streams, [&](long i, std::vector<char>&) {
        std::string path = dir + "/" + want[i].second;
        if (sha256_file(path, alive) == want[i].first) return;
        if (remove_bad) {
            ::unlink(path.c_str());
            throw UserError(strfmt("%s: FAILED: its SHA-256 does not match SHA256SUMS; the copy was removed, so the next "
                                   "staging copies it again. If this repeats, the source file is damaged: restore it "
                                   "or regenerate SHA256SUMS",
                                   path.c_str()));
        }
        throw UserError(strfmt("%s: FAILED: its SHA-256 does not match SHA256SUMS (a damaged copy or source); restore "
                               "the file from its source, or if it changed on purpose rewrite the manifest with `%s "
                               "verify --update-sums %s`",
                               path.c_str(), runnable("dptrain-data").c_str(), dir.c_str()));
    }, give_up);
    return (long)want.size();
}

void edit_sums(const std::string& dir, const std::vector<std::string>& drop, const std::vector<std::string>& add,
               int streams) {
    std::string text;
    for (const auto& [sum, name] : read_sums(dir))
        if (std::find(drop.begin(), drop.end(), name) == drop.end() &&
            std::find(add.begin(), add.end(), name) == add.end())
            text += sum + "  " + name + "\n";
    std::vector<std::string> sums(add.size());
    parallel_for((long)add.size(), streams, [&](long i, std::vector<char>&) { sums[i] = sha256_file(dir + "/" + add[i]); });
    for (size_t i = 0; i < add.size(); ++i) text += sums[i] + "  " + add[i] + "\n";
    write_text(dir + "/SHA256SUMS", text);
}

long write_sums(const std::string& dir, int streams) {
    std::vector<Entry> files = list_files(dir);
    files.erase(std::remove_if(files.begin(), files.end(),
                               [](const Entry& e) { return e.path == "SHA256SUMS" || e.path == "SHA256SUMS.tmp"; }),
                files.end());
    std::vector<std::string> sums(files.size());
    parallel_for((long)files.size(), streams,
                 [&](long i, std::vector<char>&) { sums[i] = sha256_file(dir + "/" + files[i].path); });
    std::string text;
    for (size_t i = 0; i < files.size(); ++i) text += sums[i] + "  " + files[i].path + "\n";
    write_text(dir + "/SHA256SUMS", text);
    return (long)files.size();
}

} // namespace dptrain
