// Catch2 runner for the single-process unit tests (no MPI_Init needed: nothing here communicates).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
