// Directories, through std::filesystem, with every error reported as a UserError that names the
// path and the setting it came from. Not for: reading or writing files' contents.
#pragma once

#include <string>

namespace dptrain {

// Creates dir and its missing parents (an existing directory is fine). Throws UserError
// "WHAT DIR: cannot create the directory: REASON" (WHAT naming the setting, "--checkpoint-dir";
// without it "DIR: ..."), also when DIR, or a parent of it, exists as something else.
void make_directories(const std::string& dir, const std::string& what = "");

} // namespace dptrain
