// dptrain-bench: dptrain's own measurements, each beside its real peer in the same run
// (tools/bench.h lists them; each lives in src/tools/lib/bench_*.cpp).
#include "dptrain/comm/communicator.h"
#include "dptrain/tools/bench.h"

#include <string>

using namespace dptrain;

int main(int argc, char** argv) {
    mpi_start(&argc, &argv);
    const std::string cmd = argc > 1 ? argv[1] : "";
    const int code = cmd == "io"      ? bench_io(argc, argv)
                     : cmd == "trace" ? bench_trace(argc, argv)
                                      : bench_allreduce(argc, argv);
    mpi_finish();
    return code;
}
