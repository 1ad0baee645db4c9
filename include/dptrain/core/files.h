// Directories, through std::filesystem, with every error reported as a UserError that names the
// path and the setting it came from; the room and the right to write there; and how the user runs
// one of dptrain's programs. Not for:
// reading or writing files' contents.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace dptrain {

// Creates dir and its missing parents (an existing directory is fine). Throws UserError
// "WHAT DIR: cannot create the directory: REASON" (WHAT naming the setting, "--checkpoint-dir";
// without it "DIR: ..."), also when DIR, or a parent of it, exists as something else.
void make_directories(const std::string& dir, const std::string& what = "");

// Bytes an unprivileged writer may still put on DIR's filesystem; -1 when statvfs cannot tell.
double free_bytes(const std::string& dir);

// PATH's (device, inode): the same pair means the same file or directory, not one made again
// under its name; {0, 0} when it does not exist.
std::pair<uint64_t, uint64_t> file_id(const std::string& path);

// Whether a file can be made in the existing directory DIR: one is made and removed. When not,
// false and *why (strerror's text).
bool can_write_in(const std::string& dir, std::string* why);

// How the user runs PROGRAM ("dptrain-data"), one of the programs installed or built beside the
// running one, for the commands that messages suggest: its bare name when PATH finds that very
// file, else its path relative to the working directory when under it ("build/dptrain-data"),
// else its absolute path.
std::string runnable(const std::string& program);

} // namespace dptrain
