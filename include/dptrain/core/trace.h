// --trace: a Chrome trace (JSON, opens in Perfetto or chrome://tracing) of every step's phases on
// this rank, with each bucket's all-reduce on its own track. Events go into buffers allocated
// when tracing starts; recording is two clock reads and a store, and nothing allocates while
// training. `dptrain-report trace` merges the ranks' files into one with a track per rank.
// Not for: metrics over intervals (metrics.h).
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace dptrain {

class Tracer {
  public:
    // capacity: events kept per track; later events are counted as dropped.
    void enable(size_t capacity);
    bool on() const { return on_; }
    size_t dropped() const;  // events left out: their track's buffer was full
    // Main-thread phases: closes the phase in progress (if any) and opens `name` for `step`.
    void mark(const char* name, long step);
    void close();  // closes the phase in progress
    // A finished interval on the communication track (thread-safe).
    void comm(const char* name, long step, double t0, double t1, size_t bytes, const char* algo);
    // The time (now_seconds()) the trace's timestamps count from; without one, its first event.
    void set_origin(double t) { origin_ = t; }
    // Writes the trace; every rank writes its own file. Throws UserError when it cannot.
    void write(const std::string& path, int rank, const std::string& host) const;
    // trace.json -> trace-rank00003.json; a FILE without an extension gets ".json" after the rank.
    // A run resumed from step S > 0 writes trace-from0000000S-rank00003.json: a resumed run given the
    // same --trace (a requeued job's command line) keeps the earlier run's files, which its own
    // timeline (a clock origin of its own) could not be merged into.
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
    size_t dropped_main_ = 0;  // the main thread's
    size_t dropped_comm_ = 0;  // under mu_
    std::vector<Event> main_, comm_;
    const char* open_ = nullptr;
    long open_step_ = 0;
    double open_t_ = 0;
    double origin_ = -1;  // < 0: none set
    mutable std::mutex mu_;  // comm_ (the communication thread appends)
};

} // namespace dptrain
