// The helpers dptrain-data's subcommands share: options or --help, a clean --out, joining names.
// Not for: any subcommand's own work.
#include "dptrain/tools/data_commands.h"

#include "dptrain/comm/communicator.h"
#include "dptrain/config/argv.h"
#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/data/shards.h"
#include "dptrain/data/stage.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <set>

namespace dptrain {

namespace po = boost::program_options;

bool parse_or_help(int argc, char** argv, const po::options_description& desc, const char* epilogue, bool print) {
    po::variables_map vm;
    po::store(parse_argv(argc, argv, desc, std::string(argv[0]) + " takes options alone (--name value)"), vm);
    po::notify(vm);
    if (!vm.count("help")) return false;
    if (print) std::cout << desc << epilogue;
    return true;
}

void prepare_out(const std::string& out, const std::vector<std::string>& splits, bool overwrite) {
    make_directories(out, "--out");
    struct stat st;
    if (stat(out.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw UserError(strfmt("--out %s: cannot create the directory (a file of that name, or no permission?)", out.c_str()));
    std::vector<std::string> old;
    DIR* d = opendir(out.c_str());
    if (!d) throw UserError(strfmt("--out %s: cannot list it: %s", out.c_str(), std::strerror(errno)));
    while (dirent* e = readdir(d)) {
        for (const std::string& split : splits) {
            int i = 0, of = 0, used = 0;
            std::string fmt = split + "-%5d-of-%5d.h5%n";
            if (std::sscanf(e->d_name, fmt.c_str(), &i, &of, &used) == 2 && used == (int)std::strlen(e->d_name))
                old.push_back(e->d_name);
        }
    }
    closedir(d);
    if (old.empty()) return;
    std::sort(old.begin(), old.end());
    if (!overwrite)
        throw UserError(strfmt("--out %s already holds %zu shard%s (%s%s); pass --overwrite to replace them, or choose "
                               "another --out",
                               out.c_str(), old.size(), old.size() == 1 ? "" : "s", old[0].c_str(),
                               old.size() > 1 ? ", ..." : ""));
    for (const std::string& name : old) {
        std::string p = out + "/" + name;
        if (unlink(p.c_str()) != 0)
            throw UserError(strfmt("%s: cannot remove the old shard: %s", p.c_str(), std::strerror(errno)));
    }
    // Other files' lines are kept (a damaged one still fails its check); complete_sums adds ours.
    struct stat sums;
    if (stat((out + "/SHA256SUMS").c_str(), &sums) == 0) {
        edit_sums(out, old, {}, 1);
        std::printf("%s/SHA256SUMS: the replaced shards' lines removed, the other files' kept\n", out.c_str());
    }
}

void complete_sums(const std::string& out, const std::vector<std::string>& splits) {
    struct stat st;
    if (stat((out + "/SHA256SUMS").c_str(), &st) != 0) return;
    std::set<std::string> listed;
    for (const auto& entry : read_sums(out)) listed.insert(entry.second);
    std::vector<std::string> fresh;
    for (const std::string& split : splits)
        for (const std::string& path : find_shards(out, split, "")) {
            const std::string name = path.substr(path.rfind('/') + 1);
            if (!listed.count(name)) fresh.push_back(name);
        }
    edit_sums(out, {}, fresh, 4);
    std::printf("%s/SHA256SUMS: the %zu new shard%s added\n", out.c_str(), fresh.size(), fresh.size() == 1 ? "" : "s");
}

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
    return s;
}

bool agreed(const char* cmd, const std::function<void()>& step) {
    std::string msg;
    bool ok = true;
    try {
        step();
    } catch (const po::error& e) {
        ok = false;
        msg = strfmt("%s; see %s %s --help", e.what(), runnable("dptrain-data").c_str(), cmd);
    } catch (const std::bad_alloc&) {
        ok = false;
        msg = strfmt("%s: out of memory: this command holds its inputs whole in memory (every value as float32 or "
                     "int32), and they do not fit this machine's; convert them on a machine with more, or check that "
                     "the inputs' sizes are what you expect",
                     cmd);
    } catch (const std::exception& e) {
        ok = false;
        msg = e.what();
    }
    MpiCommunicator world(MPI_COMM_WORLD);
    const int rank = world.rank(), size = world.size();
    int first = ok ? INT_MAX : rank;
    world.allreduce(&first, 1, ReduceOp::min);
    if (first == INT_MAX) return true;
    if (rank == first) {
        // A control character quoted from the user's file must not break the one-line promise.
        for (char& c : msg)
            if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
        std::string who = size > 1 ? strfmt(" (%s)", process_identity().c_str()) : "";
        std::fprintf(stderr, "dptrain-data: error: %s%s\n", msg.c_str(), who.c_str());
        std::fflush(stderr);
    }
    return false;
}

} // namespace dptrain
