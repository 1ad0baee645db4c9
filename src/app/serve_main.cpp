// dptrain-serve: the completions server as a program of its own, linked without MPI (a serving
// container needs no Open MPI); the same server as `dptrain serve`.
#include "dptrain/core/version.h"
#include "dptrain/infer/serve.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <exception>

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
    if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
        std::puts("dptrain-serve " DPTRAIN_VERSION);
        return 0;
    }
    // SIGTERM and SIGINT belong to the server's signal thread: blocked before any thread starts.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    try {
        return dptrain::run_serve(argc, argv, "dptrain-serve");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dptrain-serve: error: %s\n", e.what());
        return 2;
    }
}
