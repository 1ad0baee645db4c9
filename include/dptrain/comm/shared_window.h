// An MPI-3 shared-memory window over a node: each rank owns a segment (any size, 0 too) and
// reads and writes its peers' directly. Not for: moving data between nodes (communicator.h).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

namespace dptrain {

class SharedWindow {
  public:
    // Collective over `node`. own_pages: segments start on their own pages, so the owner's first
    // touch places them (NUMA). An allocation MPI refuses is fatal: peers may wait in the
    // collective. With `what` and `fix` (a user's setting), too little room in the backing
    // directory (/dev/shm) is refused first, alike on every rank, as a UserError.
    SharedWindow(MPI_Comm node, size_t bytes, bool own_pages, const std::string& what = "", const std::string& fix = "");
    ~SharedWindow();  // collective over the node
    SharedWindow(const SharedWindow&) = delete;
    SharedWindow& operator=(const SharedWindow&) = delete;

    char* segment(int local_rank) const { return seg_[local_rank]; }
    int local_rank() const { return rank_; }
    int local_size() const { return size_; }
    // Writes before it are visible to every rank after it (a fence around a node barrier).
    void sync();

  private:
    void check_room(size_t bytes, const std::string& what, const std::string& fix) const;  // collective
    MPI_Comm node_;
    MPI_Win win_ = MPI_WIN_NULL;
    int rank_ = 0, size_ = 1;
    std::vector<char*> seg_;
};

} // namespace dptrain
