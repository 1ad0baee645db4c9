// Reader threads that read the next batches while the step computes, into a ring of host buffers
// allocated once. Not for: the backend's memory beyond those buffers.
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
    int micro = 0;     // --grad-accum: 0 .. accum - 1
    int n = 0;         // this rank's samples
    int global_n = 0;  // the loss averages over these
    std::vector<float> x;  // (max_rows, floats_per_sample)
    std::vector<int> y;    // (max_rows, ints_per_sample)
};

// Reader k of K reads steps k, k+K, ... through its own Dataset; next() hands them out in order
// and rethrows a read error when its step is due. With accumulation a reader that finds the ring
// full is woken once a whole step is free, not per micro-batch: a futex wake costs the training
// thread (docs/BENCHMARKS.md, "The fixed costs of a micro-batch").
class Prefetcher {
  public:
    // The trainer, its start-up table and the memory plan all count slots so.
    static int slots_for(int prefetch, int accum, int readers) { return std::max(prefetch * accum, readers); }

    // fail_step, slow_from >= 0: --inject-fault. in_caller: next() reads itself, since collective
    // reads must come from the thread of the step's other collectives. accum: micro-batch k of
    // rank r is part k * world + r of the global batch, so the step reads what one rank would.
    Prefetcher(std::vector<Dataset*> readers, Sampler& sampler, int rank, int world, int max_rows, int depth,
               long first_step, long end_step, long fail_step = -1, bool in_caller = false, long slow_from = -1,
               int accum = 1);
    Prefetcher(Dataset& shards, Sampler& sampler, int rank, int world, int max_rows, int depth, long first_step,
               long end_step, long fail_step = -1)
        : Prefetcher(std::vector<Dataset*>{&shards}, sampler, rank, world, max_rows, depth, first_step, end_step,
                     fail_step) {}
    ~Prefetcher();
    // Blocks; the wait is counted.
    const Batch& next();
    // The following batch if ready (never with in_caller); never waits. Valid until the release()
    // after the next() that returns it: for starting its GPU copy during this step.
    const Batch* peek();
    void release();  // the slot next() returned
    // For page-locking them when batches go to a GPU.
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

    std::vector<long> ready_;             // per slot: its micro-batch from first_, -1 none
    std::mutex mu_;
    std::condition_variable cv_;
    long consumed_ = 0;  // from first_step
    long wake_at_;       // release() notifies at this consumed_ (none waits: max)
    bool stop_ = false;
    long error_at_ = -1;
    std::exception_ptr error_;
    double wait_ = 0.0;
    bool in_caller_ = false;
    std::vector<std::thread> threads_;
};

} // namespace dptrain
