// Forward's and backward's time by kind of op (--profile-ops STEP): wall clock on the CPU, CUDA
// events around the op on a GPU (its kernels and any gap). Not for: the step's other phases, or
// every step (the events cost a synchronisation).
#pragma once

#include <chrono>
#include <string>

namespace dptrain {

enum class OpKind { matmul, attention, layernorm, activation, crossentropy, encoder, copy, other, count };
const char* op_kind_name(OpKind k);

class OpTimes {
  public:
    void add(OpKind k, double seconds) {
        seconds_[(int)k] += seconds;
        ++calls_[(int)k];
    }
    double seconds(OpKind k) const { return seconds_[(int)k]; }
    long calls(OpKind k) const { return calls_[(int)k]; }
    double total() const;
    // A line per kind that ran, longest first (name, ms, share, calls), then the total.
    std::string table() const;

  private:
    double seconds_[(int)OpKind::count] = {};
    long calls_[(int)OpKind::count] = {};
};

// Runs op(), adding its wall-clock time to t under k when t is set (the CPU models).
template <class Op>
void timed(OpTimes* t, OpKind k, Op&& op) {
    if (!t) return op();
    const auto t0 = std::chrono::steady_clock::now();
    op();
    t->add(k, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

} // namespace dptrain
