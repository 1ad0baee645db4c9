// SharedWindow: MPI_Win_allocate_shared, each peer's segment found once with
// MPI_Win_shared_query, and one passive-target epoch for the window's lifetime so that
// MPI_Win_sync orders memory.
#include "dptrain/comm/shared_window.h"

#include "dptrain/core/check.h"
#include "dptrain/core/error.h"

namespace dptrain {

SharedWindow::SharedWindow(MPI_Comm node, size_t bytes, bool own_pages, const std::string& on_failure)
    : node_(node) {
    MPI_CHECK(MPI_Comm_rank(node, &rank_));
    MPI_CHECK(MPI_Comm_size(node, &size_));
    MPI_Info info = MPI_INFO_NULL;
    if (own_pages) {
        // "Non-contiguous" lets Open MPI place each rank's segment in pages of its own.
        MPI_CHECK(MPI_Info_create(&info));
        MPI_CHECK(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
    }
    void* base = nullptr;
    int rc = MPI_Win_allocate_shared((MPI_Aint)bytes, 1, info, node, &base, &win_);
    if (info != MPI_INFO_NULL) MPI_CHECK(MPI_Info_free(&info));
    if (rc != MPI_SUCCESS && !on_failure.empty()) {
        win_ = MPI_WIN_NULL;
        throw UserError(on_failure);
    }
    if (rc != MPI_SUCCESS)
        check_failed("MPI", mpi_error_text(rc), "MPI_Win_allocate_shared(bytes, 1, info, node, &base, &win_)", __FILE__,
                     __LINE__);
    seg_.resize(size_);
    for (int q = 0; q < size_; ++q) {
        MPI_Aint qbytes = 0;
        int unit = 0;
        void* p = nullptr;
        MPI_CHECK(MPI_Win_shared_query(win_, q, &qbytes, &unit, &p));
        seg_[q] = static_cast<char*>(p);
    }
    MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
}

SharedWindow::~SharedWindow() {
    if (win_ == MPI_WIN_NULL) return;
    MPI_CHECK(MPI_Win_unlock_all(win_));
    MPI_CHECK(MPI_Win_free(&win_));
}

void SharedWindow::sync() {
    MPI_CHECK(MPI_Win_sync(win_));
    MPI_CHECK(MPI_Barrier(node_));
    MPI_CHECK(MPI_Win_sync(win_));
}

} // namespace dptrain
