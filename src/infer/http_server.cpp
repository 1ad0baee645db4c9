// DeadlineServer (http_server.h): httplib's request handling over our own stream, whose reads share
// one deadline per request. Not for: routes or the API (serve.cpp).
#include "dptrain/infer/http_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

namespace dptrain {

namespace {

using Clock = std::chrono::steady_clock;

// A connection holds a pool thread while it is read, so silent or byte-a-time clients starved the
// probes. Why: docs/NOTES.md, "Note [request deadlines]".
constexpr double kHeaderSeconds = 2.0, kFirstByteSeconds = 1.0;

// Waits up to ms for events on sock; false on a timeout or an error.
bool wait_for(socket_t sock, short events, long ms) {
    if (ms <= 0) return false;
    pollfd p{sock, events, 0};
    int r;
    do {
        r = ::poll(&p, 1, (int)std::min<long>(ms, 1 << 30));
    } while (r < 0 && errno == EINTR);
    return r > 0;
}

// RFC 9112's chunk-size: 1*HEXDIG, then extensions after ';' (15 digits at most here).
bool chunk_size(const std::string& line, uint64_t* size) {
    size_t b = 0, e = line.find(';');
    if (e == std::string::npos) e = line.size();
    while (e > b && (line[e - 1] == '\r' || line[e - 1] == ' ' || line[e - 1] == '\t')) --e;
    while (b < e && (line[b] == ' ' || line[b] == '\t')) ++b;
    if (e == b || e - b > 15) return false;
    *size = 0;
    for (size_t i = b; i < e; ++i) {
        const int d = std::isdigit((unsigned char)line[i]) ? line[i] - '0'
                      : std::isxdigit((unsigned char)line[i]) ? std::tolower((unsigned char)line[i]) - 'a' + 10
                                                              : -1;
        if (d < 0) return false;
        *size = *size * 16 + (uint64_t)d;
    }
    return true;
}

// Buffered, since httplib reads a request line a byte at a time. The deadline is armed at a
// request's first read and cleared once it has arrived or been answered.
class RequestStream : public httplib::Stream {
  public:
    RequestStream(socket_t sock, double request_seconds, long write_ms)
        : sock_(sock), request_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(request_seconds))),
          write_ms_(write_ms) {}

    bool is_readable() const override { return pos_ < end_ || wait_for(sock_, POLLIN, left_ms()); }
    bool is_writable() const override { return wait_for(sock_, POLLOUT, write_ms_); }

    ssize_t read(char* ptr, size_t size) override {
        if (bad_chunk_) return -1;
        if (pos_ == end_) {
            if (!armed_) {
                // Headers within kHeaderSeconds; body_next() then gives the body the rest.
                armed_at_ = Clock::now();
                deadline_ = armed_at_ + std::min(request_, header_);
                armed_ = true;
            }
            if (!wait_for(sock_, POLLIN, left_ms())) {
                // poll counts whole milliseconds: a timeout may end a moment early.
                expired_ = left_ms() < 5;
                return -1;
            }
            if (size >= sizeof buf_) {  // large body reads: no copy
                const ssize_t n = receive(ptr, size);
                if (n > 0) watch(ptr, (size_t)n);
                return n;
            }
            const ssize_t n = receive(buf_, sizeof buf_);
            if (n <= 0) return n;
            pos_ = 0;
            end_ = (size_t)n;
        }
        const size_t n = std::min(size, end_ - pos_);
        std::memcpy(ptr, buf_ + pos_, n);
        pos_ += n;
        watch(ptr, n);
        return (ssize_t)n;
    }
    ssize_t write(const char* ptr, size_t size) override {
        if (!is_writable()) return -1;
        ssize_t n;
        do {
            n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        return n;
    }
    void get_remote_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
    void get_local_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
    socket_t socket() const override { return sock_; }

    void disarm() {
        armed_ = expired_ = bad_chunk_ = false;
        chunks_ = Chunks::off;
    }
    void body_next(bool chunked) {
        if (armed_) deadline_ = armed_at_ + request_;
        chunks_ = chunked ? Chunks::size : Chunks::off;
        line_.clear();
    }
    bool bad_chunk() const { return bad_chunk_; }
    bool timed_out() const { return armed_ && (expired_ || Clock::now() >= deadline_); }
    bool routed = false;
    bool close = false;
    bool buffered() const { return pos_ < end_; }  // a pipelined next request
    // Bytes sent ahead (a next request) mean it has not closed.
    bool peer_closed() const {
        if (pos_ < end_) return false;
        pollfd p{sock_, POLLIN | POLLRDHUP, 0};
        if (::poll(&p, 1, 0) <= 0) return false;
        if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
        char c;
        return ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }

  private:
    // Follows a chunked body's framing over the bytes handed to httplib: size line, then the
    // chunk and its CRLF; the last chunk's trailer is httplib's alone.
    void watch(const char* p, size_t n) {
        while (n > 0 && chunks_ != Chunks::off) {
            if (chunks_ == Chunks::data) {
                const size_t k = (size_t)std::min<uint64_t>(chunk_left_, n);
                chunk_left_ -= k, p += k, n -= k;
                if (chunk_left_ == 0) chunks_ = Chunks::size;
                continue;
            }
            const char c = *p++;
            --n;
            if (c != '\n') {
                if (line_.size() < 256) line_.push_back(c);
                continue;
            }
            uint64_t size = 0;
            bad_chunk_ = !chunk_size(line_, &size);
            line_.clear();
            if (bad_chunk_ || size == 0) chunks_ = Chunks::off;
            else chunks_ = Chunks::data, chunk_left_ = size + 2;
        }
    }
    long left_ms() const {
        if (!armed_) return (long)std::chrono::duration_cast<std::chrono::milliseconds>(request_).count();
        return (long)std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    }
    ssize_t receive(char* dst, size_t size) {
        ssize_t n;
        do {
            n = ::recv(sock_, dst, size, 0);
        } while (n < 0 && errno == EINTR);
        return n;
    }
    void address(bool peer, std::string& ip, int& port) const {
        sockaddr_storage a{};
        socklen_t len = sizeof a;
        const int r = peer ? ::getpeername(sock_, reinterpret_cast<sockaddr*>(&a), &len)
                           : ::getsockname(sock_, reinterpret_cast<sockaddr*>(&a), &len);
        char host[NI_MAXHOST], serv[NI_MAXSERV];
        if (r == 0 && ::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
            ip = host;
            port = std::atoi(serv);
        }
    }

    const socket_t sock_;
    const Clock::duration request_;
    const long write_ms_;
    bool armed_ = false, expired_ = false;
    Clock::time_point armed_at_, deadline_;
    const Clock::duration header_ =
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kHeaderSeconds));
    char buf_[4096];
    size_t pos_ = 0, end_ = 0;
    enum class Chunks { off, size, data } chunks_ = Chunks::off;
    bool bad_chunk_ = false;
    uint64_t chunk_left_ = 0;
    std::string line_;
};

thread_local RequestStream* t_stream = nullptr;  // handlers run on the connection's thread

} // namespace

DeadlineServer::DeadlineServer(double request_seconds, double keep_alive_seconds)
    : request_seconds_(request_seconds), keep_alive_seconds_(keep_alive_seconds) {}

void DeadlineServer::request_read() {
    if (t_stream) t_stream->disarm();
}

bool DeadlineServer::client_gone() { return t_stream && t_stream->peer_closed(); }

void DeadlineServer::request_routed(bool chunked) {
    if (!t_stream) return;
    t_stream->routed = true;
    t_stream->body_next(chunked);
}

bool DeadlineServer::request_bad_chunk() { return t_stream && t_stream->bad_chunk(); }

bool DeadlineServer::request_unparsed() { return t_stream && !t_stream->routed; }

void DeadlineServer::close_after() {
    if (t_stream) t_stream->close = true;
}

bool DeadlineServer::request_timed_out() { return t_stream && t_stream->timed_out(); }

// A template, so that only the branch of the httplib built against is compiled.
template <typename Pool>
auto pool_enqueue(Pool& pool, std::function<void()> job, std::atomic<long>& waiting) {
    if constexpr (std::is_same_v<decltype(pool.enqueue(std::move(job))), bool>) {
        const bool taken = pool.enqueue(std::move(job));
        if (!taken) --waiting;
        return taken;
    } else {
        pool.enqueue(std::move(job));
    }
}

EnqueueResult ConnectionQueue::enqueue(std::function<void()> fn) {
    ++waiting_;
    return pool_enqueue(pool_, [this, fn = std::move(fn)] {
        --waiting_;
        fn();
    }, waiting_);
}

void DeadlineServer::set_threads(size_t n) {
    new_task_queue = [this, n] {
        queue_ = new ConnectionQueue(n);
        return queue_;
    };
}

// In 10 ms slices, so a stopping server closes its idle connections at once, and a connection
// waiting for a thread gets this one within 10 ms ("Note [request deadlines]").
DeadlineServer::Next DeadlineServer::wait_for_request(socket_t sock, Clock::time_point until) const {
    while (svr_sock_ != INVALID_SOCKET) {
        if (wait_for(sock, POLLIN, 10)) return Next::request;
        if (Clock::now() >= until) return Next::close;
        if (queue_ && queue_->others_waiting()) return Next::park;
    }
    return Next::close;
}

static Clock::time_point after(double seconds) {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

bool DeadlineServer::process_and_close_socket(socket_t sock) {
    serve_connection(sock, Idle{keep_alive_max_count_, after(std::min(keep_alive_seconds_, kFirstByteSeconds))});
    return true;
}

// httplib's keep-alive loop, on our stream; between requests the connection may park: it goes to
// the back of the queue with what it has left, and this thread takes the next connection.
void DeadlineServer::serve_connection(socket_t sock, Idle idle) {
    RequestStream strm(sock, request_seconds_, (long)write_timeout_sec_ * 1000 + (long)write_timeout_usec_ / 1000);
    t_stream = &strm;
    for (; idle.left > 0; --idle.left) {
        const Next next = strm.buffered() ? Next::request : wait_for_request(sock, idle.until);
        if (next == Next::park) {
            t_stream = nullptr;
            queue_->enqueue([this, sock, idle] { serve_connection(sock, idle); });
            return;
        }
        if (next == Next::close) break;
        bool closed = false;
        strm.routed = strm.close = false;
        const bool ok = process_request(strm, idle.left == 1, closed, nullptr);
        // After an unparsed or late request, what follows cannot be told from its rest: answering
        // it as requests would put answers and requests out of step. Close.
        const bool cut = !strm.routed || strm.timed_out() || strm.close;
        strm.disarm();  // answered
        if (!ok || closed || cut) break;
        idle.until = after(keep_alive_seconds_);
    }
    t_stream = nullptr;
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
}

} // namespace dptrain
