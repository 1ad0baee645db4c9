// make_directories: std::filesystem::create_directories, its error turned into one line.
#include "dptrain/core/files.h"

#include "dptrain/core/error.h"

#include <filesystem>
#include <system_error>

namespace dptrain {

void make_directories(const std::string& dir, const std::string& what) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!ec && !fs::is_directory(dir, ec) && !ec) ec = std::make_error_code(std::errc::not_a_directory);
    if (!ec) return;
    if (what.empty())
        throw UserError(strfmt("%s: cannot create the directory: %s", dir.c_str(), ec.message().c_str()));
    throw UserError(strfmt("%s %s: cannot create the directory: %s", what.c_str(), dir.c_str(), ec.message().c_str()));
}

} // namespace dptrain
