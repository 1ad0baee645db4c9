// Catch2 runner for the CUDA tests (tag [cuda]): single process, no MPI. On a machine without a GPU
// the op comparisons print one "SKIPPED cuda: no GPU (reason)" line and pass; the device-query
// tests run everywhere.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
