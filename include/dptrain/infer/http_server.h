// cpp-httplib's server with a deadline per whole request (httplib's is per read, so a byte-a-time
// client held a thread for good) and a way to see a client hung up. Not for: routes, the API or
// its bodies (serve.cpp, serve_api.cpp).
#pragma once

#include <httplib.h>

namespace dptrain {

class DeadlineServer : public httplib::Server {
  public:
    // Whole request within request_seconds of its first byte, headers within 2 s; a new
    // connection's first byte within 1 s.
    explicit DeadlineServer(double request_seconds, double keep_alive_seconds = 5);

    // All static, for the current handler's thread.
    // The request arrived whole: its deadline no longer applies to the answer.
    static void request_read();
    static bool client_gone();
    // From the pre-routing handler. Answers to unparsed or late requests close the connection.
    static void request_routed();
    static bool request_unparsed();
    static bool request_timed_out();
    // The connection ends after this answer (a body left unread on it).
    static void close_after();

  private:
    bool process_and_close_socket(socket_t sock) override;
    bool wait_for_request(socket_t sock, bool first) const;

    const double request_seconds_, keep_alive_seconds_;
};

} // namespace dptrain
