// Generate's and serve's options, declared through training's Registry; the model's four once for
// both (declare_model). Not for: training's options (options.cpp).
#include "dptrain/config/infer_options.h"

#include "registry.h"

#include "dptrain/config/argv.h"
#include "dptrain/core/error.h"
#include "dptrain/core/files.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>

namespace dptrain {

using config::Registry;
namespace po = config::po;

namespace {

template <class O>
void declare_model(Registry<O>& r, O& o) {
    r.template add<std::string>("checkpoint", &O::checkpoint, o, "",
                                "a checkpoint file (ckpt-NNNNNNNN.h5) of a --model gpt run, or a run (or checkpoint) "
                                "directory: its newest complete checkpoint (serve: and each newer one as it appears)");
    r.template choice<DeviceKind>("device", &O::device, o, DeviceKind::cpu,
                                  "where to decode with the key/value cache: cpu | cuda (this host's first GPU) | auto "
                                  "(cuda when a GPU is visible, else cpu)");
    r.template choice<Precision>("precision", &O::precision, o, Precision::fp32,
                                 "the weights decoding reads: fp32 | bf16 (rounded once per checkpoint: half the bytes "
                                 "a token reads, products and sums still fp32; with the key/value cache)");
    r.template add<int>("threads", &O::threads, o, 1, "compute threads of the model");
}

void declare(Registry<GenerateOptions>& r, GenerateOptions& o) {
    declare_model(r, o);
    r.desc.add_options()("prompt", po::value(&o.prompt)->default_value("\n", "a new line"), "text to continue");
    r.add<int>("tokens", &GenerateOptions::tokens, o, 200, "tokens to generate");
    r.add<double>("temperature", &GenerateOptions::temperature, o, 1.0,
                  "softmax temperature; 0 = always the most likely");
    r.add<int>("top-k", &GenerateOptions::top_k, o, 0, "sample among the k most likely tokens; 0 = all");
    r.add<unsigned long>("seed", &GenerateOptions::seed, o, 1, "seed of the sampling");
    r.flag("no-kv-cache", &GenerateOptions::no_kv_cache, o,
           "recompute the whole window (the last block-size tokens) for every new token instead of keeping each "
           "position's keys and values; slower, and past the block size the window slides one token at a time "
           "instead of keeping its newest half (on the CPU: with --device auto too)");
}

void declare(Registry<ServeOptions>& r, ServeOptions& o) {
    using S = ServeOptions;
    declare_model(r, o);
    r.add<std::string>("host", &S::host, o, "127.0.0.1", "address to listen on (0.0.0.0: every interface)");
    r.add<int>("port", &S::port, o, 8080, "port; 0 = any free one (the listening line names it)");
    r.add<int>("max-batch", &S::max_batch, o, 8, "requests decoded together");
    r.add<int>("max-queue", &S::max_queue, o, 64,
               "requests waiting beyond those; more get 429 (--max-batch + --max-queue <= 504)");
    r.add<int>("max-tokens", &S::max_tokens, o, 512, "the largest max_tokens a request may ask");
    r.add<long>("max-body", &S::max_body, o, 1 << 20, "the largest request body in bytes; more get 413");
    r.add<std::string>("api-key", &S::api_key, o, "",
                       "require \"Authorization: Bearer KEY\" on /v1/ (default: $DPTRAIN_API_KEY; unset: no key)");
    r.add<std::string>("served-model-name", &S::name, o, "dptrain", "the model's name in the API");
    r.add<double>("poll-seconds", &S::poll, o, 10.0, "how often to look for a newer checkpoint in a directory; 0 = never");
    r.add<double>("read-timeout", &S::read_timeout, o, 10.0,
                  "seconds a client may take to send a whole request (its line, headers and body)");
    r.add<std::string>("chat-template", &S::chat_template, o, "",
                       "a JSON file of how /v1/chat/completions makes messages into a prompt: system, user, "
                       "assistant (each with {content}), generation (the assistant's turn begins) and stop; default "
                       "the run directory's chat_template.json, else a plain \"User: ...\" / \"Assistant:\" "
                       "transcript (docs/SERVING.md)");
    r.add<std::string>("follow", &S::follow, o, "auto",
                       "which checkpoint of a directory to serve: promoted (the newest promoted --canary-seconds ago: "
                       "the stable replicas) | canary (the newest promotion at once; a rise in its server errors "
                       "withdraws it) | newest (each complete one as training writes it) | auto (promoted where the "
                       "directory holds a promotion log, as a run with --promote-if makes at its start; else newest)");
    r.add<long>("pin", &S::pin, o, -1, "serve this step of the directory and no other (-1: follow)");
    r.add<double>("canary-seconds", &S::canary_seconds, o, 300.0,
                  "how long a promotion is served by canary replicas alone before stable ones take it");
    r.add<double>("drain-seconds", &S::drain_seconds, o, 30.0,
                  "on SIGTERM, how long requests in flight may take to finish; then they end where they are "
                  "(finish_reason abort, a stream's final event sent) and the server exits 0");
    r.add<long>("fail-at-step", &S::fail_at_step, o, -1,
                "for tests: completions answer 500 while the model of this step is served (a bad checkpoint, "
                "for --follow canary to withdraw); -1 = never");
    r.flag("log-requests", &S::log_requests, o, "one line per request on stderr");
}

void declare(Registry<EvalOptions>& r, EvalOptions& o) {
    using E = EvalOptions;
    declare_model(r, o);
    r.add<std::string>("data", &E::data, o, "",
                       "token shards (dptrain-data's output) to compute the loss, perplexity and bits per byte over");
    r.add<std::string>("split", &E::split, o, "val", "which split of --data: val | train");
    r.add<long>("eval-max", &E::eval_max, o, 0, "at most this many windows of --data; 0 = all");
    r.add<int>("batch-size", &E::batch_size, o, 8, "windows a rank computes at once");
    r.add<std::string>("task", &E::task, o, "",
                       "multiple-choice items, a JSON object a line: HellaSwag's released form (ctx, endings, label; "
                       "each ending scored as \" \" + ending) or {context, choices, answer} (choices as written)");
    r.add<std::string>("out", &E::out, o, "", "also write the results as JSON lines (each item's scores with --task)");
}

void check(const EvalOptions& o) {
    if (o.checkpoint.empty())
        throw UserError("eval: give the model with --checkpoint PATH (a checkpoint, a run directory or a Hugging Face "
                        "export)");
    if (o.data.empty() && o.task.empty()) throw UserError("eval: give --data SHARDS, --task FILE.jsonl or both");
    if (o.split != "val" && o.split != "train")
        throw UserError(strfmt("eval: --split '%s' is unknown; use val or train", o.split.c_str()));
    if (o.batch_size < 1 || o.batch_size > 4096)
        throw UserError(strfmt("eval: --batch-size %d must be in 1..4096", o.batch_size));
    if (o.eval_max < 0) throw UserError(strfmt("eval: --eval-max %ld must be >= 0 (0: all)", o.eval_max));
    if (o.threads < 1 || o.threads > kMaxThreads)
        throw UserError(strfmt("eval: --threads %d must be in 1..%d", o.threads, kMaxThreads));
}

void check(const GenerateOptions& o) {
    if (o.checkpoint.empty()) throw UserError("generate: give the checkpoint with --checkpoint PATH");
    if (o.tokens < 0) throw UserError(strfmt("generate: --tokens %d must be >= 0", o.tokens));
    if (o.top_k < 0) throw UserError(strfmt("generate: --top-k %d must be >= 0 (0: every token)", o.top_k));
    if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
        throw UserError(
            strfmt("generate: --temperature %g must be >= 0 and finite (0: the likeliest token)", o.temperature));
    if (o.threads < 1 || o.threads > kMaxThreads)
        throw UserError(strfmt("generate: --threads %d must be in 1..%d", o.threads, kMaxThreads));
    if (o.no_kv_cache && o.device == DeviceKind::cuda)
        throw UserError("generate: --no-kv-cache recomputes on the CPU; leave --device out, or drop --no-kv-cache");
    if (o.no_kv_cache && o.precision == Precision::bf16)
        throw UserError("generate: --no-kv-cache recomputes in fp32; drop --precision bf16, or --no-kv-cache");
}

void check(const ServeOptions& o) {
    if (o.checkpoint.empty()) throw UserError("serve: give the model with --checkpoint PATH (a file or a run directory)");
    if (o.port < 0 || o.port > 65535) throw UserError(strfmt("serve: --port %d must be in 0..65535", o.port));
    if (o.max_batch < 1 || o.max_batch > 256)
        throw UserError(strfmt("serve: --max-batch %d must be in 1..256", o.max_batch));
    // Requests beyond the connection threads waited unseen and were never refused.
    const int most = kServeConnections - 8 - o.max_batch;
    if (o.max_queue < 0 || o.max_queue > most)
        throw UserError(strfmt("serve: --max-queue %d must be in 0..%d with --max-batch %d (%d requests at most, "
                               "decoding and waiting: a connection thread each)",
                               o.max_queue, most, o.max_batch, kServeConnections - 8));
    if (o.max_tokens < 1) throw UserError(strfmt("serve: --max-tokens %d must be >= 1", o.max_tokens));
    if (o.max_body < 64) throw UserError(strfmt("serve: --max-body %ld must be >= 64 bytes", o.max_body));
    if (!(o.poll >= 0) || !std::isfinite(o.poll))
        throw UserError(strfmt("serve: --poll-seconds %g must be >= 0 and finite (0: never)", o.poll));
    if (!(o.read_timeout > 0) || !std::isfinite(o.read_timeout))
        throw UserError(strfmt("serve: --read-timeout %g must be positive and finite", o.read_timeout));
    if (o.threads < 1 || o.threads > kMaxThreads)
        throw UserError(strfmt("serve: --threads %d must be in 1..%d", o.threads, kMaxThreads));
    if (o.name.empty()) throw UserError("serve: --served-model-name must not be empty (the model's name in the API)");
    if (!(o.canary_seconds >= 0) || !std::isfinite(o.canary_seconds))
        throw UserError(strfmt("serve: --canary-seconds %g must be >= 0 and finite", o.canary_seconds));
    if (!(o.drain_seconds >= 0) || !std::isfinite(o.drain_seconds))
        throw UserError(strfmt("serve: --drain-seconds %g must be >= 0 and finite", o.drain_seconds));
    if (o.pin < -1) throw UserError(strfmt("serve: --pin %ld must be a step (>= 0)", o.pin));
}

// `alone`: the hint after "unexpected argument".
template <class O>
InferenceParse<O> parse(int argc, const char* const* argv, const std::string& program, const char* what,
                        const char* alone, po::variables_map& vm) {
    InferenceParse<O> res;
    Registry<O> r((program + ": " + what).c_str());
    r.desc.add_options()("help,h", "print this help");
    declare(r, res.opts);
    // "dptrain generate": the program's path, then the command.
    const size_t space = program.find(' ');
    const std::string see =
        runnable(program.substr(0, space)) + (space == std::string::npos ? "" : program.substr(space)) + " --help";
    try {
        po::store(parse_argv(argc, argv, r.desc, alone), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        throw UserError(std::string(e.what()) + "; see " + see);
    }
    if (vm.count("help")) {
        std::ostringstream s;
        s << r.desc;
        res.help_text = s.str();
    }
    return res;
}

} // namespace

InferenceParse<GenerateOptions> parse_generate_options(int argc, const char* const* argv, const std::string& program) {
    po::variables_map vm;
    auto res = parse<GenerateOptions>(argc, argv, program, "text from a GPT checkpoint",
                                      "generate takes options alone (the prompt: --prompt TEXT)", vm);
    if (!res.help_text.empty()) return res;
    res.opts.prompt_given = !vm["prompt"].defaulted();
    check(res.opts);
    return res;
}

InferenceParse<ServeOptions> parse_serve_options(int argc, const char* const* argv, const std::string& program) {
    po::variables_map vm;
    auto res = parse<ServeOptions>(argc, argv, program,
                                   "the OpenAI-style completions API over a GPT checkpoint",
                                   "serve takes options alone", vm);
    if (!res.help_text.empty()) return res;
    if (res.opts.api_key.empty() && std::getenv("DPTRAIN_API_KEY")) res.opts.api_key = std::getenv("DPTRAIN_API_KEY");
    check(res.opts);
    return res;
}

InferenceParse<EvalOptions> parse_eval_options(int argc, const char* const* argv, const std::string& program) {
    po::variables_map vm;
    auto res = parse<EvalOptions>(argc, argv, program, "a model's loss on token shards and accuracy on multiple-choice items, under mpirun "
                                  "(--checkpoint may also be a Hugging Face export: a directory with model.safetensors)",
                                  "eval takes options alone", vm);
    if (!res.help_text.empty()) return res;
    check(res.opts);
    return res;
}

Options options_from_ini(const std::string& ini) {
    const int fd = memfd_create("options", 0);
    if (fd < 0 || write(fd, ini.data(), ini.size()) != (ssize_t)ini.size()) {
        if (fd >= 0) close(fd);
        throw UserError("cannot read the options stored in the checkpoint");
    }
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    const char* argv[] = {"dptrain", "--config", path.c_str()};
    try {
        Options o = parse_options(3, argv).opts;
        close(fd);
        return o;
    } catch (...) {
        close(fd);
        throw;
    }
}

} // namespace dptrain
