// dptrain: parse options, set up MPI and the topology, hand over to the trainer.
#include "dptrain/comm.h"
#include "dptrain/doctor.h"
#include "dptrain/error.h"
#include "dptrain/generate.h"
#include "dptrain/options.h"
#include "dptrain/stage.h"
#include "dptrain/topology.h"
#include "dptrain/trainer.h"
#include "dptrain/version.h"

#include <mpi.h>

#include <cstdio>
#include <string>

using namespace dptrain;

static int finish(int code, Topology* topo) {
    if (topo) topo->destroy();
    MPI_Finalize();
    return code;
}

int main(int argc, char** argv) {
    // `dptrain generate ...` runs on one process, without MPI.
    if (argc > 1 && std::string(argv[1]) == "generate") {
        try {
            return run_generate(argc - 1, argv + 1);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "dptrain: error: %s\n", e.what());
            return 2;
        }
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
    // SERIALIZED: the communication thread calls MPI while the main thread computes, never both
    // at once; the prefetch thread reads files only.
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char host[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_Get_processor_name(host, &len);
    set_process_identity(rank, std::string(host, len));

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
    MPI_Comm_set_errhandler(topo.node, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(topo.cross, MPI_ERRORS_RETURN);
    if (doctor || parsed.opts.preflight) {
        int fatal_problems = run_doctor(parsed.opts, topo);
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
