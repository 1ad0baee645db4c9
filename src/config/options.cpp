// Option declarations (each exactly once) and INI + command line parsing.
// Not for: the checks of the values (option_checks.cpp), or anything that needs MPI or the data;
// those checks live in the trainer.
#include "dptrain/config/options.h"

#include "registry.h"

#include "dptrain/config/argv.h"
#include "dptrain/config/option_checks.h"
#include "dptrain/core/error.h"
#include "dptrain/model/llama.h"
#include "dptrain/core/files.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace dptrain {

using config::Registry;
namespace po = config::po;

namespace {

// The options in --help's order, in three groups: the model and its data; the step (batch,
// optimizer, schedule, communication); the run around it (checkpoints, faults, metrics, device).
void declare_model_and_data(Registry<Options>& r, Options& o) {
    using S = std::string;
    r.choice<ModelKind>("model", &Options::model, o, ModelKind::mlp, "model kind: mlp (classifier on tabular shards) | gpt (GPT-2 language "
             "model on token shards) | llama (Llama-style language model: RMSNorm, rotary positions, SwiGLU, "
             "grouped-query attention, no biases)", "is not a model kind");
    r.add<S>("hidden", &Options::hidden, o, "256,256", "MLP hidden layer widths, comma separated");
    r.choice<Activation>("activation", &Options::activation, o, Activation::relu, "MLP activation: relu | gelu");
    r.add<int>("n-layer", &Options::n_layer, o, 4, "GPT: transformer blocks");
    r.add<int>("n-head", &Options::n_head, o, 4, "GPT: attention heads (must divide --n-embd)");
    r.add<int>("n-embd", &Options::n_embd, o, 128, "GPT: channels");
    r.add<int>("block-size", &Options::block_size, o, 64, "GPT: context length in tokens");
    r.add<int>("n-kv-head", &Options::n_kv_head, o, 0,
               "Llama: key/value heads (grouped-query attention), dividing --n-head; 0 = --n-head");
    r.add<int>("ffn-hidden", &Options::ffn_hidden, o, 0,
               "Llama: SwiGLU's hidden width; 0 = 8 * n_embd / 3 rounded up to a multiple of 64");
    r.add<double>("rope-theta", &Options::rope_theta, o, 10000.0, "Llama: rotary position base (Llama 3: 500000)");
    r.add<double>("norm-eps", &Options::norm_eps, o, 1e-5, "Llama: RMSNorm's epsilon");
    r.add<S>("rope-scaling", &Options::rope_scaling, o, "none",
             "Llama: rotary frequency scaling: none | llama3:FACTOR,LOW_FREQ_FACTOR,HIGH_FREQ_FACTOR,ORIGINAL_POSITIONS "
             "(Llama 3.1's: llama3:8,1,4,8192)");
    r.flag("untie-embeddings", &Options::untie_embeddings, o,
           "Llama: an output head of its own (lm_head, as Llama 2 and 3) instead of the token embedding's transpose");
    r.add<int>("vocab-size", &Options::vocab_size, o, 0,
               "GPT: vocabulary size; 0 = the data's (a larger value pads the embedding table)");
    r.add<S>("data", &Options::data, o, "data/synth",
             "dataset directory with train-NNNNN-of-NNNNN.h5 and val-NNNNN-of-NNNNN.h5 shards");
    r.add<int>("prefetch", &Options::prefetch, o, 2, "steps' batches the background readers keep ready (each --grad-accum micro-batches; at least --io-threads)");
    r.add<S>("stage-dir", &Options::stage_dir, o, "",
             "copy --data to DIR/<name of --data> on node-local storage before training (local rank 0 of each node "
             "copies, its other ranks wait), verify it (sizes, and SHA256SUMS when the source has one), reuse a valid "
             "earlier copy, and train from the copy");
    r.flag("verify-data", &Options::verify_data, o,
           "before training, check --data (after --stage-dir, the copy) against its SHA256SUMS: every shard listed and "
           "every file's SHA-256, the node's ranks sharing the hashing; `dptrain-data verify DIR` writes the manifest");
    r.choice<IoMode>("io", &Options::io, o, IoMode::direct,
             "how ranks read shards: direct (each rank its own rows or windows: pread of contiguous shards, HDF5 "
             "otherwise) | memory (each node loads the training split once into memory its ranks share; tabular and "
             "token shards) | collective (MPI-IO collective reads through parallel HDF5, in the training thread; "
             "tabular shards)");
    r.add<int>("io-threads", &Options::io_threads, o, 1,
               "reader threads per rank, each with its own file handles, reading different steps' batches "
               "(more hide a slow filesystem's latency; HDF5's own reads of chunked or compressed shards are "
               "serialised, the direct reads of contiguous shards are not)");
    r.add<long>("shuffle-block", &Options::shuffle_block, o, 1,
                "sample order: 1 = a fresh permutation of all samples each epoch; N > 1 = blocks of N consecutive "
                "samples are shuffled as units (the block grid shifted each epoch), so each rank reads runs of N rows "
                "in one call each; for storage that is slow at small random reads, and only when the rows' order on "
                "disk carries no meaning (rows sorted by label or by time would make biased batches)");
}

void declare_step(Registry<Options>& r, Options& o) {
    r.add<long>("steps", &Options::steps, o, 200, "total optimizer steps of the training run");
    r.count_or_auto("batch-size", &Options::batch_size, o, 64, kBatchAuto,
                    "samples per rank per micro-batch; the global batch is batch-size x ranks x --grad-accum. auto: "
                    "the largest the memory plan fits in 90% of the GPU's free memory (on the CPU: of the host's "
                    "share, and at most 64), the same on every rank; with --global-batch, the largest micro-batch "
                    "up to it that divides each rank's share");
    r.add<int>("grad-accum", &Options::grad_accum, o, 1,
               "micro-batches per optimizer step: their gradients are summed on each rank and all-reduced once, "
               "on the last one (the loss and the learning-rate schedule count optimizer steps)");
    r.add<long>("global-batch", &Options::global_batch, o, 0,
                "samples (GPT: windows) per optimizer step, kept on any rank count that divides it: each rank takes "
                "its share in micro-batches of the largest size up to --batch-size that divides it (--grad-accum "
                "of them), so a run resumed or relaunched on other ranks trains the same batches; 0 = --batch-size x "
                "ranks x --grad-accum");
    r.add<long>("global-batch-tokens", &Options::global_batch_tokens, o, 0,
                "GPT: tokens per optimizer step; sets --grad-accum to this / (ranks x --batch-size x --block-size), "
                "which must divide it; 0 = use --grad-accum");
    r.choice<Optimizer::Kind>("optimizer", &Options::optimizer, o, Optimizer::Kind::adamw, "adamw | sgd (with momentum)");
    r.add<double>("lr", &Options::lr, o, 1e-3, "peak learning rate");
    r.add<double>("min-lr-ratio", &Options::min_lr_ratio, o, 0.1,
                  "cosine decay toward lr x min-lr-ratio, which step --steps + 1 would reach (the last step's "
                  "rate is a little above it)");
    r.add<long>("warmup-steps", &Options::warmup_steps, o, 10, "linear warmup steps");
    r.add<double>("momentum", &Options::momentum, o, 0.9, "SGD momentum");
    r.add<double>("beta1", &Options::beta1, o, 0.9, "AdamW beta1");
    r.add<double>("beta2", &Options::beta2, o, 0.999, "AdamW beta2");
    r.add<double>("eps", &Options::eps, o, 1e-8, "AdamW epsilon");
    r.add<double>("weight-decay", &Options::weight_decay, o, 0.0,
                  "weight decay of weight matrices (not biases): decoupled for adamw, L2 through the momentum for sgd");
    r.add<double>("grad-clip", &Options::grad_clip, o, 1.0, "clip the global gradient norm; 0 = off");
    r.flag("shard-optimizer", &Options::shard_optimizer, o,
           "ZeRO stage 1: each rank keeps 1/ranks of the optimizer state and updates that share of the parameters; "
           "gradients are reduce-scattered and the parameters all-gathered, by --allreduce's path on the host, by "
           "NCCL over all ranks with the state on the GPU (checkpoints hold the whole state, so a run resumes on any number of ranks, sharded or not)");
    r.add<unsigned long>("seed", &Options::seed, o, 1234, "seed for initialisation and sample order");
    r.add<long>("stop-after", &Options::stop_after, o, 0,
                "end this run after N steps with a checkpoint (time-boxed jobs); 0 = run to --steps");
    r.add<int>("ranks-per-node", &Options::ranks_per_node, o, 0,
               "simulate nodes of K ranks on one machine; 0 = use the real nodes");
    r.add<int>("threads", &Options::threads, o, 0,
               "compute threads per rank; 0 = the cores the launcher bound the rank to (unbound: the host's cores / "
               "its ranks)");
    r.choice<AllreduceAlgo>("allreduce", &Options::allreduce, o, AllreduceAlgo::automatic,
             "gradient all-reduce: flat (MPI over all ranks) | hierarchical (shared memory in the node, then "
             "MPI across nodes) | auto (by topology and message size); with gradients on the GPU: flat and auto "
             "are one NCCL all-reduce, hierarchical is NCCL reduce-scatter in the node, all-reduce across "
             "nodes, all-gather");
    r.add<double>("bucket-mb", &Options::bucket_mb, o, 4.0, "gradient bucket size in MiB");
    r.choice<Overlap>("overlap", &Options::overlap, o, Overlap::automatic,
             "all-reduce each bucket while backward continues: on | off | auto (on the host path, on when the "
             "node has a spare core per rank for the communication thread; with gradients on the GPU, auto "
             "and on start each bucket's NCCL sum during backward)");
    r.choice<DType>("grad-dtype", &Options::grad_dtype, o, DType::f32,
             "gradient type on the wire: float32 | bf16 (half the bytes; sums stay float32); the host path's: "
             "gradients on the GPU are summed in float32 by NCCL");
}

void declare_run(Registry<Options>& r, Options& o) {
    using S = std::string;
    r.add<S>("run-dir", &Options::run_dir, o, "runs/local", "where metrics and checkpoints go");
    r.add<S>("checkpoint-dir", &Options::checkpoint_dir, o, "",
             "checkpoint directory (shared filesystem); default RUN_DIR/checkpoints");
    r.add<long>("checkpoint-every", &Options::checkpoint_every, o, 100,
                "checkpoint every N steps (and at the end); 0 = only at the end");
    r.add<int>("keep-checkpoints", &Options::keep_checkpoints, o, 3,
               "keep the newest K checkpoints, and every promoted one (servers may load it): with --promote-if "
               "they add up, one per evaluation that passes, until their promotions are withdrawn");
    r.add<S>("resume", &Options::resume, o, "none",
             "none | auto (newest complete checkpoint, if any) | PATH of a checkpoint file, or of a run directory "
             "for its newest (later checkpoints in --checkpoint-dir are then moved aside: *.later-branch)");
    r.add<S>("init-from", &Options::init_from, o, "",
             "start a fresh run (one not resumed from a checkpoint) from GPT-2 weights in Hugging Face's layout: a "
             "directory with model.safetensors and config.json (dptrain-ckpt export writes one), or a .safetensors "
             "file; vocabulary and shapes must match the run's");
    r.flag("overwrite-checkpoints", &Options::overwrite_checkpoints, o,
           "a run that does not resume may delete the checkpoints already in --checkpoint-dir");
    r.flag("async-checkpoint", &Options::async_checkpoint, o,
           "copy parameters and optimizer state to host memory and write the checkpoint on a background thread");
    r.add<double>("lock-wait", &Options::lock_wait, o, 120.0,
                  "one run at a time per --checkpoint-dir (a lock held by rank 0): wait this many seconds for "
                  "another run holding it to end (a requeued job's predecessor), then stop");
    r.add<double>("step-timeout", &Options::step_timeout, o, 900.0,
                  "abort the job, naming the stuck rank and phase, when a step (or an evaluation or checkpoint) takes "
                  "longer than this many seconds (set-up: this plus --lock-wait); 0 = never");
    r.choice<OnNonfinite>("on-nonfinite", &Options::on_nonfinite, o, OnNonfinite::stop,
             "a NaN/Inf loss or gradient: stop (exit 4 with a message) | skip (leave the parameters, go on)");
    r.flag("force-memory", &Options::force_memory, o,
           "train although the memory plan says the run needs more than this rank's memory (the machine's "
           "available or the cgroup's limit, shared by the node's ranks); without it such a run is refused at "
           "start-up rather than killed for lack of memory");
    r.flag("preflight", &Options::preflight, o,
           "check the environment first, as `dptrain doctor` does, and stop on a fatal problem");
    r.add<S>("promote-if", &Options::promote_if, o, "",
             "promote each checkpoint whose evaluation meets this (e.g. \"val_loss<=1.5\"; several: "
             "comma-separated, all must hold) for servers following promotions (dptrain serve --follow promoted), "
             "with the numbers as its reason; that step gets a checkpoint if it had none");
    r.add<int>("keep-promoted", &Options::keep_promoted, o, 0,
               "with --promote-if, keep the newest N promotions in force: each new one withdraws the oldest past "
               "N, whose checkpoint the rotation may then remove; 0 = all (keep N above --canary-seconds over the "
               "time between evaluations, or stable servers have none old enough)");
    r.add<S>("inject-fault", &Options::inject_fault, o, "",
             "for tests: RANK:STEP:KIND[,...] with KIND kill | hang | nan | corrupt-checkpoint | io-error | slow "
             "(from STEP on, the rank's forward takes 20 ms longer: a straggler) | slow-read (from STEP on, each of "
             "the rank's batch reads takes 20 ms longer) | slow-checkpoint (from STEP on, each of rank 0's "
             "checkpoints takes 3 s longer) | term-in-forward, term-in-backward (the rank sends itself SIGTERM right "
             "after that pass of STEP) | stage-hang (STEP 1: with --stage-dir, the rank's copy stops after its first "
             "piece, as on a filesystem that hangs) | stage-slow (STEP 1: each piece of its copy takes 2 s longer)");
}

// What a run reports and where it computes.
void declare_output(Registry<Options>& r, Options& o) {
    using S = std::string;
    r.add<long>("log-every", &Options::log_every, o, 10, "print a step line every N steps");
    r.add<long>("eval-every", &Options::eval_every, o, 100,
                "evaluate on the validation shards every N steps and after step --steps; 0 = only after step --steps");
    r.add<long>("eval-max", &Options::eval_max, o, 0, "evaluate on at most N validation samples; 0 = all");
    r.add<S>("eval-task", &Options::eval_task, o, "",
             "GPT: at each evaluation also score these multiple-choice items (JSON lines, as dptrain eval --task "
             "reads them) by log-likelihood, on this rank's device; their acc, acc_norm and acc_tokens go to the "
             "eval line, metrics and TensorBoard, and --promote-if may ask for them");
    r.add<double>("peak-gflops", &Options::peak_gflops, o, 0.0,
                  "peak GFLOP/s of one rank for the MFU column; 0 = measure sgemm at start");
    r.add<S>("metrics", &Options::metrics, o, "", "JSON-lines metrics file; default RUN_DIR/metrics.jsonl");
    r.flag("metrics-required", &Options::metrics_required, o,
           "a failed write of the metrics file (a full disk, a quota, a lost mount) stops the run at its next step "
           "with a checkpoint and exit 2, rather than a warning and a run that goes on without its metrics");
    r.choice<MetricsFormat>("metrics-format", &Options::metrics_format, o, MetricsFormat::jsonl,
             "jsonl | emf: the same records in CloudWatch Embedded Metric Format (one JSON object per line, which "
             "the CloudWatch agent turns into metrics), plus one record per rank per step line with its phase times");
    r.flag("tensorboard", &Options::tensorboard, o,
           "also write TensorBoard event files into --run-dir (loss, learning rate, norm, throughput, MFU, each "
           "phase's share of the step, evaluation): tensorboard --logdir over a folder of run directories shows "
           "each run");
    r.add<S>("metrics-namespace", &Options::metrics_namespace, o, "dptrain", "CloudWatch namespace of the EMF metrics");
    r.add<S>("job-name", &Options::job_name, o, "",
             "the \"job\" dimension of the EMF metrics; default $SLURM_JOB_ID, else the basename of --run-dir");
    r.choice<DeviceKind>("device", &Options::device, o, DeviceKind::cpu,
             "where the model computes: cpu | cuda (the MLP or GPT on the rank's GPU, one per rank of the host; "
             "where parameters and optimizer live: --gpu-state; the CUDA path has not yet been run on a GPU: "
             "check it with tests/gpu/run.sh) | auto (cuda when a GPU is visible, else cpu, saying why)");
    r.choice<Precision>("precision", &Options::precision, o, Precision::fp32,
             "matmul precision: fp32 | bf16 (mixed precision: every matmul of the model takes bf16-rounded weights, "
             "activations and output gradients and sums in fp32, attention's products take TF32 operands, and "
             "the GPT keeps in bf16 its fc output, its logits, the input gradients its LayerNorms' backward take and, "
             "with --attention flash, attention's output and its gradient; parameters, gradients and optimizer "
             "state stay fp32; on the CPU the rounding is emulated at fp32 speed)");
    r.choice<AttentionKind>("attention", &Options::attention, o, AttentionKind::matmul,
             "GPT attention: matmul (the T x T scores and softmax as matrices, kept for backward; products as "
             "--precision says) | flash (key tiles of 64 with a running softmax, nothing T x T kept, operands "
             "bf16 on the tensor cores and sums fp32; needs --precision bf16 and a head size of 16, 32, 64 or 128; "
             "checked on a GPU by tests/gpu/run.sh)");
    r.choice<Recompute>("recompute", &Options::recompute, o, Recompute::none,
             "GPT activations backward recomputes instead of keeping them from the forward: none | attention "
             "(each layer's T x T softmax, or flash attention's statistics) | block (everything of a block but its "
             "input: one more forward of each block in backward); gradients are bit-identical, the banner gives "
             "the activation bytes");
    r.choice<GpuState>("gpu-state", &Options::gpu_state, o, GpuState::automatic,
             "with --device cuda, where parameters, gradients and optimizer state live: device (the GPU's own "
             "buffers; gradients summed with NCCL, the update on the GPU; host copies only for checkpoints) | host "
             "(copied to and from the GPU every step; the all-reduce and optimizer of the CPU path) | auto (device "
             "when every rank has a GPU and, with several ranks, the build has NCCL; else host, saying why)");
    r.choice<GpuHealthMode>("gpu-health", &Options::gpu_health, o, GpuHealthMode::automatic,
             "each rank's GPU utilisation, memory, temperature and power from NVML (loaded at run time) at every step "
             "line, in the metrics: auto (when NVML finds the rank's GPU) | on (an error without it) | off");
    r.choice<ProgressMode>("progress", &Options::progress, o, ProgressMode::automatic,
             "rank 0's progress: tty (a status line updated in place between step lines) | plain (step lines only, "
             "for batch logs) | auto (tty when the output is a terminal)");
    r.add<S>("trace", &Options::trace, o, "",
             "write a Chrome trace of every step's phases to FILE-rankNNNNN.json on each rank (merge them with "
             "dptrain-report trace); a run resumed from step S writes FILE-fromSSSSSSSS-rankNNNNN.json");
    r.add<long>("profile-ops", &Options::profile_ops, o, 0,
                "time step N's forward and backward op by op (matmul, attention, layernorm, ...) and print where "
                "rank 0's time went; on a GPU by CUDA events around each op; 0 = off");
}

void declare(Registry<Options>& r, Options& o) {
    declare_model_and_data(r, o);
    declare_step(r, o);
    declare_run(r, o);
    declare_output(r, o);
}

// Boost formats its error messages by replacing placeholders such as %value% with the offending
// text until none is left; a token that itself contains a placeholder makes that loop endless
// (found by tests/fuzz/fuzz_options). Such text is refused before Boost sees it.
void refuse_placeholders(const std::string& text, const std::string& where) {
    for (const char* tag : {"%canonical_option%", "%option%", "%value%", "%prefix%", "%original_token%", "%invalid_line%"})
        if (text.find(tag) != std::string::npos)
            throw UserError(strfmt("%s contains '%s', which the option parser cannot handle; remove it", where.c_str(), tag));
}

// Boost's messages name the option ("unrecognised option '--bach-size'"); add the fix.
std::string with_fix(const std::string& where, const po::error& e) {
    return where + e.what() + "; see " + runnable("dptrain") + " --help for the options and their values";
}

} // namespace

static void make_registry(Registry<Options>& general, Registry<Options>& r, Options& o) {
    general.desc.add_options()("help,h", "print this help and exit")("version", "print the version and exit")(
        "config", po::value<std::string>(&o.config)->default_value(""),
        "INI file of options (name = value, names as below without dashes); the command line wins");
    declare(r, o);
}

ParseResult parse_options(int argc, const char* const* argv) {
    ParseResult res;
    Registry<Options> general("General");
    Registry<Options> r("Training options");
    make_registry(general, r, res.opts);
    po::options_description all;
    all.add(general.desc).add(r.desc);

    for (int i = 1; i < argc; ++i) refuse_placeholders(argv[i], strfmt("argument '%s'", argv[i]));
    po::variables_map vm;
    try {
        po::parsed_options parsed = parse_argv(argc, argv, all,
                                               "dptrain's commands (generate, serve, eval, plan, doctor, stage, options) come "
                                               "first; options start with --, and an INI file follows --config");
        // A repeated option: the last one wins (scripts append overrides to a base command).
        auto& v = parsed.options;
        for (size_t i = v.size(); i-- > 0;)
            for (size_t j = 0; j < i; ++j)
                if (v[j].string_key == v[i].string_key) {
                    v.erase(v.begin() + j);
                    --i;
                    --j;
                }
        po::store(parsed, vm);
    } catch (const po::unknown_option& e) {
        // Names are taken whole: the options this one begins (--batch: --batch-size) are named.
        std::string name = e.get_option_name(), like;
        if (name.rfind("--", 0) != 0) name.clear();  // a short option (-b) is no long name's beginning
        while (!name.empty() && name[0] == '-') name.erase(0, 1);
        for (const auto& d : all.options())
            if (!name.empty() && d->long_name().rfind(name, 0) == 0) like += (like.empty() ? "" : ", --") + d->long_name();
        if (like.empty()) throw UserError(with_fix("", e));
        throw UserError(strfmt("%s (did you mean --%s? option names are taken whole); see %s --help", e.what(),
                               like.c_str(), runnable("dptrain").c_str()));
    } catch (const po::error& e) {
        throw UserError(with_fix("", e));
    }
    if (vm.count("help")) {
        std::ostringstream s;
        s << "dptrain: data-parallel training with MPI\n\n"
          << "usage: mpirun -np N dptrain [--config FILE] [--option value ...]\n"
          << "       dptrain generate --checkpoint PATH [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]\n"
          << "       dptrain serve --checkpoint PATH [--host 127.0.0.1] [--port 8080]   (the completions API; serve "
             "--help)\n"
          << "       mpirun -np N dptrain eval --checkpoint PATH [--data SHARDS] [--task ITEMS.jsonl]   (loss and "
             "accuracy without training; eval --help)\n"
          << "       mpirun -np N dptrain doctor [--config FILE] [--option value ...]   (checks the environment)\n"
          << "       dptrain plan [--ranks N] [--gpu-memory 80GiB] [--config FILE] [--option value ...]   (memory per "
             "rank: what fits, the largest batch)\n"
          << "       dptrain stage SRC DEST | --check DIR | --write-sums DIR   (a dataset to local storage; stage "
             "--help)\n"
          << "       dptrain options   (every option, with its values where they are a closed set: for shell "
             "completion)\n\n"
          << all;
        res.help = true;
        res.help_text = s.str();
        return res;
    }
    if (vm.count("version")) {
        res.version = true;
        return res;
    }
    auto cfg = vm.find("config");
    if (cfg != vm.end() && !cfg->second.as<std::string>().empty()) {
        std::string path = cfg->second.as<std::string>();
        std::error_code ec;
        if (std::filesystem::is_directory(path, ec))
            throw UserError(strfmt("--config %s: is a directory, not an INI file; name a file (e.g. %s/local.ini)",
                                   path.c_str(), path.c_str()));
        std::ifstream in(path);
        if (!in)
            throw UserError(strfmt("--config %s: cannot open the file; check the path (configs/ holds examples)",
                                   path.c_str()));
        std::stringstream text;
        text << in.rdbuf();
        refuse_placeholders(text.str(), strfmt("config %s", path.c_str()));
        try {
            // store() keeps the first value seen, so the command line (stored above) wins.
            po::store(po::parse_config_file(text, r.desc, /*allow_unregistered=*/false), vm);
        } catch (const po::error& e) {
            throw UserError(with_fix(strfmt("config %s: ", path.c_str()), e));
        }
    }
    try {
        po::notify(vm);
    } catch (const po::error& e) {
        throw UserError(with_fix("", e));
    }
    validate_options(res.opts);
    return res;
}

OptimizerSettings optimizer_settings(const Options& o) {
    OptimizerSettings s;
    s.kind = o.optimizer;
    s.beta1 = o.beta1;
    s.beta2 = o.beta2;
    s.eps = o.eps;
    s.momentum = o.momentum;
    s.weight_decay = o.weight_decay;
    return s;
}

std::string option_listing() {
    Registry<Options> general("General");
    Registry<Options> r("Training options");
    Options scratch;
    make_registry(general, r, scratch);
    std::string out;
    for (const Registry<Options>* reg : {&general, &r})
        for (const auto& opt : reg->desc.options()) {
            const std::string& name = opt->long_name();
            const auto v = reg->values.find(name);
            out += "--" + name + (v == reg->values.end() ? "" : "\t" + v->second) + "\n";
        }
    return out;
}

std::string Options::to_ini() const {
    Registry<Options> general("General");
    Registry<Options> r("Training options");
    Options scratch;
    make_registry(general, r, scratch);
    std::string out;
    for (auto& [name, print] : r.printers) out += name + " = " + print(*this) + "\n";
    return out;
}

std::string ini_value(const std::string& ini, const std::string& key) {
    const std::string text = "\n" + ini;
    const size_t at = text.find("\n" + key + " = ");
    if (at == std::string::npos) return "";
    const size_t from = at + key.size() + 4;
    return text.substr(from, text.find('\n', from) - from);
}

GptConfig lm_config(const Options& o, int vocab_size) {
    GptConfig c;
    if (o.model == ModelKind::llama) {
        c.arch = DecoderArch::llama;
        c.n_kv_head = o.n_kv_head;
        c.ffn_hidden = o.ffn_hidden;
        c.rope_theta = (float)o.rope_theta;
        c.norm_eps = (float)o.norm_eps;
        c.tie_embeddings = !o.untie_embeddings;
        parse_rope_scaling(o.rope_scaling, &c.rope_scaling);  // checked by validate_options
    }
    c.vocab_size = vocab_size;
    c.block_size = o.block_size;
    c.n_layer = o.n_layer;
    c.n_head = o.n_head;
    c.n_embd = o.n_embd;
    c.flash_attention = o.attention == AttentionKind::flash;
    c.recompute = o.recompute;
    return c;
}

std::string ignored_options(const Options& o) {
    static const std::vector<std::string> gpt_only = {"n-layer",    "n-head",     "n-embd",
                                                      "block-size", "vocab-size", "global-batch-tokens"};
    static const std::vector<std::string> llama_only = {"n-kv-head", "ffn-hidden",       "rope-theta",
                                                        "norm-eps",  "untie-embeddings", "rope-scaling"};
    static const std::vector<std::string> mlp_only = {"hidden", "activation"};
    const char* argv[] = {"dptrain"};
    const std::string base = parse_options(1, argv).opts.to_ini(), now = o.to_ini();
    // The groups this kind leaves unused, each with the kind that uses it.
    std::vector<std::pair<const std::vector<std::string>*, const char*>> unused;
    if (o.model != ModelKind::mlp) unused.emplace_back(&mlp_only, "mlp");
    if (o.model == ModelKind::mlp) unused.emplace_back(&gpt_only, "gpt");
    if (o.model != ModelKind::llama) unused.emplace_back(&llama_only, "llama");
    std::string list, owners;
    int n = 0;
    for (const auto& [keys, owner] : unused) {
        bool any = false;
        for (const std::string& key : *keys) {
            const std::string v = ini_value(now, key);
            if (v == ini_value(base, key)) continue;
            list += (list.empty() ? "--" : ", --") + key + " " + v;
            ++n;
            any = true;
        }
        if (any) owners += (owners.empty() ? "--model " : " and --model ") + std::string(owner);
    }
    if (n == 0) return "";
    static const char* const kind_name[] = {"MLP", "GPT", "Llama"};
    return strfmt("%s %s of %s; the %s leaves %s unused", list.c_str(), n == 1 ? "is an option" : "are options",
                  owners.c_str(), kind_name[(int)o.model], n == 1 ? "it" : "them");
}

} // namespace dptrain
