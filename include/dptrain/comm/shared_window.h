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
    // the segments are contiguous. An allocation MPI refuses ends the job (fatal: the node's other
    // ranks may be left waiting in the collective allocation). With `what` (the allocation follows
    // from a user's setting: "--io memory: the rows of DIR/train (1.20 GiB)") and `fix`, a node
    // whose backing directory (/dev/shm, or Open MPI's osc_sm_backing_directory) has too little
    // room for all its ranks' segments is refused first, alike on all of them, with a UserError
    // naming both, the room and the need; a refusal by MPI after that ends the job with them.
    SharedWindow(MPI_Comm node, size_t bytes, bool own_pages, const std::string& what = "", const std::string& fix = "");
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
    void check_room(size_t bytes, const std::string& what, const std::string& fix) const;  // collective over the node
    MPI_Comm node_;
    MPI_Win win_ = MPI_WIN_NULL;
    int rank_ = 0, size_ = 1;
    std::vector<char*> seg_;
};

} // namespace dptrain
