// The Communicator interface gradient averaging goes through, and its MPI implementation over
// host memory. Later strategies (hierarchical, NCCL, bucketed overlap) sit behind the same
// interface. Not for: knowing the model or the optimizer.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>

namespace dptrain {

class Communicator {
  public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual const char* name() const = 0;
    // In place: buf = sum over ranks of buf. Every rank ends with identical bytes.
    virtual void allreduce_sum(float* buf, size_t count) = 0;
    virtual void allreduce_sum(double* buf, size_t count) = 0;
    virtual void broadcast(void* buf, size_t bytes, int root) = 0;
    virtual void barrier() = 0;
};

// MPI over host buffers. Counts above INT_MAX are sent in pieces.
class MpiCommunicator : public Communicator {
  public:
    explicit MpiCommunicator(MPI_Comm comm);
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char* name() const override { return "mpi"; }
    void allreduce_sum(float* buf, size_t count) override;
    void allreduce_sum(double* buf, size_t count) override;
    void broadcast(void* buf, size_t bytes, int root) override;
    void barrier() override;
    MPI_Comm comm() const { return comm_; }

  private:
    MPI_Comm comm_;
    int rank_ = 0, size_ = 1;
};

// Runs `fn` on every rank of `comm` and agrees on the outcome: if it threw a UserError on any
// rank, the lowest such rank prints "dptrain: error: MSG" and every rank returns false (the
// caller then finalizes MPI and exits 2). Used at start-up, where every rank reaches the same
// point, so a bad option or file ends the job cleanly instead of hanging the others.
template <typename Fn>
bool all_ok(MPI_Comm comm, Fn&& fn);

bool agree_ok(MPI_Comm comm, bool ok, const std::string& msg);

template <typename Fn>
bool all_ok(MPI_Comm comm, Fn&& fn) {
    try {
        fn();
    } catch (const std::exception& e) {
        return agree_ok(comm, false, e.what());
    }
    return agree_ok(comm, true, "");
}

} // namespace dptrain
