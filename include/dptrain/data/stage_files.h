// What staging (stage.cpp) and its SHA256SUMS (stage_sums.cpp) share: listing a directory tree,
// writing a small file atomically, and running per-file jobs on a few threads.
// Not for: other callers; stage.h is the interface.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace dptrain::stage_files {

struct Entry {
    std::string path;  // relative to the directory listed
    long long size = 0;
    long long mtime_ns = 0;
};

// Every regular file under root (subdirectories included, .stage-* files left out), by path.
std::vector<Entry> list_files(const std::string& root);

// Writes path by way of path.tmp: flushed to disk, then renamed. Throws UserError.
void write_text(const std::string& path, const std::string& text);

// Runs job(i) for i in [0, n) on up to `streams` threads; the first error is rethrown. When
// give_up() turns true (a stop signal), no further job starts: StopRequested.
void parallel_for(long n, int streams, const std::function<void(long, std::vector<char>&)>& job,
                  bool (*give_up)() = nullptr);

} // namespace dptrain::stage_files
