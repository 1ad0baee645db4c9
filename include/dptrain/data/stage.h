// Staging: a verified copy of a dataset directory on node-local storage, made once per node and
// reused while the source is unchanged; for --stage-dir and `dptrain stage`.
// Not for: reading the shards (shards.h).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

struct StageResult {
    std::string dest;
    long files = 0, copied_files = 0;
    double bytes = 0, copied_bytes = 0, seconds = 0;
    bool reused = false;        // an earlier complete copy of the same source kept as is
    bool sums_checked = false;  // SHA256SUMS present and every file matched
    // "copied 6 of 6 files, 12.3 MiB in 0.1 s: 123 MB/s, SHA256SUMS verified"
    std::string summary() const;
};

// Copies `src` to `dest`, `streams` files at a time, so that `dest` ends holding exactly its files:
// - each file is written as .stage-tmp-NAME, flushed and renamed: never a partial shard;
// - a complete earlier copy with an unchanged source list (names, sizes, mtimes) is reused;
//   otherwise only missing or resized files are copied and vanished ones removed;
// - sizes always checked, and SHA-256 against SHA256SUMS with check_sums;
// - one stager per destination (a lock file); free space checked first.
// Throws UserError naming the file and what to do, or when give_up() (a stop signal) before the
// next file. alive(): after every 4 MiB piece, from the copying threads, for the watchdog.
StageResult stage_directory(const std::string& src, const std::string& dest, int streams, bool check_sums,
                            const std::function<void(const std::string&)>& say, bool (*give_up)() = nullptr,
                            const std::function<void()>& alive = {});

// (sum, name) pairs in file order; throws UserError when missing or not sha256sum's format.
std::vector<std::pair<std::string, std::string>> read_sums(const std::string& dir);
// Throws UserError naming the first file that differs (removed first when remove_bad, so the next
// staging copies it again). Checks entries part, part + parts, ... only. Returns the count checked.
long check_sums(const std::string& dir, int streams, bool remove_bad = false, int part = 0, int parts = 1,
                bool (*give_up)() = nullptr, const std::function<void()>& alive = {});
// Every file under DIR but SHA256SUMS and .stage-* files.
long write_sums(const std::string& dir, int streams);
// Without `drop`'s lines, with `add` hashed now; other lines kept. Temporary name and rename.
void edit_sums(const std::string& dir, const std::vector<std::string>& drop, const std::vector<std::string>& add,
               int streams);

// 64 lowercase hex digits; throws UserError when unreadable.
std::string sha256_file(const std::string& path, const std::function<void()>& alive = {});
std::string sha256_hex(const void* data, size_t n);

// `dptrain stage SRC DEST | --check DIR | --write-sums DIR [--streams N] [--no-sums]`
int run_stage_command(int argc, char** argv);

} // namespace dptrain
