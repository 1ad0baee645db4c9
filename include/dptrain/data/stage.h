// Staging: a verified copy of a dataset directory on node-local storage, made once per node and
// reused while the source is unchanged. One implementation for `--stage-dir` (local rank 0 of each
// node copies, the node's other ranks wait) and for `dptrain stage`, which slurm/stage-data.sh
// runs. Not for: reading the shards (shards.h).
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
    bool reused = false;        // a complete earlier copy of the same source was kept as is
    bool sums_checked = false;  // SHA256SUMS was present and every file matched it
    // "copied 6 of 6 files, 12.3 MiB in 0.1 s: 123 MB/s, SHA256SUMS verified"
    std::string summary() const;
};

// Copies the files under `src` to `dest` (created), `streams` files at a time, so that `dest`
// ends holding exactly the source's files:
// - each file is written as DIR/.stage-tmp-NAME, flushed to disk and renamed, so an interrupted
//   copy never leaves a partial file under a shard's name;
// - a complete earlier copy (DEST/.stage-complete) whose source list (names, sizes, modification
//   times) is unchanged and whose files have those sizes is reused without copying; otherwise
//   only missing files and files of another size are copied, and files gone from the source are
//   removed;
// - every file's size is checked, and with check_sums and a SHA256SUMS file in the source, every
//   listed file's SHA-256 too;
// - one stager per destination at a time (a lock file); free space is checked first.
// `say` gets progress lines. Throws UserError naming the file and what to do, or when give_up()
// turns true (a stop signal) before the next file. alive() is called after every piece (4 MiB)
// read, written or hashed, from the copying threads: a watchdog's sign that the copy moves.
StageResult stage_directory(const std::string& src, const std::string& dest, int streams, bool check_sums,
                            const std::function<void(const std::string&)>& say, bool (*give_up)() = nullptr,
                            const std::function<void()>& alive = {});

// DIR/SHA256SUMS (sha256sum's format) as (sum, name) pairs in file order; throws UserError when it
// is missing or a line is not sha256sum's.
std::vector<std::pair<std::string, std::string>> read_sums(const std::string& dir);
// Checks DIR's files against DIR/SHA256SUMS; throws UserError naming the first file that differs
// (removing it first when remove_bad, so that the next staging copies it again). Checks entries
// part, part + parts, ... only (the ranks of a node share the work). Returns the number checked.
// give_up and alive: as in stage_directory.
long check_sums(const std::string& dir, int streams, bool remove_bad = false, int part = 0, int parts = 1,
                bool (*give_up)() = nullptr, const std::function<void()>& alive = {});
// Writes DIR/SHA256SUMS for every file under DIR (except SHA256SUMS and .stage-* files).
long write_sums(const std::string& dir, int streams);
// Rewrites DIR/SHA256SUMS (by temporary name and rename) without the lines naming `drop` and with
// lines for `add` (files in DIR, hashed now); every other line is kept as it was.
void edit_sums(const std::string& dir, const std::vector<std::string>& drop, const std::vector<std::string>& add,
               int streams);

// SHA-256 of a file as 64 lowercase hex digits (alive() after each piece read); throws UserError
// when it cannot be read.
std::string sha256_file(const std::string& path, const std::function<void()>& alive = {});
std::string sha256_hex(const void* data, size_t n);

// `dptrain stage SRC DEST | --check DIR | --write-sums DIR [--streams N] [--no-sums]`
int run_stage_command(int argc, char** argv);

} // namespace dptrain
