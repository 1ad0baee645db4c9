// Every option dptrain accepts: declared once (name, default, help) in options.cpp, read from the
// command line and from an INI file given by --config (the command line wins), and validated.
// Not for: checks that need the world size or the data (the trainer does those).
#pragma once

#include "dptrain/comm/types.h"
#include "dptrain/data/io_mode.h"
#include "dptrain/model/gpt.h"
#include "dptrain/model/optim.h"

#include <string>
#include <vector>

namespace dptrain {

// The options' closed sets of values, as typed values: parsed once here, so that no component
// compares option strings. Each is spelled on the command line and in INI files as name_of says.
enum class ModelKind { mlp, gpt };
enum class DeviceKind { cpu, cuda, automatic };         // --device cpu | cuda | auto
enum class GpuState { automatic, device, host };        // --gpu-state auto | device | host
enum class Overlap { on, off, automatic };              // --overlap on | off | auto
enum class GpuHealthMode { automatic, on, off };        // --gpu-health auto | on | off
enum class OnNonfinite { stop, skip };
enum class MetricsFormat { jsonl, emf };
enum class ProgressMode { automatic, tty, plain };      // --progress auto | tty | plain
enum class AttentionKind { matmul, flash };
enum class ResumeMode { none, latest, path };           // --resume none | auto | PATH

struct Options {
    // general
    std::string config;  // INI file; same names as the command line, without the dashes
    // model
    ModelKind model;
    std::string hidden;          // "256,256": widths of the hidden layers
    std::vector<int> hidden_sizes; // parsed from hidden
    Activation activation;
    int n_layer, n_head, n_embd, block_size, vocab_size;  // gpt; vocab_size 0 = the data's
    // data
    std::string data;  // directory holding train-*-of-*.h5 and val-*-of-*.h5
    std::string stage_dir;  // node-local directory to copy --data into first; "" = read --data in place
    bool verify_data;       // check --data against its SHA256SUMS before training
    int prefetch;      // batches read ahead by the background readers
    int io_threads;    // reader threads per rank
    long shuffle_block;  // samples shuffled as one unit (1 = per-sample permutation)
    IoMode io;
    // training
    long steps;
    int batch_size;  // per rank and micro-batch; the global batch is batch_size * ranks * grad_accum
    int grad_accum;  // micro-batches per optimizer step
    long global_batch_tokens;  // gpt: tokens per optimizer step (sets grad_accum from the ranks); 0: none
    Optimizer::Kind optimizer;
    double lr, min_lr_ratio;
    long warmup_steps;
    double momentum, beta1, beta2, eps, weight_decay, grad_clip;
    bool shard_optimizer;  // each rank keeps its shard of the optimizer state (ZeRO-1)
    unsigned long seed;
    long stop_after;  // stop (with a checkpoint) after this many steps of this run; 0 = never
    // parallel
    int ranks_per_node;  // 0 = the real nodes; K = simulate nodes of K ranks
    int threads;         // compute threads per rank; 0 = cores of the node / local ranks
    AllreduceAlgo allreduce;
    double bucket_mb;       // gradient bucket size
    Overlap overlap;        // all-reduce buckets while backward runs
    DType grad_dtype;       // on the wire
    // checkpoints
    std::string run_dir, checkpoint_dir;
    std::string resume;      // as given: none | auto | a checkpoint's path
    ResumeMode resume_mode;  // what resume says
    std::string init_from;   // GPT-2 weights in Hugging Face's layout to start from ("" = random init)
    long checkpoint_every;
    int keep_checkpoints;
    bool overwrite_checkpoints;  // a fresh run may delete the checkpoints already in checkpoint_dir
    bool async_checkpoint;       // write checkpoints on a background thread
    double lock_wait;            // seconds to wait for another run's lock on checkpoint_dir
    // reliability
    double step_timeout;       // seconds; 0 = no watchdog
    OnNonfinite on_nonfinite;
    std::string inject_fault;  // RANK:STEP:KIND,... (tests)
    bool preflight;            // run the doctor's checks first; stop on a fatal problem
    // output
    long log_every, eval_every, eval_max;
    double peak_gflops;  // per rank, for MFU; 0 = measure at start
    std::string metrics;  // JSON lines; default RUN_DIR/metrics.jsonl
    std::string trace;    // Chrome trace per rank (FILE-rankNNNNN.json); "" = off
    long profile_ops;     // the step whose forward and backward are timed op by op; 0 = off
    MetricsFormat metrics_format;  // emf: CloudWatch Embedded Metric Format
    std::string metrics_namespace, job_name;  // EMF namespace and "job" dimension ("" = from the launcher)
    bool tensorboard;      // TensorBoard event files in run_dir too
    ProgressMode progress;
    GpuHealthMode gpu_health;
    DeviceKind device;
    Precision precision;     // matmul operands
    AttentionKind attention; // GPT attention's kernels
    Recompute recompute;     // GPT activations backward recomputes instead of keeping
    GpuState gpu_state;      // where parameters and optimizer state live with --device cuda

    std::string to_ini() const;  // every option with its resolved value, as an INI file
};

struct ParseResult {
    Options opts;
    bool help = false;     // --help: print help_text, exit 0
    bool version = false;  // --version
    std::string help_text;
};

// Throws UserError with one line naming the option (or file) and the fix.
ParseResult parse_options(int argc, const char* const* argv);
// `dptrain options`: one line per option, "--name", then a tab and its values separated by spaces
// when they are a closed set ("--device\tcpu cuda auto"); for shell completion.
std::string option_listing();

// The value of option `key` in INI text as to_ini() writes it ("" when absent): a checkpoint's
// stored options.
std::string ini_value(const std::string& ini, const std::string& key);

// The other model's options given values of their own ("--n-layer 12 is an option of --model gpt;
// the MLP leaves it unused"), "" when none: said, not refused (one INI file may serve both models).
std::string ignored_options(const Options& o);

// --optimizer and its hyper-parameters.
OptimizerSettings optimizer_settings(const Options& o);

// How each value is spelled ("gpt", "auto", "float32"): for the banner, messages and to_ini.
const char* name_of(ModelKind v);
const char* name_of(Activation v);
const char* name_of(Optimizer::Kind v);
const char* name_of(IoMode v);
const char* name_of(AllreduceAlgo v);
const char* name_of(Overlap v);
const char* name_of(DType v);
const char* name_of(OnNonfinite v);
const char* name_of(MetricsFormat v);
const char* name_of(ProgressMode v);
const char* name_of(GpuHealthMode v);
const char* name_of(DeviceKind v);
const char* name_of(Precision v);
const char* name_of(AttentionKind v);
const char* name_of(Recompute v);
const char* name_of(GpuState v);
// The option's value from its spelling, as the parser takes it: for tools that accept the same
// values (dptrain-bench --modes). Throws UserError "--io 'x' is unknown; use direct, memory or
// collective".
IoMode parse_io_mode(const std::string& s);
Precision parse_precision(const std::string& s);
DeviceKind parse_device_kind(const std::string& s);

} // namespace dptrain
