// Catch2 runner shared by the single-process test programs: build/unit_tests (nothing there
// communicates, so no MPI_Init) and build/cuda_tests (on a machine without a GPU the op comparisons
// print one "SKIPPED cuda: no GPU (reason)" line and pass; the device-query tests run everywhere).
// It holds Catch2's implementation, so it is compiled once for both programs (Makefile: CATCH_OPT).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
