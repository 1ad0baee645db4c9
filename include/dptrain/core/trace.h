// --trace: this rank's step phases and bucket all-reduces as a Chrome trace. Buffers are allocated
// at enable(), so recording never allocates while training. Not for: metrics (metrics.h).
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace dptrain {

class Tracer {
  public:
    // capacity: per track; later events are counted as dropped.
    void enable(size_t capacity);
    bool on() const { return on_; }
    size_t dropped() const;
    // Main thread: closes the phase in progress and opens `name`.
    void mark(const char* name, long step);
    void close();
    // Thread-safe: the communication thread calls it.
    void comm(const char* name, long step, double t0, double t1, size_t bytes, const char* algo);
    // Default: the first event.
    void set_origin(double t) { origin_ = t; }
    void write(const std::string& path, int rank, const std::string& host) const;
    // trace.json -> trace-rank00003.json. A resumed run adds -from0000000S, so a requeued job's
    // same --trace keeps the earlier files, whose clock origin its own cannot merge with.
    static std::string rank_path(const std::string& path, int rank, long first_step = 0);

  private:
    struct Event {
        const char* name;
        const char* algo;
        long step;
        double t0, t1;
        size_t bytes;
    };
    bool on_ = false;
    size_t cap_ = 0;
    size_t dropped_main_ = 0;
    size_t dropped_comm_ = 0;  // under mu_
    std::vector<Event> main_, comm_;
    const char* open_ = nullptr;
    long open_step_ = 0;
    double open_t_ = 0;
    double origin_ = -1;  // < 0: none set
    mutable std::mutex mu_;  // comm_: the communication thread appends
};

} // namespace dptrain
