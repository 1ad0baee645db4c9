// What a process loads at start: cuBLAS is opened only by a process that makes a CUDA context
// (src/backend/cuda/cublas_library.h), because loading libcublasLt costs every process about half a
// second of static initialisation. This program makes none, so cuBLAS must not be mapped, whether
// or not the build has CUDA.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

TEST_CASE("a process that makes no CUDA context does not load cuBLAS", "[startup]") {
    std::ifstream maps("/proc/self/maps");
    REQUIRE(maps.good());
    std::string line;
    int mapped = 0;
    while (std::getline(maps, line)) {
        INFO(line);
        CHECK(line.find("libcublas") == std::string::npos);
        ++mapped;
    }
    CHECK(mapped > 10);  // the file was read: the program and its libraries are listed
}
