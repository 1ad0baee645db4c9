// Helpers of the CUDA tests: the GPU gate that skips visibly, device buffers that copy in and out,
// seeded random inputs and the tolerance check used by every op comparison.
// Not for: anything the library itself needs (tests only).
#pragma once

#include "dptrain/backend/cuda/ops.h"
#include "dptrain/model/model.h"

#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace cudatest {

// True when a GPU is usable. Otherwise prints "SKIPPED cuda: no GPU (reason)" once per process
// (tests/run_all.sh shows such lines under the suite's PASS).
bool have_gpu();

// Ends the test case with one passing assertion when there is no GPU (Catch2 v2 has no SKIP).
#define REQUIRE_GPU_OR_SKIP()                 \
    do {                                      \
        if (!::cudatest::have_gpu()) {        \
            SUCCEED("no GPU: test skipped");  \
            return;                           \
        }                                     \
    } while (0)

// n normal draws times scale (plus offset), from seed.
std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f, float offset = 0.0f);
// n integers in [0, below), from seed.
std::vector<int> randint(size_t n, uint64_t seed, int below);

// A device array of T. Copies in wait for the device so that work queued on any stream (the
// ops run on non-blocking streams, which the legacy default stream does not order against)
// sees the data; get() waits for everything queued before copying out.
template <class T>
class DeviceBuffer {
  public:
    explicit DeviceBuffer(size_t n) : n_(n) {
        REQUIRE(cudaMalloc(&p_, (n ? n : 1) * sizeof(T)) == cudaSuccess);
    }
    explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { set(host); }
    ~DeviceBuffer() { cudaFree(p_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    operator T*() { return p_; }
    void set(const std::vector<T>& host) {
        REQUIRE(host.size() == n_);
        REQUIRE(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    }
    std::vector<T> get() const {
        // A kernel fault surfaces here: check it before trusting the copy.
        cudaError_t rc = cudaDeviceSynchronize();
        INFO("CUDA error: " << cudaGetErrorString(rc));
        REQUIRE(rc == cudaSuccess);
        std::vector<T> host(n_);
        REQUIRE(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
        return host;
    }

  private:
    T* p_ = nullptr;
    size_t n_;
};

// Elements where !(|got - want| <= abs_tol + rel_tol * s), s = scale[i] when scale is given (the
// sum of |terms| behind an element, for reductions) and |want[i]| otherwise; NaN counts as a
// mismatch. WARNs the first few with their index; returns the count.
int mismatches(const char* what, const std::vector<float>& got, const std::vector<float>& want, double abs_tol,
               double rel_tol, const std::vector<float>& scale = {});
// Elements that differ in any bit (for ops built to match the CPU exactly).
int bit_mismatches(const char* what, const std::vector<float>& got, const std::vector<float>& want);
// Elements of a bf16 result that differ from the bf16 rounding of an fp32 one (the bf16 forms of
// ops, which must round the fp32 form's result exactly as dptrain::to_bf16 does).
int bf16_mismatches(const char* what, const std::vector<dptrain::bf16>& got, const std::vector<float>& fp32);

// A GPU model against its CPU twin after one forward of each on the same parameters: backward of both
// onto the same small non-zero gradients (backward adds; the GPU's own buffer, device_grads,
// poisoned first, so a value no first writer wrote comes back NaN), each tensor's added gradient
// non-zero and within grad_tol of its largest CPU value; then 50 AdamW steps of each on the batch,
// the losses within curve_tol (relative) at every step and the last under half the first (the
// curves compared are not flat).
void check_backward_and_steps(dptrain::Model& cpu, dptrain::Model& gpu, float* device_grads,
                              std::vector<float>& p_cpu, std::vector<float>& p_gpu,
                              const dptrain::ModelBatch& batch, float scale, double grad_tol, double curve_tol);

} // namespace cudatest
