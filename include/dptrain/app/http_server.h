// cpp-httplib's server with a deadline on each request as a whole, and a way for a handler to see
// that its client hung up. httplib's read timeout applies to each read: a client that sends its
// request a byte at a time, each under the timeout, held a connection thread for good, and enough
// such clients held every thread, so that the probes went unanswered. Not for: routes, the API or
// its bodies (serve.cpp, serve_api.cpp).
#pragma once

#include <httplib.h>

namespace dptrain {

class DeadlineServer : public httplib::Server {
  public:
    // A request (its line, headers and body) must arrive within this many seconds of its first
    // byte, its line and headers within 2 s of it; an idle kept-alive connection is closed after
    // keep_alive_seconds, a new one that sends nothing after 1 s.
    explicit DeadlineServer(double request_seconds, double keep_alive_seconds = 5);

    // Called on a handler's thread: the request being handled has arrived whole (its deadline no
    // longer applies while the answer is computed and written).
    static void request_read();
    // Called on a handler's thread: whether the client has closed its side of the connection
    // (a client that stops waiting for an answer it has not yet been sent).
    static bool client_gone();
    // Called by the pre-routing handler: the request was parsed. An error answer for one that was
    // not (request_unparsed) or whose deadline passed (request_timed_out) closes the connection.
    static void request_routed();
    static bool request_unparsed();
    static bool request_timed_out();
    // Called by a handler: the connection ends after this answer (a body left unread on it).
    static void close_after();

  private:
    bool process_and_close_socket(socket_t sock) override;
    bool wait_for_request(socket_t sock, bool first) const;  // first: a new connection's first request

    const double request_seconds_, keep_alive_seconds_;
};

} // namespace dptrain
