// The Prefetcher: reader threads that read the next batches of a rank's slices while the current
// step computes, into a ring of host buffers allocated once. Not for: knowing the backend's memory
// beyond the host buffers it fills.
#pragma once

#include "dptrain/data/dataset.h"
#include "dptrain/data/sampler.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace dptrain {

struct Batch {
    long step = -1;
    int micro = 0;     // --grad-accum: which micro-batch of the step (0 .. accum - 1)
    int n = 0;         // samples this rank holds
    int global_n = 0;  // samples in the global batch (the loss is averaged over these)
    std::vector<float> x;  // (max_rows, floats_per_sample)
    std::vector<int> y;    // (max_rows, ints_per_sample)
};

// Reader threads that fill a ring of `depth` Batch slots for steps first_step, first_step+1,
// ..., end_step-1; next() hands them out in step order. With K readers, reader k reads the steps
// k, k+K, k+2K, ... after first_step, each through its own Dataset, so K reads are in flight
// (depth is raised to K when smaller). Buffers are allocated once. A read error is rethrown by
// next() when the step it belongs to is due.
// With accumulation a reader that finds the ring full sleeps until a whole step's micro-batches
// are free, and release() wakes it only then: one wake a step, not one a micro-batch (a futex
// wake cost 9-14 us here, on the training thread, and put the reader on a core a rank computes on).
class Prefetcher {
  public:
    // The ring's slots for --prefetch steps ahead: `prefetch` steps of `accum` micro-batches each,
    // at least one a reader. The trainer, its start-up table and the memory plan all count so.
    static int slots_for(int prefetch, int accum, int readers) { return std::max(prefetch * accum, readers); }

    // fail_step >= 0: the read for that step fails with an injected I/O error (--inject-fault).
    // in_caller: no reader thread; next() reads the batch itself (collective reads, which every
    // rank must issue from the thread that runs the step's other collectives).
    // slow_from >= 0: from that step on, each read takes 20 ms longer (--inject-fault slow-read).
    // accum > 1 (--grad-accum): each step is `accum` micro-batches, handed out in turn; micro-batch
    // k of rank r is part k * world + r of world * accum of the step's global batch (so the step
    // reads what one rank with the whole global batch would). Steps are counted as before.
    Prefetcher(std::vector<Dataset*> readers, Sampler& sampler, int rank, int world, int max_rows, int depth,
               long first_step, long end_step, long fail_step = -1, bool in_caller = false, long slow_from = -1,
               int accum = 1);
    Prefetcher(Dataset& shards, Sampler& sampler, int rank, int world, int max_rows, int depth, long first_step,
               long end_step, long fail_step = -1)
        : Prefetcher(std::vector<Dataset*>{&shards}, sampler, rank, world, max_rows, depth, first_step, end_step,
                     fail_step) {}
    ~Prefetcher();
    // Blocks until the batch of the next step is ready; the wait is added to wait_seconds().
    const Batch& next();
    // The batch after the one next() returned, when the reader has it ready; null otherwise (and
    // always with in_caller). Never waits. It stays valid and unchanged until after the release()
    // of the next() that returns it: for starting its copy to a GPU during the current step.
    const Batch* peek();
    // Hands the slot returned by next() back to the reader.
    void release();
    // The ring's buffers (x and y of every slot), allocated once: for page-locking them when the
    // batches go on to a GPU.
    std::vector<std::pair<void*, size_t>> buffers();
    double take_wait_seconds();

  private:
    void run(int reader);
    void read_batch(Dataset& data, long k, std::vector<long>& idx);
    std::vector<Dataset*> readers_;
    Sampler& sampler_;
    int rank_, world_, accum_;
    long first_, end_, fail_step_, slow_from_;  // first_, end_: micro-batches
    std::vector<Batch> slots_;
    std::vector<std::vector<long>> idx_;  // per reader

    std::vector<long> ready_;             // per slot: the micro-batch (counted from first_) it holds, -1 none
    std::mutex mu_;
    std::condition_variable cv_;
    long consumed_ = 0;  // batches, counted from first_step
    long wake_at_;       // release() notifies the readers when consumed_ reaches this (none waits: max)
    bool stop_ = false;
    long error_at_ = -1;  // the batch whose read failed
    std::exception_ptr error_;
    double wait_ = 0.0;
    bool in_caller_ = false;
    std::vector<std::thread> threads_;
};

} // namespace dptrain
