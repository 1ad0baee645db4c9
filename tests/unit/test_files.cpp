// make_directories: nested directories made, an existing one accepted, and a path that cannot be a
// directory refused with one line naming the setting, the path and the reason.
#include "helpers.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <sys/stat.h>

using namespace dptrain;

static bool is_dir(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

TEST_CASE("make_directories makes parents, accepts what exists, and names what it cannot make", "[files]") {
    const std::string root = testing::temp_dir("files");
    make_directories(root + "/a/b/c");
    CHECK(is_dir(root + "/a/b/c"));
    make_directories(root + "/a/b/c");  // again: fine
    make_directories(root + "/a/b/c/");
    std::ofstream(root + "/file") << "x";
    std::string what;
    try {
        make_directories(root + "/file/sub", "--checkpoint-dir");
    } catch (const UserError& e) {
        what = e.what();
    }
    CHECK(what.rfind("--checkpoint-dir " + root + "/file/sub: cannot create the directory: ", 0) == 0);
    CHECK(what.find("Not a directory") != std::string::npos);
    what.clear();
    try {
        make_directories(root + "/file");  // exists, but as a file
    } catch (const UserError& e) {
        what = e.what();
    }
    CHECK(what.rfind(root + "/file: cannot create the directory: ", 0) == 0);
}
