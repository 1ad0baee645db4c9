// dptrain: the table of subcommands, each a thin entry into its layer; not for any command's work.
// Commands with MPI agree on an error across ranks (all_ok) before any rank ends.
#include "dptrain/app/doctor.h"
#include "dptrain/app/eval.h"
#include "dptrain/app/plan.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/comm/topology.h"
#include "dptrain/config/options.h"
#include "dptrain/core/error.h"
#include "dptrain/core/version.h"
#include "dptrain/data/stage.h"
#include "dptrain/infer/generate.h"
#include "dptrain/infer/serve.h"
#include "dptrain/io/reliability.h"
#include "dptrain/train/trainer.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace dptrain;

namespace {

int finish(int code, Topology* topo) {
    if (topo) topo->destroy();
    mpi_finish();
    return code;
}

int generate_command(int argc, char** argv) { return run_generate(argc, argv, "dptrain generate"); }

int serve_command(int argc, char** argv) {
    // Blocked before any thread starts, for the server's signal thread: PSM's handler (loaded
    // with MPI) calls malloc inside a handler. Why: docs/NOTES.md, "Note [serve stop]".
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    return run_serve(argc, argv, "dptrain serve");
}

int options_command(int argc, char** argv) {
    const std::string next = argc > 1 ? argv[1] : "";
    if (next == "--help" || next == "-h") {
        std::puts("dptrain options: every option of dptrain, a line each: its name, then a tab and its values\n"
                  "where they are a closed set (--model<TAB>mlp gpt). For shell completion (the bash completion\n"
                  "installed with dptrain reads it); dptrain --help explains the options.");
        return 0;
    }
    if (argc > 1)
        throw UserError(strfmt("dptrain options takes no arguments (got '%s'); dptrain --help explains the options",
                               argv[1]));
    std::fputs(option_listing().c_str(), stdout);
    return 0;
}

int eval_command(int argc, char** argv) {
    Topology topo;
    if (!all_ok(MPI_COMM_WORLD, [&] { topo = Topology::create(MPI_COMM_WORLD, 0); })) return finish(2, nullptr);
    return finish(run_eval(argc, argv, topo), &topo);
}

int plan_command(int argc, char** argv) {
    Topology topo;
    if (!all_ok(MPI_COMM_WORLD, [&] { topo = Topology::create(MPI_COMM_WORLD, 0); })) return finish(2, nullptr);
    return finish(run_plan(std::vector<std::string>(argv + 1, argv + argc), topo), &topo);
}

// --preflight or `dptrain doctor`. Returns the exit code, or -1 when training goes on.
int check_environment(const Options& opts, const Topology& topo, bool doctor) {
    // A stop during --preflight exits 75 like set-up's; `doctor` alone keeps the default and dies.
    if (!doctor) install_preemption_handlers();
    // A hung check (filesystem, device) ends the job naming the rank, as set-up's watchdog does.
    Watchdog dog(opts.step_timeout);
    dog.begin(0, Phase::setup);
    dog.allow(opts.lock_wait);
    const int fatal_problems = run_doctor(opts, topo);
    dog.stop();
    if (!doctor && fatal_problems == 0) return -1;
    if (!doctor && topo.rank == 0)
        std::fprintf(stderr, "dptrain: error: --preflight found %d fatal problem%s (above); fix them before training\n",
                     fatal_problems, fatal_problems == 1 ? "" : "s");
    return fatal_problems > 0 ? 2 : 0;
}

// Training, and `dptrain doctor` (the same options, for the paths to check).
int train_command(int argc, char** argv, bool doctor) {
    ParseResult parsed;
    if (!all_ok(MPI_COMM_WORLD, [&] { parsed = parse_options(argc, argv); })) return finish(2, nullptr);
    if (parsed.help || parsed.version) {
        if (MpiCommunicator(MPI_COMM_WORLD).rank() == 0)
            std::fputs(parsed.help ? parsed.help_text.c_str() : "dptrain " DPTRAIN_VERSION "\n", stdout);
        return finish(0, nullptr);
    }
    Topology topo;
    if (!all_ok(MPI_COMM_WORLD, [&] { topo = Topology::create(MPI_COMM_WORLD, parsed.opts.ranks_per_node); }))
        return finish(2, nullptr);
    mpi_errors_return(topo.node);
    mpi_errors_return(topo.cross);
    if (doctor || parsed.opts.preflight) {
        const int code = check_environment(parsed.opts, topo, doctor);
        if (code >= 0) return finish(code, &topo);
    }
    return finish(run_training(parsed.opts, topo), &topo);
}

int doctor_command(int argc, char** argv) { return train_command(argc, argv, true); }

struct Command {
    const char* name;
    bool mpi;                          // the command ends it (finish)
    int (*run)(int argc, char** argv); // argv[0] is the command's name
    const char* error_prefix;          // without MPI
    int error_code;
};

const Command kCommands[] = {
    {"generate", false, generate_command, "dptrain", 2},
    {"serve", false, serve_command, "dptrain", 2},
    {"options", false, options_command, "dptrain", 2},
    {"stage", false, run_stage_command, "dptrain stage", 1},  // slurm/stage-data.sh renames the prefix
    {"plan", true, plan_command, "", 0},
    {"eval", true, eval_command, "", 0},
    {"doctor", true, doctor_command, "", 0},
};

} // namespace

int main(int argc, char** argv) {
    // Line-buffered into pipes and files too, so a rank killed hard leaves every line it printed.
    std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
    const Command* cmd = nullptr;
    for (const Command& c : kCommands)
        if (argc > 1 && std::strcmp(argv[1], c.name) == 0) cmd = &c;
    if (cmd && !cmd->mpi) {
        try {
            return cmd->run(argc - 1, argv + 1);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s: error: %s\n", cmd->error_prefix, e.what());
            return cmd->error_code;
        }
    }
    mpi_start(&argc, &argv);
    if (cmd) return cmd->run(argc - 1, argv + 1);
    return train_command(argc, argv, false);
}
