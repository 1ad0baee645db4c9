// cpp-httplib's server with a deadline per whole request (httplib's is per read, so a byte-a-time
// client held a thread for good) and a way to see a client hung up. Not for: routes, the API or
// its bodies (serve.cpp, serve_api.cpp).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <type_traits>
#include <utility>

namespace dptrain {

// TaskQueue::enqueue returns bool from cpp-httplib 0.15 (false: refused), void before.
using EnqueueResult = decltype(std::declval<httplib::TaskQueue&>().enqueue(std::function<void()>()));

// httplib's thread pool, counting the connections that wait for a thread: a connection that waits
// for its next request gives its thread up to them ("parks") instead of holding it.
class ConnectionQueue : public httplib::TaskQueue {
  public:
    explicit ConnectionQueue(size_t threads) : pool_(threads) {}
    EnqueueResult enqueue(std::function<void()> fn) override;
    void shutdown() override { pool_.shutdown(); }
    bool others_waiting() const { return waiting_.load() > 0; }

  private:
    std::atomic<long> waiting_{0};
    httplib::ThreadPool pool_;
};

class DeadlineServer : public httplib::Server {
  public:
    // Whole request within request_seconds of its first byte, headers within 2 s; a new
    // connection's first byte within 1 s.
    explicit DeadlineServer(double request_seconds, double keep_alive_seconds = 5);
    // Connection threads. An idle connection (before a request) holds none while others wait:
    // 200 idle connections kept /readyz waiting 1.95 s with 80 threads.
    void set_threads(size_t n);

    // All static, for the current handler's thread.
    // The request arrived whole: its deadline no longer applies to the answer.
    static void request_read();
    static bool client_gone();
    // From the pre-routing handler. Answers to unparsed or late requests close the connection.
    // chunked: the body's size lines are checked as they are read.
    static void request_routed(bool chunked);
    static bool request_unparsed();
    // A chunk size line that is not 1..15 hexadecimal digits (httplib read "-5" as a size near
    // 2^64 and waited for the read timeout).
    static bool request_bad_chunk();
    static bool request_timed_out();
    // The connection ends after this answer (a body left unread on it).
    static void close_after();

  private:
    using Clock = std::chrono::steady_clock;
    // A connection between requests: the requests it may still send, and until when it may wait.
    struct Idle {
        size_t left;
        Clock::time_point until;
    };
    enum class Next { request, park, close };

    bool process_and_close_socket(socket_t sock) override;
    void serve_connection(socket_t sock, Idle idle);
    Next wait_for_request(socket_t sock, Clock::time_point until) const;

    const double request_seconds_, keep_alive_seconds_;
    ConnectionQueue* queue_ = nullptr;  // owned by httplib::Server while it listens
};

} // namespace dptrain
