// dptrain-bench: dptrain's own measurements, each beside its real peer in the same run
// (tools/bench.h lists them; each lives in src/tools/lib/bench_*.cpp).
#include "dptrain/comm/communicator.h"
#include "dptrain/core/error.h"
#include "dptrain/tools/bench.h"
#include "dptrain/tools/cli.h"

#include <string>

using namespace dptrain;

int main(int argc, char** argv) {
    mpi_start(&argc, &argv);
    const bool speak = MpiCommunicator(MPI_COMM_WORLD).rank() == 0;  // every rank fails alike
    const int code = run_tool("dptrain-bench", bench_usage(), argc, argv, [&] {
        const std::string cmd = argc > 1 ? argv[1] : "";
        if (cmd == "allreduce") return bench_allreduce(argc - 1, argv + 1);
        if (cmd == "io") return bench_io(argc - 1, argv + 1);
        if (cmd == "trace") return bench_trace(argc - 1, argv + 1);
        if (cmd == "tokenizer") return bench_tokenizer(argc - 1, argv + 1);
        if (cmd == "matmul") return bench_matmul(argc - 1, argv + 1);
        if (cmd == "products") return bench_products(argc - 1, argv + 1);
        if (cmd == "decode") return bench_decode(argc - 1, argv + 1);
        const char* commands = "allreduce, io, trace, tokenizer, matmul, products or decode";
        throw boost::program_options::error(cmd.empty() ? strfmt("no command given (%s)", commands)
                                                        : strfmt("not a command (%s)", commands));
    }, speak);
    mpi_finish();
    return code;
}
