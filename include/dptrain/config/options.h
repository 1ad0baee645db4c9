// Every option dptrain accepts (declared once in options.cpp), from argv and a --config INI file.
// Not for: checks that need the world size or the data (the trainer does those).
#pragma once

#include "dptrain/comm/types.h"
#include "dptrain/data/io_mode.h"
#include "dptrain/model/gpt.h"
#include "dptrain/model/optim.h"

#include <string>
#include <vector>

namespace dptrain {

// Typed once here so no component compares option strings; spelled as name_of says.
enum class ModelKind { mlp, gpt, llama };
// gpt and llama: a decoder over token shards (GptConfig::arch tells them apart).
inline bool language_model(ModelKind k) { return k != ModelKind::mlp; }

// The most compute threads a rank (or generate, serve) may ask for with --threads: far past any
// machine's cores per rank, and below what libgomp and OpenBLAS can start (100000 ended in a crash).
constexpr int kMaxThreads = 256;
enum class DeviceKind { cpu, cuda, automatic };
enum class GpuState { automatic, device, host };
enum class Overlap { on, off, automatic };
enum class GpuHealthMode { automatic, on, off };
enum class OnNonfinite { stop, skip };
enum class MetricsFormat { jsonl, emf };
enum class ProgressMode { automatic, tty, plain };
enum class AttentionKind { matmul, flash };
enum class ResumeMode { none, latest, path };           // --resume none | auto | PATH

// --batch-size auto, until the run (or dptrain plan) chooses it from the memory plan.
constexpr int kBatchAuto = -1;
// --batch-size auto on the CPU takes no more than this (the default): a larger batch buys a CPU
// no speed, only memory.
constexpr int kCpuAutoBatch = 64;

struct Options {
    // The help text in options.cpp says what each does; notes here are units and sentinels.
    std::string config;
    ModelKind model;
    std::string hidden;          // "256,256"
    std::vector<int> hidden_sizes;
    Activation activation;
    int n_layer, n_head, n_embd, block_size, vocab_size;  // gpt, llama; vocab_size 0 = the data's
    int n_kv_head, ffn_hidden;    // llama; 0 = n_head, 0 = llama_ffn_hidden(n_embd)
    double rope_theta, norm_eps;  // llama
    bool untie_embeddings;        // llama
    std::string rope_scaling;     // llama: "none" or "llama3:FACTOR,LOW,HIGH,ORIGINAL"
    std::string data;
    std::string stage_dir;  // "" = read --data in place
    bool verify_data;
    int prefetch;
    int io_threads;    // per rank
    long shuffle_block;  // 1 = per-sample permutation
    IoMode io;
    long steps;
    int batch_size;  // per rank and micro-batch; kBatchAuto until chosen
    int grad_accum;
    long global_batch_tokens;  // gpt; sets grad_accum from the ranks; 0: none
    long global_batch;         // samples (windows) a step; sets batch_size and grad_accum from the ranks; 0: none
    Optimizer::Kind optimizer;
    double lr, min_lr_ratio;
    long warmup_steps;
    double momentum, beta1, beta2, eps, weight_decay, grad_clip;
    bool shard_optimizer;  // ZeRO-1
    unsigned long seed;
    long stop_after;  // steps of this run; 0 = never
    int ranks_per_node;  // 0 = the real nodes
    int threads;         // per rank; 0 = cores of the node / local ranks
    AllreduceAlgo allreduce;
    double bucket_mb;
    Overlap overlap;
    DType grad_dtype;       // on the wire
    std::string run_dir, checkpoint_dir;
    std::string resume;      // as given
    ResumeMode resume_mode;
    std::string init_from;   // "" = random init
    long checkpoint_every;
    int keep_checkpoints;
    bool overwrite_checkpoints;
    bool async_checkpoint;
    double lock_wait;            // seconds
    double step_timeout;       // seconds; 0 = no watchdog
    OnNonfinite on_nonfinite;
    std::string inject_fault;  // RANK:STEP:KIND,... (tests)
    std::string promote_if;    // "val_loss<=1.5,..." (parse_promote_if); "" = off
    int keep_promoted;         // promotions kept in force (the oldest withdrawn); 0 = all
    bool preflight;
    bool force_memory;         // train although the memory plan says the run does not fit
    long log_every, eval_every, eval_max;
    std::string eval_task;  // multiple-choice items scored at each evaluation (GPT); "" = none
    double peak_gflops;  // per rank; 0 = measure at start
    std::string metrics;
    bool metrics_required;  // a failed metrics write stops the run (exit 2) rather than warning
    std::string trace;    // "" = off
    long profile_ops;     // 0 = off
    MetricsFormat metrics_format;
    std::string metrics_namespace, job_name;  // "" = from the launcher
    bool tensorboard;
    ProgressMode progress;
    GpuHealthMode gpu_health;
    DeviceKind device;
    Precision precision;     // matmul operands
    AttentionKind attention;
    Recompute recompute;
    GpuState gpu_state;      // with --device cuda

    std::string to_ini() const;  // every option, resolved
};

struct ParseResult {
    Options opts;
    bool help = false;
    bool version = false;
    std::string help_text;
};

// Throws UserError with one line naming the option (or file) and the fix.
ParseResult parse_options(int argc, const char* const* argv);
// For shell completion: "--name\tVALUES" per line ("--device\tcpu cuda auto").
std::string option_listing();

// From to_ini() text (a checkpoint's stored options); "" when absent.
std::string ini_value(const std::string& ini, const std::string& key);

// The other model's options that were set; said, not refused: one INI file may serve both models.
std::string ignored_options(const Options& o);

OptimizerSettings optimizer_settings(const Options& o);

const char* name_of(ModelKind v);
// The decoder --model gpt or llama asks for, over vocab_size tokens (flash attention and recompute
// as the options say). Training and the inference commands build it from here alone.
GptConfig lm_config(const Options& o, int vocab_size);
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
// As the parser takes them, for tools with the same values; throws UserError listing the choices.
IoMode parse_io_mode(const std::string& s);
Precision parse_precision(const std::string& s);
DeviceKind parse_device_kind(const std::string& s);

} // namespace dptrain
