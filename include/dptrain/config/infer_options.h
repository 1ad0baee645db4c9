// The options of generate and serve, the shared ones declared once for both, parsed and checked.
// Not for: training's options (options.h).
#pragma once

#include "dptrain/config/options.h"

#include <string>

namespace dptrain {

struct InferenceOptions {
    std::string checkpoint;  // a file, or a run or checkpoint directory
    DeviceKind device = DeviceKind::cpu;
    Precision precision = Precision::fp32;  // of the weights
    int threads = 1;
};

struct GenerateOptions : InferenceOptions {
    std::string prompt = "\n";
    bool prompt_given = false;  // "\n" is no prompt to every model
    int tokens = 200, top_k = 0;
    double temperature = 1.0;
    unsigned long seed = 1;
    bool no_kv_cache = false;
};

// Connection threads: each request holds one until answered, plus 8 for probes and refusals,
// so --max-batch + --max-queue <= 504.
constexpr int kServeConnections = 512;

struct ServeOptions : InferenceOptions {
    std::string host = "127.0.0.1", api_key, name = "dptrain";
    std::string chat_template;  // "" = the plain default (infer/chat_api.h)
    std::string follow = "auto";  // auto | promoted | canary | newest (infer/rollout.h)
    long pin = -1;                // a step; -1: none
    long fail_at_step = -1;       // tests: completions answer 500 while this step is served
    double canary_seconds = 300, drain_seconds = 30;
    int port = 8080, max_batch = 8, max_queue = 64, max_tokens = 512;
    long max_body = 1 << 20;
    double poll = 10, read_timeout = 10;
    bool log_requests = false;
};

// dptrain eval: a model's loss on token shards and its accuracy on multiple-choice items.
struct EvalOptions : InferenceOptions {
    std::string data, split = "val", task, out;
    long eval_max = 0;  // windows; 0 = all
    int batch_size = 8;
};

// argv[0] is the name; `program` names it in --help and errors. --help checks nothing.
template <class O>
struct InferenceParse {
    O opts;
    std::string help_text;  // non-empty: --help
};
InferenceParse<GenerateOptions> parse_generate_options(int argc, const char* const* argv, const std::string& program);
InferenceParse<ServeOptions> parse_serve_options(int argc, const char* const* argv, const std::string& program);
InferenceParse<EvalOptions> parse_eval_options(int argc, const char* const* argv, const std::string& program);
// The training options a checkpoint stores (INI text), parsed as --config; throws UserError.
Options options_from_ini(const std::string& ini);

} // namespace dptrain
