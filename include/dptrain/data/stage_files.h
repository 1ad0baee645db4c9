// What staging (stage.cpp) and SHA256SUMS (stage_sums.cpp) share: listing, atomic small writes,
// per-file jobs on a few threads. Not for: other callers; stage.h is the interface.
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

// Every regular file under root but .stage-* files, by path.
std::vector<Entry> list_files(const std::string& root);

// Through path.tmp: flushed, then renamed. Throws UserError.
void write_text(const std::string& path, const std::string& text);

// Runs job(i) for i in [0, n) on up to `streams` threads, rethrowing the first error. Once
// give_up() (a stop signal), no job starts: StopRequested.
void parallel_for(long n, int streams, const std::function<void(long, std::vector<char>&)>& job,
                  bool (*give_up)() = nullptr);

} // namespace dptrain::stage_files
