// make_directories: nested directories made, an existing one accepted, and a path that cannot be a
// directory refused with one line naming the setting, the path and the reason. runnable: a program
// beside this one named as the user can run it.
#include "helpers.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
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

TEST_CASE("runnable names a program as the user can run it: on the PATH, under the directory, or absolute",
          "[files]") {
    namespace fs = std::filesystem;
    const fs::path self = fs::read_symlink("/proc/self/exe");
    const std::string name = self.filename().string(), dir = self.parent_path().string();
    const std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
    const fs::path old_cwd = fs::current_path();
    CHECK(runnable("no-such-program-here") == "no-such-program-here");  // not beside this one
    setenv("PATH", ("/nonexistent:" + dir + ":/usr/bin").c_str(), 1);
    CHECK(runnable(name) == name);
    setenv("PATH", "/nonexistent", 1);
    fs::current_path(self.parent_path().parent_path());
    CHECK(runnable(name) == self.parent_path().filename().string() + "/" + name);
    const std::string elsewhere = testing::temp_dir("runnable");
    fs::current_path(elsewhere);
    CHECK(runnable(name) == self.string());
    // Another file of that name found first on the PATH: the path of ours, not the bare name.
    std::ofstream(elsewhere + "/" + name) << "#!/bin/sh\n";
    setenv("PATH", elsewhere.c_str(), 1);
    CHECK(runnable(name) == self.string());
    fs::current_path(old_cwd);
    setenv("PATH", old_path.c_str(), 1);
}
