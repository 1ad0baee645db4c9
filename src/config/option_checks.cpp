// Checks of the parsed options (each refusal names the option and what to give) and the values
// derived from them. Not for: parsing (options.cpp) or checks that need MPI or the data.
#include "dptrain/config/option_checks.h"

#include "dptrain/core/error.h"
#include "dptrain/model/llama.h"

#include <cmath>
#include <limits>
#include <set>
#include <sstream>

namespace dptrain {

namespace {

std::vector<int> parse_widths(const std::string& s) {
    std::vector<int> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        size_t used = 0;
        int v = 0;
        try {
            v = std::stoi(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != item.size() || v <= 0)
            throw UserError(strfmt("--hidden '%s': '%s' is not a positive width; give comma-separated "
                                   "widths such as --hidden 256,256",
                                   s.c_str(), item.c_str()));
        out.push_back(v);
    }
    return out;
}

void need(bool ok, const std::string& msg) {
    if (!ok) throw UserError(msg);
}

void validate_model_and_data(Options& o) {
    need(!o.data.empty(), "--data is empty; give the dataset's directory (dptrain-data makes one: data/README.md)");
    need(o.n_layer > 0 && o.n_head > 0 && o.n_embd > 0 && o.n_embd % o.n_head == 0,
         strfmt("--n-embd %d must be a multiple of --n-head %d, and --n-layer %d positive", o.n_embd, o.n_head, o.n_layer));
    need(o.block_size > 0, strfmt("--block-size %d must be positive", o.block_size));
    need(o.vocab_size >= 0, strfmt("--vocab-size %d must be >= 0", o.vocab_size));
    o.hidden_sizes = o.hidden.empty() ? std::vector<int>{} : parse_widths(o.hidden);
    need(o.attention != AttentionKind::flash || language_model(o.model),
         "--attention flash is for --model gpt or llama (the MLP has no attention)");
    need(o.attention != AttentionKind::flash || o.precision == Precision::bf16,
         "--attention flash takes bf16 operands; use it with --precision bf16 (or --attention matmul for fp32)");
    need(o.batch_size > 0 || o.batch_size == kBatchAuto, strfmt("--batch-size %d must be positive (or auto)", o.batch_size));
    need(o.grad_accum >= 1 && o.grad_accum <= 65536, strfmt("--grad-accum %d must be in 1..65536", o.grad_accum));
    need(o.global_batch_tokens >= 0, strfmt("--global-batch-tokens %ld must be >= 0", o.global_batch_tokens));
    need(o.global_batch >= 0, strfmt("--global-batch %ld must be >= 0", o.global_batch));
    need(o.global_batch_tokens == 0 || language_model(o.model),
         "--global-batch-tokens is for --model gpt or llama; the MLP's global batch is --batch-size x ranks x --grad-accum");
    need(o.prefetch >= 1 && o.prefetch <= 64, strfmt("--prefetch %d must be in 1..64", o.prefetch));
    need(o.io_threads >= 1 && o.io_threads <= 64, strfmt("--io-threads %d must be in 1..64", o.io_threads));
    need(o.shuffle_block >= 1 && o.shuffle_block <= (1l << 30),
         strfmt("--shuffle-block %ld must be in 1..2^30 samples", o.shuffle_block));
    need(o.io != IoMode::collective || o.io_threads == 1,
         strfmt("--io collective reads in the training thread; --io-threads %d must be 1 with it", o.io_threads));
    need(o.gpu_state != GpuState::device || o.device != DeviceKind::cpu,
         "--gpu-state device keeps the state on a GPU; with --device cpu leave it out (or use --device cuda)");
    need(o.recompute == Recompute::none || language_model(o.model),
         strfmt("--recompute %s is for --model gpt or llama; the MLP keeps only its layers' outputs", name_of(o.recompute)));
    need(o.init_from.empty() || language_model(o.model),
         "--init-from reads GPT-2 or Llama weights; it is for --model gpt or llama");
    need(o.io != IoMode::collective || !language_model(o.model),
         "--io collective reads tabular shards; token shards (--model gpt, llama) are read with --io direct or memory");
    need(o.n_kv_head >= 0 && (o.n_kv_head == 0 || o.n_head % o.n_kv_head == 0),
         strfmt("--n-kv-head %d must divide --n-head %d (each key/value head serves a group of query heads); 0 = one "
                "per query head",
                o.n_kv_head, o.n_head));
    need(o.ffn_hidden >= 0, strfmt("--ffn-hidden %d must be >= 0 (0: 8 * n_embd / 3 rounded up to 64)", o.ffn_hidden));
    RopeScaling scaling;
    need(parse_rope_scaling(o.rope_scaling, &scaling),
         strfmt("--rope-scaling '%s' is not none or llama3:FACTOR,LOW,HIGH,ORIGINAL with FACTOR > 0, HIGH > LOW > 0 "
                "and ORIGINAL > 0 (Llama 3.1's: llama3:8,1,4,8192)",
                o.rope_scaling.c_str()));
    need(o.rope_theta > 0 && o.norm_eps > 0,
         strfmt("--rope-theta %g and --norm-eps %g must be positive", o.rope_theta, o.norm_eps));
}

void validate_training(const Options& o) {
    need(o.steps > 0, strfmt("--steps %ld must be positive", o.steps));
    // The optimizer computes in float: a value valid only as a double gives a non-finite loss and
    // misleading advice. Why: docs/NOTES.md, "Note [option float checks]".
    const double float_max = std::numeric_limits<float>::max(), float_min = std::numeric_limits<float>::min();
    need(o.lr > 0 && o.lr <= float_max, strfmt("--lr %g must be positive and finite (as a float: below 3.4e38)", o.lr));
    need(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1, strfmt("--min-lr-ratio %g must be in [0, 1]", o.min_lr_ratio));
    need(o.warmup_steps >= 0, strfmt("--warmup-steps %ld must be >= 0", o.warmup_steps));
    auto below_one = [](double v) { return v >= 0 && (float)v < 1.0f; };  // 0.99999999 is 1 as a float
    need(below_one(o.momentum), strfmt("--momentum %.10g must be in [0, 1) as a float (at most 0.99999994)", o.momentum));
    need(below_one(o.beta1), strfmt("--beta1 %.10g must be in [0, 1) as a float (at most 0.99999994)", o.beta1));
    need(below_one(o.beta2), strfmt("--beta2 %.10g must be in [0, 1) as a float (at most 0.99999994)", o.beta2));
    need(o.eps >= float_min && o.eps <= float_max,
         strfmt("--eps %g must be a normal float: in [1.2e-38, 3.4e38] (a smaller one is flushed to 0)", o.eps));
    need(o.weight_decay >= 0 && std::isfinite(o.weight_decay),
         strfmt("--weight-decay %g must be >= 0 and finite", o.weight_decay));
    // AdamW scales weights by 1 - lr x weight-decay: at 1 or more it flips and grows them.
    need(o.optimizer != Optimizer::Kind::adamw || o.lr * o.weight_decay < 1,
         strfmt("--lr %g x --weight-decay %g = %g: AdamW scales the weights by 1 - that each step, so it must be below "
                "1 (usual: --weight-decay 0.1)",
                o.lr, o.weight_decay, o.lr * o.weight_decay));
    need(o.grad_clip >= 0 && std::isfinite(o.grad_clip),
         strfmt("--grad-clip %g must be >= 0 and finite (0 turns clipping off)", o.grad_clip));
    need(o.stop_after >= 0, strfmt("--stop-after %ld must be >= 0", o.stop_after));
    need(o.ranks_per_node >= 0, strfmt("--ranks-per-node %d must be >= 0", o.ranks_per_node));
    need(o.threads >= 0 && o.threads <= kMaxThreads,
         strfmt("--threads %d must be in 0..%d (0: the cores the launcher bound the rank to)", o.threads, kMaxThreads));
    // Beyond this the byte count overflows size_t; any value above the gradient is one bucket.
    need(o.bucket_mb > 0 && o.bucket_mb <= 1e6, strfmt("--bucket-mb %g must be in (0, 1e6]", o.bucket_mb));
}

// Also fills in the paths derived from --run-dir.
void validate_output(Options& o) {
    need(o.eval_max >= 0, strfmt("--eval-max %ld must be >= 0", o.eval_max));
    need(o.peak_gflops >= 0 && std::isfinite(o.peak_gflops),
         strfmt("--peak-gflops %g must be >= 0 and finite (0: measured at start)", o.peak_gflops));
    need(o.profile_ops >= 0 && o.profile_ops <= o.steps,
         strfmt("--profile-ops %ld must be a step of the run, 1 to --steps %ld (0 turns it off)", o.profile_ops,
                o.steps));
    need(o.lock_wait >= 0 && std::isfinite(o.lock_wait), strfmt("--lock-wait %g must be >= 0 and finite", o.lock_wait));
    need(o.step_timeout >= 0 && std::isfinite(o.step_timeout),
         strfmt("--step-timeout %g must be >= 0 and finite (0 turns the watchdog off)", o.step_timeout));
    need(o.checkpoint_every >= 0, strfmt("--checkpoint-every %ld must be >= 0", o.checkpoint_every));
    need(o.keep_checkpoints >= 1, strfmt("--keep-checkpoints %d must be >= 1", o.keep_checkpoints));
    need(o.log_every >= 1, strfmt("--log-every %ld must be >= 1", o.log_every));
    need(o.eval_every >= 0, strfmt("--eval-every %ld must be >= 0", o.eval_every));
    need(!o.run_dir.empty(), "--run-dir must not be empty");
    need(!o.metrics_namespace.empty() && o.metrics_namespace.size() <= 255 &&
             o.metrics_namespace.find(':') == std::string::npos,
         strfmt("--metrics-namespace '%s' must be 1 to 255 characters without ':' (a CloudWatch namespace)",
                o.metrics_namespace.c_str()));
    need(!o.resume.empty(), "--resume is empty; give auto, none, a ckpt-NNNNNNNN.h5 file or a run directory");
    o.resume_mode = o.resume == "none" ? ResumeMode::none : o.resume == "auto" ? ResumeMode::latest : ResumeMode::path;
    if (o.checkpoint_dir.empty()) o.checkpoint_dir = o.run_dir + "/checkpoints";
    if (o.metrics.empty()) o.metrics = o.run_dir + "/metrics.jsonl";
}

} // namespace

bool PromoteCondition::holds(double v) const {
    return op == "<=" ? v <= value : op == "<" ? v < value : op == ">=" ? v >= value : v > value;
}

std::vector<PromoteCondition> parse_promote_if(const std::string& text) {
    std::vector<PromoteCondition> out;
    std::stringstream ss(text);
    for (std::string part; std::getline(ss, part, ',');) {
        PromoteCondition c;
        const size_t at = part.find_first_of("<>");
        const size_t len = at != std::string::npos && at + 1 < part.size() && part[at + 1] == '=' ? 2 : 1;
        char* end = nullptr;
        if (at != std::string::npos) {
            c.metric = part.substr(0, at);
            c.op = part.substr(at, len);
            c.value = std::strtod(part.c_str() + at + len, &end);
            c.value_text = part.substr(at + len);
        }
        static const std::set<std::string> known = {"val_loss", "val_accuracy", "val_bits_per_byte",
                                                    "acc",      "acc_norm",     "acc_tokens"};
        if (at == std::string::npos || !known.count(c.metric) ||
            end == part.c_str() + at + len || *end != '\0' || !std::isfinite(c.value))
            throw UserError(strfmt("--promote-if '%s': '%s' is not a condition; give METRIC OP NUMBER, METRIC one of "
                                   "val_loss, val_accuracy, val_bits_per_byte, acc, acc_norm, acc_tokens (--eval-task's), OP one "
                                   "of <= < >= > (several: "
                                   "comma-separated, all must hold), e.g. --promote-if \"val_loss<=1.5\"",
                                   text.c_str(), part.c_str()));
        out.push_back(c);
    }
    return out;
}

void validate_options(Options& o) {
    validate_model_and_data(o);
    validate_training(o);
    validate_output(o);
    need(o.eval_task.empty() || language_model(o.model),
         "--eval-task scores items by a language model's log-likelihood: it needs --model gpt or llama");
    if (!o.promote_if.empty())
        for (const PromoteCondition& c : parse_promote_if(o.promote_if))
            need(c.metric.rfind("acc", 0) != 0 || !o.eval_task.empty(),
                 strfmt("--promote-if '%s' asks for %s, a score of multiple-choice items: give them with "
                        "--eval-task ITEMS.jsonl",
                        o.promote_if.c_str(), c.metric.c_str()));
    need(o.keep_promoted >= 0, strfmt("--keep-promoted %d must be >= 0 (0: keep every promotion)", o.keep_promoted));
}

std::vector<int> global_batch_rank_counts(long global_batch, int most) {
    std::vector<int> out;
    for (int r = 1; r <= most && r <= global_batch; ++r)
        if (global_batch % r == 0) out.push_back(r);
    return out;
}

std::string global_batch_rank_counts_text(long global_batch) {
    std::string text;
    for (int r : global_batch_rank_counts(global_batch, 4096)) text += (text.empty() ? "" : " ") + std::to_string(r);
    return text;
}

namespace {

// --global-batch N on `ranks` ranks: --batch-size the largest micro-batch up to it that divides
// each rank's share, --grad-accum the rest.
void resolve_global_batch(Options& o, int ranks) {
    if (o.global_batch_tokens > 0 || o.grad_accum != 1)
        throw UserError(strfmt("--global-batch %ld sets the micro-batches a step itself; give it without %s",
                               o.global_batch, o.global_batch_tokens > 0 ? "--global-batch-tokens" : "--grad-accum"));
    if (o.global_batch % ranks != 0)
        throw UserError(strfmt("--global-batch %ld does not split over %d ranks; run on a rank count that divides it "
                               "(up to 4096: %s)",
                               o.global_batch, ranks, global_batch_rank_counts_text(o.global_batch).c_str()));
    const long share = o.global_batch / ranks;
    long micro = std::min<long>(o.batch_size, share);
    while (share % micro != 0) --micro;
    if (share / micro > 65536)
        throw UserError(strfmt("--global-batch %ld needs %ld micro-batches a step on %d ranks (at most 65536); raise "
                               "--batch-size",
                               o.global_batch, share / micro, ranks));
    o.batch_size = (int)micro;
    o.grad_accum = (int)(share / micro);
}

} // namespace

void resolve_grad_accum(Options& o, int ranks) {
    if (o.batch_size == kBatchAuto) return;  // again once the batch is chosen
    if (o.global_batch > 0) return resolve_global_batch(o, ranks);
    if (o.global_batch_tokens <= 0) return;
    // Both given: one would silently replace the other.
    if (o.grad_accum != 1)
        throw UserError(strfmt("--global-batch-tokens %ld sets the micro-batches a step itself; give it or --grad-accum "
                               "%d, not both",
                               o.global_batch_tokens, o.grad_accum));
    const long per_micro = (long)ranks * o.batch_size * o.block_size;
    if (o.global_batch_tokens % per_micro != 0)
        throw UserError(strfmt("--global-batch-tokens %ld is not a multiple of ranks x --batch-size x --block-size = "
                               "%d x %d x %d = %ld; choose a multiple of %ld, or other sizes",
                               o.global_batch_tokens, ranks, o.batch_size, o.block_size, per_micro, per_micro));
    o.grad_accum = (int)std::min<long>(o.global_batch_tokens / per_micro, 65536);
    if (o.global_batch_tokens / per_micro > 65536)
        throw UserError(strfmt("--global-batch-tokens %ld needs %ld micro-batches a step (at most 65536); raise "
                               "--batch-size",
                               o.global_batch_tokens, o.global_batch_tokens / per_micro));
}

} // namespace dptrain
