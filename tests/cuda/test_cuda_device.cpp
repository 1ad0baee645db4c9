// Device discovery, run everywhere (no GPU needed): device_count() never fails and explains an
// empty answer, and bind_device() refuses more ranks than GPUs with a message that says what to
// change. On this project's CPU machines (CUDA runtime, no driver) device_count() is 0. And cuBLAS,
// opened on first use, resolves every function the backend calls.
#include "helpers.h"

// The loader's own view (no name mapping): the test reads the table's entries by name.
#define DPTRAIN_CUBLAS_LOADER
#include "../../src/backend/cuda/cublas_library.h"

#include "dptrain/core/error.h"

#include <cuda_runtime.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace dptrain;

TEST_CASE("device_count returns a count, or 0 with the reason", "[cuda][device]") {
    std::string why = "stale";
    int n = cuda::device_count(&why);
    INFO("device_count = " << n << ", why = '" << why << "'");
    REQUIRE(n >= 0);
    if (n == 0)
        CHECK(why.size() > 10);  // a sentence naming the cause, not an empty string
    else
        CHECK(why.empty());
    CHECK(cuda::device_count() == n);  // the reason is optional, and asking twice is harmless
}

TEST_CASE("bind_device refuses more ranks than visible GPUs", "[cuda][device]") {
    std::string why;
    const int n = cuda::device_count(&why);
    // One rank more than there are GPUs: on a CPU machine that is 1 rank and 0 GPUs.
    try {
        cuda::bind_device(0, n + 1);
        FAIL("bind_device accepted " << n + 1 << " ranks with " << n << " GPUs");
    } catch (const UserError& e) {
        std::string msg = e.what();
        INFO(msg);
        CHECK(msg.find(strfmt("node has %d rank", n + 1)) == 0);
        CHECK(msg.find(strfmt("but %d visible GPU", n)) != std::string::npos);
        if (n == 0) CHECK(msg.find(why) != std::string::npos);  // the cause is passed on
    }
    CHECK_THROWS_AS(cuda::bind_device(2, 2), UserError);   // rank outside [0, size)
    CHECK_THROWS_AS(cuda::bind_device(-1, 1), UserError);
}

TEST_CASE("device_shortage_message names the counts and the fix", "[cuda][device]") {
    CHECK(cuda::device_shortage_message(4, 2, "", "") ==
          "node has 4 ranks but 2 visible GPUs; run 2 ranks per node (mpirun --map-by ppr:2:node) or expose more GPUs");
    CHECK(cuda::device_shortage_message(8, 1, "3", "") ==
          "node has 8 ranks but 1 visible GPU; run 1 rank per node (mpirun --map-by ppr:1:node) or expose more GPUs"
          " (CUDA_VISIBLE_DEVICES=3)");
    CHECK(cuda::device_shortage_message(1, 0, "", "no NVIDIA driver found (cudaErrorInsufficientDriver)") ==
          "node has 1 rank but 0 visible GPUs (no NVIDIA driver found (cudaErrorInsufficientDriver)); run on nodes "
          "with a GPU, or build with CUDA=0 for the CPU backend");
}

TEST_CASE("PinnedHost page-locks memory on a GPU machine and explains itself elsewhere", "[cuda][device]") {
    std::vector<float> host(1 << 20, 1.5f);
    {
        cuda::PinnedHost pin(host.data(), host.size() * sizeof(float));
        INFO("why: " << pin.why());
        if (cuda::device_count() > 0) {
            CHECK(pin.ok());
            cudaPointerAttributes attr{};
            REQUIRE(cudaPointerGetAttributes(&attr, host.data()) == cudaSuccess);
            CHECK(attr.type == cudaMemoryTypeHost);  // registered: the runtime knows it as page-locked host memory
        } else {
            CHECK_FALSE(pin.ok());
            CHECK(pin.why().find("cudaHostRegister of 4.0 MiB failed") != std::string::npos);
        }
    }
    CHECK(host[12345] == 1.5f);  // unregistered at the end of its scope; the memory is untouched
    cuda::PinnedHost nothing(nullptr, 0);
    CHECK_FALSE(nothing.ok());
}

// cuBLAS is not linked but opened on first use (src/backend/cuda/cublas_library.h). Opening it and
// resolving every function the backend calls needs no GPU, so this runs on every machine with the
// toolkit, and a function missing from the lists or the library fails here, not on a GPU later.
TEST_CASE("cublas_api opens cuBLAS and resolves every function the backend calls", "[cuda][device]") {
    const cuda::CublasApi& api = cuda::cublas_api();
#define DPTRAIN_CHECK_RESOLVED(f) CHECK(api.f != nullptr);
    DPTRAIN_CUBLAS_FUNCTIONS(DPTRAIN_CHECK_RESOLVED)
    DPTRAIN_CUBLAS_OVERLOADED(DPTRAIN_CHECK_RESOLVED)
    DPTRAIN_CUBLASLT_FUNCTIONS(DPTRAIN_CHECK_RESOLVED)
#undef DPTRAIN_CHECK_RESOLVED
    CHECK(&cuda::cublas_api() == &api);  // loaded once
    // A call into the library that needs no device: its own name for a status.
    CHECK(std::string(api.cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED)) == "the library was not initialized");
    std::ifstream maps("/proc/self/maps");
    std::string all((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
    CHECK(all.find("libcublasLt.so") != std::string::npos);
}
