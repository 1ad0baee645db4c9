// cuda::InputSlots (operands.h): the batches' two device slots, the input stream and the
// events that order them against the compute stream.
#include "operands.h"

namespace dptrain::cuda {

InputSlots::InputSlots(const size_t* widths, int parts, int max_rows) : parts_(parts), max_rows_(max_rows) {
    CUDA_REQUIRE(parts > 0 && parts <= kMaxParts && max_rows > 0);
    for (int q = 0; q < parts; ++q) width_[q] = widths[q];
    for (int s = 0; s < 2; ++s) {
        for (int q = 0; q < parts; ++q) CUDA_CHECK(cudaMalloc(&dev_[s][q], (size_t)max_rows * widths[q]));
        CUDA_CHECK(cudaEventCreateWithFlags(&copied_[s], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&released_[s], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
}

InputSlots::~InputSlots() {
    if (copy_) cudaStreamSynchronize(copy_);
    for (int s = 0; s < 2; ++s) {
        for (int q = 0; q < parts_; ++q)
            if (dev_[s][q]) cudaFree(dev_[s][q]);
        if (copied_[s]) cudaEventDestroy(copied_[s]);
        if (released_[s]) cudaEventDestroy(released_[s]);
    }
    if (copy_) cudaStreamDestroy(copy_);
}

void InputSlots::stage(const Part* parts, int rows) {
    if (rows <= 0 || rows > max_rows_) return;  // forward refuses it (or has nothing to copy)
    const int s = 1 - cur_;  // a batch staged there and never taken is overwritten in stream order
    CUDA_CHECK(cudaStreamWaitEvent(copy_, released_[s], 0));  // a no-op before the first record
    copy(s, parts, rows, copy_);
    CUDA_CHECK(cudaEventRecord(copied_[s], copy_));
    staged_ = s;
    staged_rows_ = rows;
    for (int q = 0; q < parts_; ++q) staged_parts_[q] = parts[q];
}

void* const* InputSlots::take(const Part* parts, int rows, cudaStream_t compute) {
    CUDA_REQUIRE(rows >= 0 && rows <= max_rows_);
    bool hit = staged_ >= 0 && rows == staged_rows_;
    for (int q = 0; hit && q < parts_; ++q)
        hit = parts[q].src == staged_parts_[q].src && parts[q].pitch == staged_parts_[q].pitch;
    if (!hit) {  // into the current slot, behind its earlier uses on `compute`; the staged one stays
        copy(cur_, parts, rows, compute);
        return dev_[cur_];
    }
    CUDA_CHECK(cudaStreamWaitEvent(compute, copied_[staged_], 0));
    // Every use of the current slot's batch is queued on `compute` before this point.
    CUDA_CHECK(cudaEventRecord(released_[cur_], compute));
    cur_ = staged_;
    staged_ = -1;
    ++staged_hits_;
    return dev_[cur_];
}

void InputSlots::drain() {
    CUDA_CHECK(cudaStreamSynchronize(copy_));
    staged_ = -1;
}

void InputSlots::copy(int s, const Part* parts, int rows, cudaStream_t stream) {
    for (int q = 0; q < parts_ && rows > 0; ++q)
        CUDA_CHECK(cudaMemcpy2DAsync(dev_[s][q], width_[q], parts[q].src, parts[q].pitch, width_[q], (size_t)rows,
                                     cudaMemcpyHostToDevice, stream));
}

} // namespace dptrain::cuda
