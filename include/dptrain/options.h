// Every option dptrain accepts: declared once (name, default, help) in options.cpp, read from the
// command line and from an INI file given by --config (the command line wins), and validated.
// Not for: checks that need the world size or the data (the trainer does those).
#pragma once

#include <string>
#include <vector>

namespace dptrain {

struct Options {
    // general
    std::string config;  // INI file; same names as the command line, without the dashes
    // model
    std::string model;           // mlp | gpt
    std::string hidden;          // "256,256": widths of the hidden layers
    std::vector<int> hidden_sizes; // parsed from hidden
    std::string activation;      // relu | gelu
    int n_layer, n_head, n_embd, block_size, vocab_size;  // gpt; vocab_size 0 = the data's
    // data
    std::string data;  // directory holding train-*-of-*.h5 and val-*-of-*.h5
    std::string stage_dir;  // node-local directory to copy --data into first; "" = read --data in place
    int prefetch;      // batches read ahead by the background readers
    int io_threads;    // reader threads per rank
    long shuffle_block;  // samples shuffled as one unit (1 = per-sample permutation)
    std::string io;    // direct | memory | collective
    // training
    long steps;
    int batch_size;  // per rank; the global batch is batch_size * ranks
    std::string optimizer;  // adamw | sgd
    double lr, min_lr_ratio;
    long warmup_steps;
    double momentum, beta1, beta2, eps, weight_decay, grad_clip;
    unsigned long seed;
    long stop_after;  // stop (with a checkpoint) after this many steps of this run; 0 = never
    // parallel
    int ranks_per_node;  // 0 = the real nodes; K = simulate nodes of K ranks
    int threads;         // compute threads per rank; 0 = cores of the node / local ranks
    std::string allreduce;  // flat | hierarchical | auto
    double bucket_mb;       // gradient bucket size
    std::string overlap;    // on | off | auto: all-reduce buckets while backward runs
    std::string grad_dtype;  // float32 | bf16 on the wire
    // checkpoints
    std::string run_dir, checkpoint_dir, resume;
    long checkpoint_every;
    int keep_checkpoints;
    bool overwrite_checkpoints;  // a fresh run may delete the checkpoints already in checkpoint_dir
    bool async_checkpoint;       // write checkpoints on a background thread
    // reliability
    double step_timeout;       // seconds; 0 = no watchdog
    std::string on_nonfinite;  // skip | stop
    std::string inject_fault;  // RANK:STEP:KIND,... (tests)
    bool preflight;            // run the doctor's checks first; stop on a fatal problem
    // output
    long log_every, eval_every, eval_max;
    double peak_gflops;  // per rank, for MFU; 0 = measure at start
    std::string metrics;  // JSON lines; default RUN_DIR/metrics.jsonl
    std::string trace;    // Chrome trace per rank (FILE-rankNNNNN.json); "" = off
    long profile_ops;     // the step whose forward and backward are timed op by op; 0 = off
    std::string metrics_format;  // jsonl | emf (CloudWatch Embedded Metric Format)
    std::string metrics_namespace, job_name;  // EMF namespace and "job" dimension ("" = from the launcher)
    std::string progress;  // auto | tty | plain
    std::string gpu_health;  // auto | on | off
    std::string device;      // cpu | cuda | auto
    std::string precision;   // fp32 | bf16 (matmul operands)
    std::string attention;   // matmul | flash (GPT attention's kernels)
    std::string gpu_state;   // auto | device | host: where parameters and optimizer state live with --device cuda

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

} // namespace dptrain
