// dptrain: parse options, set up MPI and the topology, hand over to the trainer.
#include "dptrain/comm/communicator.h"
#include "dptrain/app/doctor.h"
#include "dptrain/core/error.h"
#include "dptrain/app/generate.h"
#include "dptrain/app/plan.h"
#include "dptrain/app/serve.h"
#include "dptrain/config/options.h"
#include "dptrain/data/stage.h"
#include "dptrain/comm/topology.h"
#include "dptrain/train/trainer.h"
#include "dptrain/core/version.h"
#include "dptrain/io/reliability.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

using namespace dptrain;

static int finish(int code, Topology* topo) {
    if (topo) topo->destroy();
    mpi_finish();
    return code;
}

int main(int argc, char** argv) {
    // Line by line also into a pipe or a file (mpirun's, a job's log), so that a rank killed hard
    // leaves every line it printed.
    std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
    // `dptrain generate ...` runs on one process, without MPI.
    if (argc > 1 && std::string(argv[1]) == "generate") {
        try {
            return run_generate(argc - 1, argv + 1);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "dptrain: error: %s\n", e.what());
            return 2;
        }
    }
    // `dptrain serve ...`: the inference server, one process, without MPI.
    if (argc > 1 && std::string(argv[1]) == "serve") {
        // SIGTERM and SIGINT are the server's from here (its signal thread waits for them): a
        // library's own handler (PSM's, loaded with MPI, prints a backtrace and calls malloc in
        // it) must not take one that comes while the server starts.
        sigset_t stop;
        sigemptyset(&stop);
        sigaddset(&stop, SIGTERM);
        sigaddset(&stop, SIGINT);
        pthread_sigmask(SIG_BLOCK, &stop, nullptr);
        try {
            return run_serve(argc - 1, argv + 1);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "dptrain: error: %s\n", e.what());
            return 2;
        }
    }
    // `dptrain options`: every option and its closed set of values, for shell completion.
    if (argc > 1 && std::string(argv[1]) == "options") {
        const std::string next = argc > 2 ? argv[2] : "";
        if (next == "--help" || next == "-h") {
            std::puts("dptrain options: every option of dptrain, a line each: its name, then a tab and its values\n"
                      "where they are a closed set (--model<TAB>mlp gpt). For shell completion (the bash completion\n"
                      "installed with dptrain reads it); dptrain --help explains the options.");
            return 0;
        }
        if (argc > 2) {
            std::fprintf(stderr, "dptrain: error: dptrain options takes no arguments (got '%s'); dptrain --help explains "
                                 "the options\n",
                         argv[2]);
            return 2;
        }
        std::fputs(option_listing().c_str(), stdout);
        return 0;
    }
    // `dptrain stage ...`: staging a dataset to local storage (slurm/stage-data.sh), without MPI.
    if (argc > 1 && std::string(argv[1]) == "stage") {
        try {
            return run_stage_command(argc - 1, argv + 1);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "dptrain stage: error: %s\n", e.what());
            return 1;
        }
    }
    mpi_start(&argc, &argv);
    const int rank = MpiCommunicator(MPI_COMM_WORLD).rank();

    // `dptrain plan [--ranks N] [--gpu-memory SIZE] [options]`: memory per rank, before a run.
    if (argc > 1 && std::string(argv[1]) == "plan") {
        Topology topo;
        if (!all_ok(MPI_COMM_WORLD, [&] { topo = Topology::create(MPI_COMM_WORLD, 0); })) return finish(2, nullptr);
        const int code = run_plan(std::vector<std::string>(argv + 2, argv + argc), topo);
        return finish(code, &topo);
    }

    // `dptrain doctor [options]`: the same options as training, for the paths to check.
    bool doctor = argc > 1 && std::string(argv[1]) == "doctor";
    ParseResult parsed;
    if (!all_ok(MPI_COMM_WORLD, [&] { parsed = parse_options(argc - doctor, argv + doctor); })) return finish(2, nullptr);
    if (parsed.help || parsed.version) {
        if (rank == 0) std::fputs(parsed.help ? parsed.help_text.c_str() : "dptrain " DPTRAIN_VERSION "\n", stdout);
        return finish(0, nullptr);
    }
    Topology topo;
    if (!all_ok(MPI_COMM_WORLD, [&] { topo = Topology::create(MPI_COMM_WORLD, parsed.opts.ranks_per_node); }))
        return finish(2, nullptr);
    mpi_errors_return(topo.node);
    mpi_errors_return(topo.cross);
    if (doctor || parsed.opts.preflight) {
        // Before training's checks: a stop signal during --preflight ends the run with exit 75 at
        // set-up's first phase (the signal's default action killed the ranks: exit 138 for
        // SIGUSR1, which no launcher requeues); `doctor` alone keeps the default, and dies.
        if (!doctor) install_preemption_handlers();
        // A check that never answers (a hung filesystem, a device) ends the job naming the rank,
        // as set-up's watchdog does.
        Watchdog dog(parsed.opts.step_timeout);
        dog.begin(0, Phase::setup);
        dog.allow(parsed.opts.lock_wait);
        int fatal_problems = run_doctor(parsed.opts, topo);
        dog.stop();
        if (doctor || fatal_problems > 0) {
            if (!doctor && rank == 0)
                std::fprintf(stderr, "dptrain: error: --preflight found %d fatal problem%s (above); fix them before "
                                     "training\n",
                             fatal_problems, fatal_problems == 1 ? "" : "s");
            return finish(fatal_problems > 0 ? 2 : 0, &topo);
        }
    }
    int code = run_training(parsed.opts, topo);
    return finish(code, &topo);
}
