// Memory shared by the ranks of one node: an MPI-3 shared-memory window in which each rank owns a
// segment (of any size, 0 too) and reads and writes every peer's segment directly. The one wrapper
// of such a window: the hierarchical all-reduce keeps the gradients in it, and --io memory the
// node's copy of the training split.
// Not for: moving data between nodes (communicator.h), or deciding what goes in it.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

namespace dptrain {

class SharedWindow {
  public:
    // Collective over `node`. This rank's segment holds `bytes`. own_pages: each segment starts on
    // a page of its own, so its owner's first touch places it in that rank's memory (NUMA); else
    // the segments are contiguous. An allocation MPI refuses ends the job (fatal), unless
    // `on_failure` is given: then it throws UserError(on_failure), as a user's setting asked for
    // more shared memory than the node has.
    SharedWindow(MPI_Comm node, size_t bytes, bool own_pages, const std::string& on_failure = "");
    ~SharedWindow();  // collective over the node
    SharedWindow(const SharedWindow&) = delete;
    SharedWindow& operator=(const SharedWindow&) = delete;

    char* segment(int local_rank) const { return seg_[local_rank]; }
    int local_rank() const { return rank_; }
    int local_size() const { return size_; }
    // Makes every rank's writes before it visible to every rank after it (memory barrier around
    // a barrier of the node).
    void sync();

  private:
    MPI_Comm node_;
    MPI_Win win_ = MPI_WIN_NULL;
    int rank_ = 0, size_ = 1;
    std::vector<char*> seg_;
};

} // namespace dptrain
