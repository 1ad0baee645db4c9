// Directories (errors as UserError naming the path and its setting), room and write access there,
// and how the user runs one of dptrain's programs. Not for: reading or writing files' contents.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace dptrain {

// An existing directory is fine. what: the setting, e.g. "--checkpoint-dir".
void make_directories(const std::string& dir, const std::string& what = "");

// For an unprivileged writer; -1 when statvfs cannot tell.
double free_bytes(const std::string& dir);

// (device, inode), to tell a path remade under its name; {0, 0}: absent.
std::pair<uint64_t, uint64_t> file_id(const std::string& path);

// By making and removing a file (mode bits do not tell); *why: strerror.
bool can_write_in(const std::string& dir, std::string* why);

// For commands in messages: the bare name when PATH finds this very file, else a path relative
// to the working directory ("build/dptrain-data"), else absolute.
std::string runnable(const std::string& program);

} // namespace dptrain
