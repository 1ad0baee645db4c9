// dptrain serve: the HTTP server (cpp-httplib) over the completion engine: routes, probes, metrics,
// rollout and the stop. Not for: the API's rules and bodies (serve_api.cpp), decoding
// (completions.cpp) or watching checkpoints (rollout.cpp).
#include "dptrain/infer/serve.h"

#include "dptrain/backend/decoders.h"
#include "dptrain/config/infer_options.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/infer/chat_api.h"
#include "dptrain/infer/http_server.h"
#include "dptrain/infer/rollout.h"
#include "dptrain/infer/serve_api.h"

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


namespace dptrain {

namespace {

// Transfer-Encoding's last coding is chunked (case-insensitive, as httplib reads it).
bool is_chunked(const httplib::Request& q) {
    std::string te = q.get_header_value("Transfer-Encoding");
    for (char& c : te) c = (char)std::tolower((unsigned char)c);
    return te.find("chunked") != std::string::npos;
}

// httplib passes std::exception_ptr from 0.11, std::exception& before (Ubuntu 22.04's 0.10): a
// template so only the built-against branch compiles.
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

struct Server {
    const ServeOptions& o;
    CompletionEngine& engine;
    ServeCounters counters;
    Histogram latency{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
    Histogram first_token{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
    std::atomic<bool> draining{false};
    // Taken, response not yet written (the provider's release counts down): a stop waits for
    // these, since httplib ends chunked responses at stop.
    std::atomic<long> inflight{0};
    std::atomic<uint64_t> serial{0};
    long started = (long)std::time(nullptr);
    DeadlineServer http;
    int listen_fd = -1;
    ChatTemplate chat_template;

    Server(const ServeOptions& o_, CompletionEngine& e) : o(o_), engine(e), http(o_.read_timeout) {
        const std::string tmpl = o.chat_template.empty() ? ChatTemplate::beside(o.checkpoint) : o.chat_template;
        if (!tmpl.empty()) {
            chat_template = ChatTemplate::read(tmpl);
            std::fprintf(stderr, "serve: chat template %s\n", tmpl.c_str());
        }
        // Not httplib's SO_REUSEPORT: a second server would bind the same port and silently get
        // half the connections. SO_REUSEADDR still allows a restart during TIME_WAIT.
        http.set_socket_options([this](int sock) {
            const int yes = 1;
            setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
            listen_fd = sock;
        });
    }
    // Every slot and queue place, plus a few for probes and refusals (<= kServeConnections).
    size_t connections() const { return (size_t)o.max_batch + o.max_queue + 8; }
    // httplib listens with a backlog of 5; a burst past it loses SYNs to 1 s retransmits. A second
    // listen() raises it (idle connections hold no thread, so accepting them is cheap). Measured: docs/BENCHMARKS.md, "Decoding: each row's product alone, and
    // the listen backlog".
    void listen_backlog() {
        if (listen_fd < 0 || ::listen(listen_fd, SOMAXCONN) != 0)
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

    // Read here, not by httplib: its read refuses a form-encoded body (`curl -d`) over 8 KiB and
    // splits multipart ones. Empty when refused (res holds the error).
    std::string read_body(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
        std::string body;
        if (req.is_multipart_form_data()) {
            fail(res, 415, "the body must be JSON (Content-Type: application/json), not multipart form data", "body");
            return "";
        }
        // httplib limits only a Content-Length body to --max-body; a chunked one is held here.
        bool over = false;
        if (!reader([&](const char* data, size_t n) {
                if (body.size() + n > (size_t)o.max_body) return !(over = true);
                body.append(data, n);
                return true;
            })) {
            over = over || res.status == 413;
            const bool late = !over && DeadlineServer::request_timed_out();
            const bool chunk = !over && !late && DeadlineServer::request_bad_chunk();
            if (!over) {  // the rest may still come
                res.set_header("Connection", "close");
                DeadlineServer::close_after();
            }
            fail(res, over ? 413 : late ? 408 : 400,
                 over    ? strfmt("the body is over %ld bytes (--max-body)", o.max_body)
                 : late  ? strfmt("the body did not arrive whole within %g s (--read-timeout)", o.read_timeout)
                 : chunk ? std::string("a chunk's size line is not a hexadecimal size (Transfer-Encoding: chunked)")
                         : std::string("the body could not be read whole"),
                 "body");
            return "";
        }
        return body;
    }

    // POST /v1/completions (chat false) or /v1/chat/completions.
    void completions(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                     bool chat) {
        const std::string body = read_body(req, res, reader);
        if (body.empty() && res.status >= 400) return count(res.status);
        DeadlineServer::request_read();
        CompletionRequest r;
        const uint64_t n = serial++;
        try {
            const ApiLimits limits{o.max_tokens, o.name, o.max_batch + o.max_queue};
            const uint64_t seed = stream_seed((uint64_t)started, n);
            r = chat ? parse_chat_request(body, engine, limits, chat_template, seed)
                     : parse_completion_request(body, engine, limits, seed);
        } catch (const ApiError& e) {
            fail(res, e.status, e.message, e.param);
            return count(e.status);
        }
        if (o.fail_at_step >= 0 && engine.stats().model_step == o.fail_at_step) {
            fail(res, 500, strfmt("injected fault: the model of step %ld answers 500 (--fail-at-step)", o.fail_at_step));
            return count(500);
        }
        ++inflight;  // before submit, so a stop that drains the engine waits for this answer too
        if (const int refused = submit_all(r.choices)) {
            --inflight;
            fail(res, refused,
                 refused == 429
                     ? strfmt("the queue is full (%d decoding, %d waiting); retry later", o.max_batch, o.max_queue)
                     : std::string("the server is shutting down"));
            return count(refused);
        }
        const std::string id = strfmt("%s-%lx%06llx", chat ? "chatcmpl" : "cmpl", started, (unsigned long long)n);
        const long created = (long)std::time(nullptr);
        // A whole answer is counted at its end, so a client that left shows as 499, not 200.
        if (r.stream) {
            count(200);
            answer_streamed(res, r.choices[0], id, created, chat);
        } else {
            count(answer_whole(res, r.choices, id, created, chat));
        }
    }

    // Every choice queued, or none: 0, else the status that refuses the request (429 or 503).
    int submit_all(const std::vector<std::shared_ptr<Completion>>& choices) {
        for (size_t i = 0; i < choices.size(); ++i) {
            const CompletionEngine::Submitted s = engine.submit(choices[i]);
            if (s == CompletionEngine::Submitted::ok) continue;
            for (size_t k = 0; k < i; ++k) choices[k]->cancelled = true;
            return s == CompletionEngine::Submitted::queue_full ? 429 : 503;
        }
        return 0;
    }

    // Checks every 0.2 s that the client still waits: one that gave up is cancelled, not decoded
    // to max_tokens for nobody. Returns the status.
    int answer_whole(httplib::Response& res, const std::vector<std::shared_ptr<Completion>>& choices,
                     const std::string& id, long created, bool chat) {
        std::vector<std::string> texts(choices.size());
        std::string piece;
        double look_at = now_seconds() + 0.2;
        for (size_t i = 0; i < choices.size(); ++i)
            for (Completion::Got got; (got = choices[i]->next_for(&piece, 0.2)) != Completion::Got::done;) {
                if (got == Completion::Got::text) texts[i] += piece;
                if (now_seconds() < look_at) continue;
                look_at = now_seconds() + 0.2;
                if (DeadlineServer::client_gone()) {
                    for (const auto& c : choices) c->cancelled = true;
                    --inflight;
                    fail(res, 499, "the client closed the connection");  // not sent: no one reads it
                    return 499;
                }
            }
        auto out = std::make_shared<const std::string>(
            chat ? chat_body(id, created, o.name, *choices[0], texts[0])
                 : completions_body(id, created, o.name, choices, texts, engine.tokenizer()));
        res.set_content_provider(
            out->size(), "application/json",
            [out](size_t offset, size_t length, httplib::DataSink& sink) {
                return sink.write(out->data() + offset, length);
            },
            [this](bool) { --inflight; });
        for (const auto& c : choices) observe(*c);
        return 200;
    }

    // Server-sent events; [DONE] after the last.
    void answer_streamed(httplib::Response& res, const std::shared_ptr<Completion>& c, const std::string& id,
                         long created, bool chat) {
        res.set_header("Cache-Control", "no-cache");
        auto first = std::make_shared<bool>(true);
        const auto event = [this, c, id, created, chat, first](const std::string& piece, bool last) {
            const std::string data = chat ? chat_chunk(id, created, o.name, *c, piece, *first, last)
                                          : completion_body(id, created, o.name, *c, piece, true, last);
            *first = false;
            return "data: " + data + (last ? "\n\ndata: [DONE]\n\n" : "\n\n");
        };
        res.set_chunked_content_provider(
            "text/event-stream",
            [this, c, event](size_t, httplib::DataSink& sink) {
                // A client that left while waiting gives its queue place up at once.
                std::string piece;
                Completion::Got got;
                while ((got = c->next_for(&piece, 0.2)) == Completion::Got::nothing_yet)
                    if (DeadlineServer::client_gone()) {
                        c->cancelled = true;
                        return false;
                    }
                const bool more = got == Completion::Got::text;
                const std::string text = event(more ? piece : std::string(), !more);
                if (!sink.write(text.data(), text.size())) {
                    c->cancelled = true;
                    return false;
                }
                if (!more) {  // not a search for "[DONE]": the text may hold it
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

    static bool is_api_post(const httplib::Request& q) {
        return q.path == "/v1/completions" || q.path == "/v1/chat/completions";
    }

    // RFC 9110: the scheme name is case-insensitive.
    bool authorized(const std::string& header) const {
        const std::string scheme = "bearer ";
        if (header.size() != scheme.size() + o.api_key.size()) return false;
        for (size_t i = 0; i < scheme.size(); ++i)
            if (std::tolower((unsigned char)header[i]) != scheme[i]) return false;
        return header.compare(scheme.size(), std::string::npos, o.api_key) == 0;
    }

    httplib::Server::HandlerResponse gate(const httplib::Request& req, httplib::Response& res) {
        const bool api = req.path.rfind("/v1/", 0) == 0;
        if (api && !o.api_key.empty() && !authorized(req.get_header_value("Authorization"))) {
            fail(res, 401, "a valid API key is required: send \"Authorization: Bearer KEY\"");
            if (is_api_post(req)) count(401);
            return httplib::Server::HandlerResponse::Handled;
        }
        // Without a usable length httplib would wait to --read-timeout. Refused at once and closed:
        // what follows cannot be told from the body.
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
            if (is_api_post(req)) count(none ? 411 : 400);
            return httplib::Server::HandlerResponse::Handled;
        }
        const long length = std::atol(length_text.c_str());
        if (length > o.max_body) {
            fail(res, 413, strfmt("the body has %ld bytes; at most %ld (--max-body)", length, o.max_body), "body");
            if (is_api_post(req)) count(413);
            return httplib::Server::HandlerResponse::Handled;
        }
        if (api && draining && is_api_post(req)) {
            fail(res, 503, "the server is shutting down");
            count(503);
            return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
    }

    void routes() {
        http.set_pre_routing_handler([this](const httplib::Request& q, httplib::Response& r) {
            DeadlineServer::request_routed(is_chunked(q));
            return gate(q, r);
        });
        http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r,
                                            const httplib::ContentReader& reader) { completions(q, r, reader, false); });
        http.Post("/v1/chat/completions",
                  [this](const httplib::Request& q, httplib::Response& r, const httplib::ContentReader& reader) {
                      completions(q, r, reader, true);
                  });
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
        // Every other error gets the same JSON shape.
        http.set_error_handler([this](const httplib::Request& q, httplib::Response& r) {
            if (DeadlineServer::request_timed_out() || DeadlineServer::request_unparsed())
                r.set_header("Connection", "close");  // http_server.cpp closes it
            if (!r.body.empty()) return;
            if (DeadlineServer::request_timed_out())
                fail(r, 408, strfmt("the request did not arrive whole within %g s (--read-timeout)", o.read_timeout));
            else if (DeadlineServer::request_unparsed())
                fail(r, 400, "the request line or headers could not be parsed (or are over 8 KiB)");
            else if (r.status == 404)
                fail(r, 404, strfmt("no endpoint %s %s (POST /v1/completions, /v1/chat/completions, GET /v1/models, /healthz, /readyz, "
                                    "/metrics)",
                                    q.method.c_str(), q.path.c_str()));
            else if (r.status == 413) fail(r, 413, strfmt("the body is over %ld bytes (--max-body)", o.max_body), "body");
            else fail(r, r.status, strfmt("HTTP %d", r.status));
        });
        on_exception(http, [this](httplib::Response& r, const std::string& what) { fail(r, 500, what); });
        http.set_logger([this](const httplib::Request& q, const httplib::Response& r) {
            if (o.log_requests) std::fprintf(stderr, "serve: %s %s %d\n", q.method.c_str(), q.path.c_str(), r.status);
        });
        http.set_threads(connections());
        http.set_payload_max_length((size_t)o.max_body);
        http.set_write_timeout(30, 0);
    }
};

} // namespace

int run_serve(int argc, const char* const* argv, const std::string& program) {
    // Blocked before any thread (OpenMP's too) starts, so all inherit the mask and only the signal
    // thread sees SIGTERM/SIGINT (otherwise PSM's handler, loaded with MPI, exits 1).
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    const InferenceParse<ServeOptions> parsed = parse_serve_options(argc, argv, program);
    if (!parsed.help_text.empty()) {
        std::fputs(parsed.help_text.c_str(), stdout);
        return 0;
    }
    const ServeOptions& o = parsed.opts;
    // No cpu::set_threads here: an idle team on this thread makes libgomp throttle the decoding
    // thread's. Why: docs/BENCHMARKS.md, "serve --threads: the decoding thread's own".
    const std::string dir = watched_dir(o.checkpoint);
    const FollowSpec follow = follow_of(o, dir);
    InferenceModel model = load_inference_model(first_checkpoint(o, dir, follow));
    const std::string path = model.path;
    const long step = model.step;
    const std::string signature = lm_signature(model.cfg);
    std::unique_ptr<Decoder> decoder = make_decoder(o.device, model.cfg, o.precision);
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
    CheckpointWatcher watcher(engine, server.counters, dir, o.poll, path, step, follow);
    // The stop's sequence. Why: docs/NOTES.md, "Note [serve stop]".
    std::atomic<bool> signalled{false}, listen_returned{false}, aborted{false};
    std::thread signals([&] {
        int sig = 0;
        sigwait(&sigs, &sig);
        if (server.draining.exchange(true)) return;  // woken by the end of listen, below
        signalled = true;
        const EngineStats s = engine.stats();
        std::fprintf(stderr, "serve: %s: finishing %ld running and %ld queued requests, then stopping (a second "
                             "signal stops at once)\n",
                     sig == SIGINT ? "SIGINT" : "SIGTERM", s.active, s.queued);
        std::thread([sigs] {  // a second signal: out now
            int again = 0;
            sigwait(&sigs, &again);
            std::fprintf(stderr, "serve: a second %s: stopping at once, answers in progress cut off\n",
                         again == SIGINT ? "SIGINT" : "SIGTERM");
            std::fflush(stderr);
            std::_Exit(1);
        }).detach();
        if (!engine.drain(o.drain_seconds) && (aborted = true))
            std::fprintf(stderr, "serve: --drain-seconds %g passed: the requests left end where they are (finish_reason "
                                 "abort)\n",
                         o.drain_seconds);
        // Answers complete; their last bytes may still be on the way.
        for (int i = 0; i < 6000 && server.inflight > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        // stop() before listen runs does nothing, and it would then listen for good.
        while (!server.http.is_running() && !listen_returned) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        server.http.stop();
    });
    std::printf("serve: listening on http://%s:%d | %s | step %ld | %s | batch %d, queue %d | on %s%s\n", o.host.c_str(),
                port, signature.c_str(), step, path.c_str(), o.max_batch, o.max_queue, where.c_str(),
                o.api_key.empty() ? "" : " | API key required");
    std::fflush(stdout);
    const bool ok = server.http.listen_after_bind();
    listen_returned = true;
    if (!server.draining.exchange(true)) pthread_kill(signals.native_handle(), SIGTERM);  // wake it
    signals.join();
    std::fprintf(stderr, "serve: stopped%s\n",
                 !signalled ? ""
                 : aborted  ? " after --drain-seconds: the requests left ended with finish_reason abort"
                            : " after finishing every request");
    return ok || signalled ? 0 : 1;
}

} // namespace dptrain
