// Where a model's forward and backward spend their time, by kind of op (--profile-ops STEP): the
// models add each op's time while an OpTimes is set on them (Model::set_op_times). On the CPU an
// op's time is the wall clock around it; on a GPU it is the time between CUDA events recorded
// around it on the model's stream, read after the step's backward, so it holds the op's kernels
// and any gap between them. Not for: the step's other phases (the step breakdown times data,
// all-reduce and optimizer) or timing every step (the events cost a synchronisation).
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
    // One line per kind that ran, longest first: name, ms, share of the total, calls; then the total.
    std::string table() const;

  private:
    double seconds_[(int)OpKind::count] = {};
    long calls_[(int)OpKind::count] = {};
};

// Runs op() and, when t is set, adds its wall-clock time to t under k (the CPU models' ops).
template <class Op>
void timed(OpTimes* t, OpKind k, Op&& op) {
    if (!t) return op();
    const auto t0 = std::chrono::steady_clock::now();
    op();
    t->add(k, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

} // namespace dptrain
