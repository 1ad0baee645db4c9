// SharedWindow: one passive-target epoch for the window's lifetime, so MPI_Win_sync orders memory.
// Not for: what goes in it (allreduce.cpp, shards).
#include "dptrain/comm/shared_window.h"

#include "dptrain/core/check.h"
#include "dptrain/core/error.h"
#include "dptrain/core/files.h"

#include <unistd.h>

#include <algorithm>

namespace dptrain {

SharedWindow::SharedWindow(MPI_Comm node, size_t bytes, bool own_pages, const std::string& what, const std::string& fix)
    : node_(node) {
    MPI_CHECK(MPI_Comm_rank(node, &rank_));
    MPI_CHECK(MPI_Comm_size(node, &size_));
    if (!what.empty()) check_room(bytes, what, fix);
    MPI_Info info = MPI_INFO_NULL;
    if (own_pages) {
        // "Non-contiguous" lets Open MPI place each rank's segment in pages of its own.
        MPI_CHECK(MPI_Info_create(&info));
        MPI_CHECK(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
    }
    void* base = nullptr;
    int rc = MPI_Win_allocate_shared((MPI_Aint)bytes, 1, info, node, &base, &win_);
    if (info != MPI_INFO_NULL) MPI_CHECK(MPI_Info_free(&info));
    if (rc != MPI_SUCCESS && !what.empty())
        fatal(strfmt("%s: could not be allocated in node-shared memory (%s); %s", what.c_str(), mpi_error_text(rc).c_str(),
                     fix.c_str()),
              2);  // 2: a user's setting
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

// Open MPI's backing directory as it resolved it (any source), through MPI_T; "" elsewhere.
static std::string backing_directory() {
    // At the process's own thread level: Open MPI adopts MPI_T's, and SINGLE stopped the comm
    // thread from calling MPI.
    int level = MPI_THREAD_SINGLE, provided = 0, index = 0, count = 0;
    MPI_CHECK(MPI_Query_thread(&level));
    if (MPI_T_init_thread(level, &provided) != MPI_SUCCESS) return "";
    std::string dir;
    MPI_T_cvar_handle h;
    if (MPI_T_cvar_get_index("osc_sm_backing_directory", &index) == MPI_SUCCESS &&
        MPI_T_cvar_handle_alloc(index, nullptr, &h, &count) == MPI_SUCCESS) {
        std::string buf((size_t)std::max(count, 1) + 1, '\0');
        if (MPI_T_cvar_read(h, buf.data()) == MPI_SUCCESS) dir = buf.c_str();
        MPI_T_cvar_handle_free(&h);
    }
    MPI_T_finalize();
    return dir;
}

// Local rank 0 decides for the node, so a refusal reaches every rank's agreement instead of the
// allocation failing on one rank while the others wait.
// Why: docs/NOTES.md, "Note [node window room]".
void SharedWindow::check_room(size_t bytes, const std::string& what, const std::string& fix) const {
    const std::string dir = backing_directory();
    unsigned long long need = bytes, room = 0;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &need, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, node_));
    need += (unsigned long long)size_ * 8192;  // page rounding and the window's state
    // Unknown (none named, or unwritable so Open MPI passes it over): no refusal.
    if (rank_ == 0) {
        const double free = dir.empty() || ::access(dir.c_str(), W_OK) != 0 ? -1 : free_bytes(dir);
        room = free >= 0 ? (unsigned long long)free : ~0ull;
    }
    MPI_CHECK(MPI_Bcast(&room, 1, MPI_UNSIGNED_LONG_LONG, 0, node_));
    const double MiB = 1048576.0;
    if (room < need)
        throw UserError(strfmt("%s: does not fit in node-shared memory: %s has %.1f MiB free, this node's %d rank%s "
                               "need %.1f MiB; %s",
                               what.c_str(), dir.c_str(), (double)room / MiB, size_, size_ == 1 ? "" : "s",
                               (double)need / MiB, fix.c_str()));
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
