// dptrain serve: an HTTP server (cpp-httplib) with the OpenAI-style completions API over the
// completion engine, health probes, Prometheus metrics, and rollout: given a run's checkpoint
// directory it serves each newer complete checkpoint once the requests on the old one finish.
// Threads: the listener and its pool (one per connection), the decoding thread (the engine), the
// checkpoint watcher, and the signal thread (SIGTERM/SIGINT: stop taking requests, finish those in
// flight, stop). Not for: the API's rules and bodies (serve_api.cpp), decoding (completions.cpp) or
// watching the checkpoints (rollout.cpp).
#include "dptrain/app/serve.h"

#include "dptrain/app/http_server.h"
#include "dptrain/app/rollout.h"
#include "dptrain/app/serve_api.h"
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/device.h"
#include "dptrain/config/argv.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/io/checkpoint.h"

#include <boost/program_options.hpp>
#include <httplib.h>

#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <type_traits>

namespace po = boost::program_options;

namespace dptrain {

namespace {

// A handler's exception as a 500: cpp-httplib hands it over as std::exception_ptr from 0.11 (Debian
// 12), as std::exception& before (0.10, Ubuntu 22.04's); a template, so that only the branch of
// the version built against is compiled.
template <typename Server, typename Fail>
void on_exception(Server& http, Fail fail) {
    using Handler = typename Server::ExceptionHandler;
    if constexpr (std::is_invocable_v<Handler, const httplib::Request&, httplib::Response&, std::exception_ptr>) {
        http.set_exception_handler([fail](const httplib::Request&, httplib::Response& r, std::exception_ptr ep) {
            std::string what = "internal error";
            try {
                std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                what = std::string("internal error: ") + e.what();
            } catch (...) {
            }
            fail(r, what);
        });
    } else {
        http.set_exception_handler([fail](const httplib::Request&, httplib::Response& r, std::exception& e) {
            fail(r, std::string("internal error: ") + e.what());
        });
    }
}

// The server's connection threads: a decoding or waiting request holds one until it is answered.
constexpr int kMaxConnections = 512;

struct ServeOptions {
    std::string checkpoint, host, api_key, name, device = "cpu", precision = "fp32";
    int port = 8080, max_batch = 8, max_queue = 64, max_tokens = 512, threads = 1;
    long max_body = 1 << 20;
    double poll = 10, read_timeout = 10;
    bool log_requests = false;
};

ServeOptions parse(int argc, const char* const* argv, bool* help) {
    ServeOptions o;
    po::options_description d("dptrain serve: the OpenAI-style completions API over a GPT checkpoint", 100, 50);
    d.add_options()("help,h", "print this help")(
        "checkpoint", po::value(&o.checkpoint)->default_value(""),
        "a checkpoint file, or a run (or checkpoint) directory: its newest complete checkpoint, and each newer "
        "one as it appears")("host", po::value(&o.host)->default_value("127.0.0.1"),
                             "address to listen on (0.0.0.0: every interface)")(
        "port", po::value(&o.port)->default_value(8080), "port; 0 = any free one (the listening line names it)")(
        "max-batch", po::value(&o.max_batch)->default_value(8), "requests decoded together")(
        "device", po::value(&o.device)->default_value("cpu"),
        "where to decode: cpu | cuda (this host's first GPU) "
        "| auto (cuda when a GPU is visible, else cpu)")(
        "precision", po::value(&o.precision)->default_value("fp32"),
        "the weights decoding reads: fp32 | bf16 (rounded when a checkpoint loads: half the bytes a token reads, "
        "products and sums still fp32)")(
        "max-queue", po::value(&o.max_queue)->default_value(64),
        "requests waiting beyond those; more get 429 (--max-batch + --max-queue <= 504)")(
        "max-tokens", po::value(&o.max_tokens)->default_value(512), "the largest max_tokens a request may ask")(
        "max-body", po::value(&o.max_body)->default_value(1 << 20), "the largest request body in bytes; more get 413")(
        "api-key", po::value(&o.api_key)->default_value(""),
        "require \"Authorization: Bearer KEY\" on /v1/ (default: $DPTRAIN_API_KEY; unset: no key)")(
        "served-model-name", po::value(&o.name)->default_value("dptrain"), "the model's name in the API")(
        "poll-seconds", po::value(&o.poll)->default_value(10.0),
        "how often to look for a newer checkpoint in a directory; 0 = never")(
        "read-timeout", po::value(&o.read_timeout)->default_value(10.0),
        "seconds a client may take to send a whole request (its line, headers and body)")("threads", po::value(&o.threads)->default_value(1),
                                                          "compute threads of the model")(
        "log-requests", po::bool_switch(&o.log_requests), "one line per request on stderr");
    po::variables_map vm;
    try {
        po::store(parse_argv(argc, argv, d, "serve takes options alone"), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        throw UserError(std::string(e.what()) + "; see " + runnable("dptrain") + " serve --help");
    }
    *help = vm.count("help") > 0;
    if (*help) std::cout << d;
    if (o.api_key.empty() && std::getenv("DPTRAIN_API_KEY")) o.api_key = std::getenv("DPTRAIN_API_KEY");
    return o;
}

void validate(const ServeOptions& o) {
    if (o.checkpoint.empty()) throw UserError("serve: give the model with --checkpoint PATH (a file or a run directory)");
    if (o.port < 0 || o.port > 65535) throw UserError(strfmt("serve: --port %d must be in 0..65535", o.port));
    if (o.max_batch < 1 || o.max_batch > 256)
        throw UserError(strfmt("serve: --max-batch %d must be in 1..256", o.max_batch));
    // Each request decoding or waiting holds a connection thread until it is answered; the pool has
    // kMaxConnections of them, 8 kept for probes and refusals. A queue longer than the pool allowed
    // (once 100000) kept connections past it waiting for a thread, unseen and never refused.
    const int most = kMaxConnections - 8 - o.max_batch;
    if (o.max_queue < 0 || o.max_queue > most)
        throw UserError(strfmt("serve: --max-queue %d must be in 0..%d with --max-batch %d (%d requests at most, "
                               "decoding and waiting: a connection thread each)",
                               o.max_queue, most, o.max_batch, kMaxConnections - 8));
    if (o.max_tokens < 1) throw UserError(strfmt("serve: --max-tokens %d must be >= 1", o.max_tokens));
    if (o.max_body < 64) throw UserError(strfmt("serve: --max-body %ld must be >= 64 bytes", o.max_body));
    if (!(o.poll >= 0) || !std::isfinite(o.poll))
        throw UserError(strfmt("serve: --poll-seconds %g must be >= 0 and finite (0: never)", o.poll));
    if (!(o.read_timeout > 0) || !std::isfinite(o.read_timeout))
        throw UserError(strfmt("serve: --read-timeout %g must be positive and finite", o.read_timeout));
    if (o.threads < 1) throw UserError(strfmt("serve: --threads %d must be >= 1", o.threads));
    parse_device_kind(o.device);  // "--device 'x' is unknown; use ..." before the model loads
    parse_precision(o.precision);
}

struct Server {
    const ServeOptions& o;
    CompletionEngine& engine;
    ServeCounters counters;
    Histogram latency{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
    Histogram first_token{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
    std::atomic<bool> draining{false};
    // Completions taken whose response is not yet written (its content provider's release counts
    // it down, sent or not): a stop waits for them, since httplib ends chunked responses at stop.
    std::atomic<long> inflight{0};
    std::atomic<uint64_t> serial{0};
    long started = (long)std::time(nullptr);
    DeadlineServer http;  // each request whole within --read-timeout
    int listen_fd = -1;  // the listening socket, for listen_backlog()

    Server(const ServeOptions& o_, CompletionEngine& e) : o(o_), engine(e), http(o_.read_timeout) {
        // httplib's own options set SO_REUSEPORT, with which a second server binds the same port
        // and the kernel splits the connections between the two models, silently. SO_REUSEADDR
        // alone still lets a restarted server bind while the old connections linger in TIME_WAIT.
        http.set_socket_options([this](int sock) {
            const int yes = 1;
            setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
            listen_fd = sock;
        });
    }
    // The connections served at once: every slot and queue place, and a few for probes and refusals
    // (at most kMaxConnections: validate).
    size_t connections() const { return (size_t)o.max_batch + o.max_queue + 8; }
    // After the bind: httplib (Debian's build, a library) listens with a backlog of 5. A burst of
    // more clients connecting at once than that (32 in bench/serve_load.py) overflowed it, and each
    // dropped SYN cost its client the kernel's 1 s retransmission (p99 latency 1.06 s where p50 was
    // 0.09 s). listen() again on the socket sets a new backlog: as many connections as the pool
    // serves; the kernel caps it at net.core.somaxconn.
    void listen_backlog() {
        if (listen_fd < 0 || ::listen(listen_fd, (int)connections()) != 0)
            std::fprintf(stderr, "serve: warning: the listen backlog stays at 5 (%s): bursts of connections will wait\n",
                         listen_fd < 0 ? "no socket" : std::strerror(errno));
    }

    void count(int status) {
        std::lock_guard<std::mutex> lk(counters.mu);
        ++counters.by_status[status];
    }
    void fail(httplib::Response& res, int status, const std::string& message, const std::string& param = "") {
        res.status = status;
        res.set_content(error_body(status, message, param), "application/json");
    }
    void observe(const Completion& c) {
        latency.observe(c.finished_at - c.queued_at);
        if (c.first_token_at > 0) first_token.observe(c.first_token_at - c.queued_at);
    }

    // The body, read here rather than by httplib: its own read refuses a form-encoded body (what
    // `curl -d` sends) over 8 KiB, and would parse a multipart one into parts. Empty when it is
    // refused (res then holds the error).
    std::string read_body(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
        std::string body;
        if (req.is_multipart_form_data()) {
            fail(res, 415, "the body must be JSON (Content-Type: application/json), not multipart form data", "body");
            return "";
        }
        // httplib holds a body with a Content-Length to --max-body itself, but not a chunked one:
        // that one is held here, as it arrives.
        bool over = false;
        if (!reader([&](const char* data, size_t n) {
                if (body.size() + n > (size_t)o.max_body) return !(over = true);
                body.append(data, n);
                return true;
            })) {
            over = over || res.status == 413;
            const bool late = !over && DeadlineServer::request_timed_out();
            if (!over) res.set_header("Connection", "close");  // the rest of it may still come: closed
            fail(res, over ? 413 : late ? 408 : 400,
                 over   ? strfmt("the body is over %ld bytes (--max-body)", o.max_body)
                 : late ? strfmt("the body did not arrive whole within %g s (--read-timeout)", o.read_timeout)
                        : std::string("the body could not be read whole"),
                 "body");
            return "";
        }
        return body;
    }

    void completions(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
        const std::string body = read_body(req, res, reader);
        if (body.empty() && res.status >= 400) return count(res.status);
        DeadlineServer::request_read();
        bool stream = false;
        std::shared_ptr<Completion> c;
        const uint64_t n = serial++;
        try {
            c = parse_completion_request(body, engine, ApiLimits{o.max_tokens, o.name}, &stream,
                                         stream_seed((uint64_t)started, n));
        } catch (const ApiError& e) {
            fail(res, e.status, e.message, e.param);
            return count(e.status);
        }
        ++inflight;  // before submit: a stop that drains the engine then waits for this answer too
        const CompletionEngine::Submitted s = engine.submit(c);
        if (s != CompletionEngine::Submitted::ok) {
            --inflight;
            const bool full = s == CompletionEngine::Submitted::queue_full;
            fail(res, full ? 429 : 503,
                 full ? strfmt("the queue is full (%d decoding, %d waiting); retry later", o.max_batch, o.max_queue)
                      : std::string("the server is shutting down"));
            return count(full ? 429 : 503);
        }
        const std::string id = strfmt("cmpl-%lx%06llx", started, (unsigned long long)n);
        const long created = (long)std::time(nullptr);
        // A stream's 200 goes out before its first token; a whole answer's status is known at its end
        // (499 when its client left before it: counted as 200 at submission, client timeouts were
        // never seen in the counts).
        if (stream) {
            count(200);
            answer_streamed(res, c, id, created);
        } else {
            count(answer_whole(res, c, id, created));
        }
    }

    // The answer as one JSON body. Waits for it, looking every 0.2 s whether the client still
    // waits: one that gave up (a timeout, a retry) is cancelled, not decoded to max_tokens for
    // nobody. The provider's release counts the request out of inflight, once it is written.
    // Returns the status.
    int answer_whole(httplib::Response& res, const std::shared_ptr<Completion>& c, const std::string& id,
                     long created) {
        std::string text, piece;
        double look_at = now_seconds() + 0.2;
        for (Completion::Got got; (got = c->next_for(&piece, 0.2)) != Completion::Got::done;) {
            if (got == Completion::Got::text) text += piece;
            if (now_seconds() < look_at) continue;
            look_at = now_seconds() + 0.2;
            if (DeadlineServer::client_gone()) {
                c->cancelled = true;
                --inflight;
                fail(res, 499, "the client closed the connection");  // not sent: no one reads it
                return 499;
            }
        }
        auto out = std::make_shared<const std::string>(completion_body(id, created, o.name, *c, text, false, true));
        res.set_content_provider(
            out->size(), "application/json",
            [out](size_t offset, size_t length, httplib::DataSink& sink) {
                return sink.write(out->data() + offset, length);
            },
            [this](bool) { --inflight; });
        observe(*c);
        return 200;
    }

    // The answer as server-sent events, a piece at a time; [DONE] after the last.
    void answer_streamed(httplib::Response& res, const std::shared_ptr<Completion>& c, const std::string& id,
                         long created) {
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream",
            [this, c, id, created](size_t, httplib::DataSink& sink) {
                // Waiting for a piece (queued, or between tokens), the client is looked at every
                // 0.2 s: one that left gives its place in the queue up at once.
                std::string piece;
                Completion::Got got;
                while ((got = c->next_for(&piece, 0.2)) == Completion::Got::nothing_yet)
                    if (DeadlineServer::client_gone()) {
                        c->cancelled = true;
                        return false;
                    }
                const bool more = got == Completion::Got::text;
                const std::string event =
                    more ? "data: " + completion_body(id, created, o.name, *c, piece, true, false) + "\n\n"
                         : "data: " + completion_body(id, created, o.name, *c, "", true, true) + "\n\ndata: [DONE]\n\n";
                if (!sink.write(event.data(), event.size())) {
                    c->cancelled = true;  // the client went away: the engine drops the request
                    return false;
                }
                if (!more) {  // (not a search for "[DONE]": the answer's own text may hold it)
                    observe(*c);
                    sink.done();
                }
                return true;
            },
            [this, c](bool ok) {
                if (!ok) c->cancelled = true;
                --inflight;
            });
    }

    // "Bearer KEY", the scheme's name in any case (RFC 9110: it is case-insensitive).
    bool authorized(const std::string& header) const {
        const std::string scheme = "bearer ";
        if (header.size() != scheme.size() + o.api_key.size()) return false;
        for (size_t i = 0; i < scheme.size(); ++i)
            if (std::tolower((unsigned char)header[i]) != scheme[i]) return false;
        return header.compare(scheme.size(), std::string::npos, o.api_key) == 0;
    }

    // Before routing: the body's size, the key, and whether requests are still taken.
    httplib::Server::HandlerResponse gate(const httplib::Request& req, httplib::Response& res) {
        const bool api = req.path.rfind("/v1/", 0) == 0;
        if (api && !o.api_key.empty() && !authorized(req.get_header_value("Authorization"))) {
            fail(res, 401, "a valid API key is required: send \"Authorization: Bearer KEY\"");
            if (req.path == "/v1/completions") count(401);
            return httplib::Server::HandlerResponse::Handled;
        }
        // A POST's body has a length or comes chunked; without either, or with a length that is
        // no number, it was waited for until --read-timeout. Refused at once, the connection
        // closed (what follows on it cannot be told from the body).
        const std::string length_text = req.get_header_value("Content-Length");
        const bool chunked = req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos;
        if (req.method == "POST" && !chunked &&
            (length_text.empty() || length_text.find_first_not_of("0123456789") != std::string::npos)) {
            DeadlineServer::close_after();
            res.set_header("Connection", "close");
            const bool none = !req.has_header("Content-Length");
            fail(res, none ? 411 : 400,
                 none ? std::string("a POST needs its body's Content-Length (or Transfer-Encoding: chunked)")
                      : strfmt("Content-Length '%s' is not a number of bytes", length_text.c_str()),
                 "body");
            if (req.path == "/v1/completions") count(none ? 411 : 400);
            return httplib::Server::HandlerResponse::Handled;
        }
        const long length = std::atol(length_text.c_str());
        if (length > o.max_body) {
            fail(res, 413, strfmt("the body has %ld bytes; at most %ld (--max-body)", length, o.max_body), "body");
            if (req.path == "/v1/completions") count(413);
            return httplib::Server::HandlerResponse::Handled;
        }
        if (api && draining && req.path == "/v1/completions") {
            fail(res, 503, "the server is shutting down");
            count(503);
            return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
    }

    void routes() {
        http.set_pre_routing_handler([this](const httplib::Request& q, httplib::Response& r) {
            DeadlineServer::request_routed();
            return gate(q, r);
        });
        http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r,
                                            const httplib::ContentReader& reader) { completions(q, r, reader); });
        http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& r) {
            r.set_content(models_body(o.name, started, engine.stats().model_step), "application/json");
        });
        http.Get("/healthz", [](const httplib::Request&, httplib::Response& r) { r.set_content("ok\n", "text/plain"); });
        http.Get("/readyz", [this](const httplib::Request&, httplib::Response& r) {
            r.status = draining ? 503 : 200;
            r.set_content(draining ? "shutting down\n" : "ready\n", "text/plain");
        });
        http.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
            r.set_content(metrics_text(engine.stats(), counters, latency, first_token),
                          "text/plain; version=0.0.4");
        });
        // Every other error (no route, a body over the limit while read, a request httplib could not
        // parse) gets the same JSON shape.
        http.set_error_handler([this](const httplib::Request& q, httplib::Response& r) {
            if (DeadlineServer::request_timed_out() || DeadlineServer::request_unparsed())
                r.set_header("Connection", "close");  // and it is closed (http_server.cpp)
            if (!r.body.empty()) return;
            if (DeadlineServer::request_timed_out())
                fail(r, 408, strfmt("the request did not arrive whole within %g s (--read-timeout)", o.read_timeout));
            else if (DeadlineServer::request_unparsed())
                fail(r, 400, "the request line or headers could not be parsed (or are over 8 KiB)");
            else if (r.status == 404)
                fail(r, 404, strfmt("no endpoint %s %s (POST /v1/completions, GET /v1/models, /healthz, /readyz, "
                                    "/metrics)",
                                    q.method.c_str(), q.path.c_str()));
            else if (r.status == 413) fail(r, 413, strfmt("the body is over %ld bytes (--max-body)", o.max_body), "body");
            else fail(r, r.status, strfmt("HTTP %d", r.status));
        });
        on_exception(http, [this](httplib::Response& r, const std::string& what) { fail(r, 500, what); });
        http.set_logger([this](const httplib::Request& q, const httplib::Response& r) {
            if (o.log_requests) std::fprintf(stderr, "serve: %s %s %d\n", q.method.c_str(), q.path.c_str(), r.status);
        });
        http.new_task_queue = [pool = connections()] { return new httplib::ThreadPool(pool); };
        http.set_payload_max_length((size_t)o.max_body);
        http.set_write_timeout(30, 0);
    }
};

} // namespace

int run_serve(int argc, const char* const* argv) {
    // SIGTERM and SIGINT go to the signal thread alone: blocked first, before any thread starts
    // (OpenMP's too), so every later thread inherits the mask. (Until here a library's handler has
    // them: PSM's, loaded with MPI, exits 1.)
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    bool help = false;
    const ServeOptions o = parse(argc, argv, &help);
    if (help) return 0;
    validate(o);
    // No cpu::set_threads here: the decoding thread sets its own (CompletionEngine). A team started
    // on this thread would leave an idle pool that libgomp counts against the CPUs, and with more
    // pooled threads than CPUs its teams stop spinning and sleep: batched decoding at --threads 2
    // ran at 8.4k tokens/s against 14.0-14.3k without it (bench/serve_load.py, 8 clients).
    InferenceModel model = load_inference_model(o.checkpoint);
    const std::string path = model.path;
    const long step = model.step;
    const std::string signature = Gpt(model.cfg, 0).signature();
    const std::unique_ptr<Device> device = make_device(parse_device_kind(o.device), Topology{});
    std::unique_ptr<Decoder> decoder = device->make_decoder(model.cfg, parse_precision(o.precision));
    const std::string where = decoder->where();
    CompletionEngine engine(std::move(model), o.max_batch, o.max_queue, std::move(decoder), o.threads);
    Server server(o, engine);
    server.routes();
    const int port =
        o.port == 0 ? server.http.bind_to_any_port(o.host) : (server.http.bind_to_port(o.host, o.port) ? o.port : -1);
    if (port < 0)
        throw UserError(strfmt("serve: cannot listen on %s:%d (in use, or not an address of this machine); choose "
                               "another --port or --host",
                               o.host.c_str(), o.port));
    server.listen_backlog();
    CheckpointWatcher watcher(engine, server.counters, watched_dir(o.checkpoint), o.poll, path, step);
    std::atomic<bool> signalled{false}, listen_returned{false};
    std::thread signals([&] {
        int sig = 0;
        sigwait(&sigs, &sig);
        if (server.draining.exchange(true)) return;  // woken by the shutdown below
        signalled = true;
        const EngineStats s = engine.stats();
        std::fprintf(stderr, "serve: %s: finishing %ld running and %ld queued requests, then stopping (a second "
                             "signal stops at once)\n",
                     sig == SIGINT ? "SIGINT" : "SIGTERM", s.active, s.queued);
        // A second signal (^C twice, an operator who will not wait for long answers): out now.
        std::thread([sigs] {
            int again = 0;
            sigwait(&sigs, &again);
            std::fprintf(stderr, "serve: a second %s: stopping at once, answers in progress cut off\n",
                         again == SIGINT ? "SIGINT" : "SIGTERM");
            std::fflush(stderr);
            std::_Exit(1);
        }).detach();
        engine.drain();
        // The answers are complete; their last bytes may still be on the way to the clients.
        for (int i = 0; i < 6000 && server.inflight > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        // A signal that came before the server listens: httplib's stop() does nothing until it
        // runs, and it would then listen on for good, refusing every request.
        while (!server.http.is_running() && !listen_returned) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        server.http.stop();
    });
    std::printf("serve: listening on http://%s:%d | %s | step %ld | %s | batch %d, queue %d | on %s%s\n", o.host.c_str(),
                port, signature.c_str(), step, path.c_str(), o.max_batch, o.max_queue, where.c_str(),
                o.api_key.empty() ? "" : " | API key required");
    std::fflush(stdout);
    const bool ok = server.http.listen_after_bind();
    listen_returned = true;
    if (!server.draining.exchange(true)) pthread_kill(signals.native_handle(), SIGTERM);  // wake it to end
    signals.join();
    std::fprintf(stderr, "serve: stopped%s\n", signalled ? " after finishing every request" : "");
    return ok || signalled ? 0 : 1;
}

} // namespace dptrain
