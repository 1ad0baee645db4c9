// Checkpoints: resume (find on rank 0, share with every rank) and save, with the directory's lock.
// Not for: the file format and its atomic write (io/checkpoint.cpp).
#include "dptrain/train/checkpoints.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/io/hf_gpt2.h"
#include "dptrain/io/promotion.h"
#include "dptrain/io/reliability.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <cstdlib>

namespace dptrain {

Checkpoints::Checkpoints(const Options& o, int rank, RunIdentity id) : o_(o), rank_(rank), id_(std::move(id)) {
    if (rank == 0 && o.async_checkpoint) async_ = std::make_unique<AsyncCheckpointer>();
}

// --resume auto: the newest that verifies; damaged newer ones are moved aside. All damaged: refuse,
// rather than restart at step 1 and rotate them away.
void Checkpoints::resume_latest() {
    const std::string& dir = o_.checkpoint_dir;
    const std::vector<std::string> all = list_checkpoints(dir);
    std::vector<std::string> damaged;
    have_ = load_latest(dir, &found_, &resumed_from_, &damaged);
    if (!have_ && !all.empty()) {
        std::string why;
        for (const std::string& d : damaged) why += (why.empty() ? "" : "; ") + d;
        throw UserError(strfmt("--resume auto: none of the %zu checkpoints in %s is usable (%s); restore one from a "
                               "copy, or start afresh in another --checkpoint-dir (they are the run's only copies: "
                               "keep them until you know what is wrong)",
                               all.size(), dir.c_str(), why.c_str()));
    }
    for (size_t i = 0; i < damaged.size(); ++i)
        std::fprintf(stderr, "dptrain: warning: %s; moved aside to %s; resuming from the older %s\n",
                     damaged[i].c_str(), set_aside(all[i]).c_str(), resumed_from_.c_str());
}

// --resume PATH: later checkpoints belong to the branch this run leaves. Left in place the rotation
// (highest steps first) and --resume auto after a requeue would prefer them: moved aside. When PATH
// was --checkpoint-dir itself, the later ones were skipped as damaged.
void Checkpoints::set_aside_later(bool skipped_as_damaged) {
    withdraw_later();
    for (const std::string& p : list_checkpoints(o_.checkpoint_dir)) {
        if (checkpoint_step(p) <= found_.step) continue;
        if (skipped_as_damaged)
            std::fprintf(stderr, "dptrain: warning: %s does not verify (above); moved aside to %s\n", p.c_str(),
                         set_aside(p).c_str());
        else
            std::fprintf(stderr, "dptrain: warning: %s is later than --resume %s (step %ld); moved aside to %s\n",
                         p.c_str(), resumed_from_.c_str(), found_.step, set_aside(p, "later-branch").c_str());
    }
}

// Promotions of the steps this run writes again would stand for its new files: withdrawn.
void Checkpoints::withdraw_later() {
    std::vector<Promotion> active;
    try {
        active = read_promotions(o_.checkpoint_dir);
    } catch (const UserError& e) {
        std::fprintf(stderr, "dptrain: warning: %s; promotions left as they are\n", e.what());
        return;
    }
    for (Promotion p : active) {
        if (p.step <= found_.step) continue;
        p.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        p.reason = strfmt("a run resumed from step %ld writes this step again", found_.step);
        p.by = "dptrain --resume";
        append_promotion(o_.checkpoint_dir, "withdraw", p);
        std::fprintf(stderr, "dptrain: warning: withdrew the promotion of step %ld (%s)\n", p.step, p.reason.c_str());
    }
}

// Schedule, optimizer or arithmetic options changed since the checkpoint: allowed (a longer run, a
// tighter clip after a spike), but said, since the run no longer continues as it would have.
void Checkpoints::note_option_changes() const {
    const std::string now = o_.to_ini();
    std::string changed;
    for (const char* key : {"steps", "lr", "warmup-steps", "min-lr-ratio", "weight-decay", "grad-clip", "beta1", "beta2",
                            "eps", "momentum", "precision", "grad-dtype", "on-nonfinite"}) {
        const std::string was = ini_value(found_.options, key), is = ini_value(now, key);
        if (!was.empty() && was != is) changed += strfmt("%s--%s %s (the checkpoint's run: %s)", changed.empty() ? "" : ", ",
                                                         key, is.c_str(), was.c_str());
    }
    if (!changed.empty())
        std::printf("note: resuming at step %ld with %s: training follows the new values from here\n", found_.step,
                    changed.c_str());
}

// Samples follow from seed, step and set size: on a re-made set the run continues in the new set's
// order from another place in its epochs. Allowed, but said.
void Checkpoints::note_data_change() const {
    const long was = found_.train_samples, is = id_.train_samples, G = id_.global_batch, S = found_.step;
    if (was <= 0 || was == is) return;
    const long spe_was = (was + G - 1) / G, spe_is = (is + G - 1) / G;
    std::fprintf(stderr,
                 "dptrain: warning: --data %s holds %ld training samples, the checkpoint's run had %ld (its --data: %s): "
                 "from step %ld the samples follow the new set's order (epoch %ld, %ld steps in; it was epoch %ld, %ld "
                 "steps in); resume on the checkpoint's data to continue its order exactly\n",
                 o_.data.c_str(), is, was, ini_value(found_.options, "data").c_str(), S + 1, S / spe_is, S % spe_is,
                 S / spe_was, S % spe_was);
}

// Whether two paths name one directory (either may not exist yet).
static bool same_dir(const std::string& a, const std::string& b) {
    std::error_code ea, eb;
    const auto ca = std::filesystem::weakly_canonical(a, ea), cb = std::filesystem::weakly_canonical(b, eb);
    return !ea && !eb ? ca == cb : a == b;
}

Checkpoints::~Checkpoints() {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    if (run_lock_fd_ >= 0) ::close(run_lock_fd_);
}

void Checkpoints::find(const std::vector<float>& params, Optimizer& opt) {
    if (rank_ != 0) return;
    bool newest_of_checkpoint_dir = false;
    // Before anything there is touched: a requeued job's predecessor may still be writing.
    lock_fd_ = lock_checkpoint_dir(o_.checkpoint_dir, o_.lock_wait, preemption_requested);  // a stop: exit 75
    // The run directory too (its metrics, traces and stopped-by), unless it is the checkpoint
    // directory: a second run there with another --checkpoint-dir truncated the first's metrics.
    if (!same_dir(o_.run_dir, o_.checkpoint_dir))
        run_lock_fd_ = lock_checkpoint_dir(o_.run_dir, o_.lock_wait, preemption_requested, "--run-dir");
    dir_id_ = file_id(o_.checkpoint_dir);
    prepare_checkpoint_dir(o_.checkpoint_dir);
    if (o_.resume_mode == ResumeMode::none) {
        // A fresh run beside another run's checkpoints would rotate its own away and leave --resume
        // auto a stranger's: refuse unless told.
        auto old = list_checkpoints(o_.checkpoint_dir);
        if (!old.empty() && !o_.overwrite_checkpoints)
            throw UserError(strfmt("--checkpoint-dir %s already holds %zu checkpoints (newest %s); continue that run "
                                   "with --resume auto, delete them with --overwrite-checkpoints, or choose another "
                                   "--checkpoint-dir",
                                   o_.checkpoint_dir.c_str(), old.size(), old[0].c_str()));
        for (auto& p : old) std::remove(p.c_str());
        std::remove((o_.checkpoint_dir + "/" + kPromotionLog).c_str());  // they named the files just removed
    } else if (o_.resume_mode == ResumeMode::latest) {
        resume_latest();
    } else {
        resumed_from_ = o_.resume;
        try {
            found_ = load_checkpoint_or_newest(&resumed_from_, "--resume");
            // A directory of this run was given (the path now names its newest good file).
            std::error_code ec;
            newest_of_checkpoint_dir = resumed_from_ != o_.resume &&
                                       std::filesystem::equivalent(std::filesystem::path(resumed_from_).parent_path(),
                                                                   o_.checkpoint_dir, ec);
        } catch (const UserError& e) {
            throw UserError(std::string(e.what()) + " (--resume takes auto, none, a ckpt-NNNNNNNN.h5 file or a run "
                                                    "directory)");
        }
        have_ = true;
    }
    if (have_) {
        check_found(params, opt);
        note_option_changes();
        note_data_change();
        if (o_.resume_mode == ResumeMode::path) set_aside_later(newest_of_checkpoint_dir);
    } else if (!o_.init_from.empty()) {
        // A requeued fine-tuning job resumes from its own checkpoints (above) instead.
        GptConfig cfg;
        if (!parse_gpt_signature(id_.model, &cfg)) throw UserError("--init-from is for --model gpt");
        found_.params.assign(params.size(), 0.0f);
        std::string note;
        try {
            import_hf_gpt2(o_.init_from, cfg, found_.params.data(), &note, {id_.tokenizer, id_.vocab});
        } catch (const UserError& e) {
            throw UserError(std::string("--init-from ") + e.what());
        }
        initialized_from_ = o_.init_from + (note.empty() ? "" : " (" + note + ")");
        init_ = true;
    }
}

void Checkpoints::check_found(const std::vector<float>& params, Optimizer& opt) const {
    const CheckpointState& ck = found_;
    const char* from = resumed_from_.c_str();
    const std::string fix = "start a fresh run with another --checkpoint-dir, or --resume none";
    if (ck.model != id_.model)
        throw UserError(strfmt("%s: checkpoint is from another model (%s; this run: %s); %s", from, ck.model.c_str(),
                               id_.model.c_str(), fix.c_str()));
    if (ck.optimizer != name_of(o_.optimizer))
        throw UserError(strfmt("%s: checkpoint has %s optimizer state, this run uses --optimizer %s; %s", from,
                               ck.optimizer.c_str(), name_of(o_.optimizer), fix.c_str()));
    const long W = id_.world_size, G = id_.global_batch;
    if (ck.global_batch != G) {
        const long C = ck.global_batch;
        std::string keep;
        if (C % W == 0) {
            keep = strfmt("keep the global batch: --batch-size %ld, or any --batch-size x --grad-accum = %ld", C / W, C / W);
        } else {  // the rank counts nearest W that divide it
            long below = W, above = W;
            while (below > 1 && C % below != 0) --below;
            while (above < C && C % above != 0) ++above;
            keep = strfmt("%ld samples do not split over %ld ranks: resume on a rank count that divides %ld (%ld or %ld), "
                          "with --batch-size x --grad-accum = %ld / ranks",
                          C, W, C, below, above, C);
        }
        throw UserError(strfmt("%s: checkpoint was trained with global batch %ld, this run has %ld (--batch-size %d x "
                               "%ld ranks x --grad-accum %d); %s",
                               from, C, G, o_.batch_size, W, o_.grad_accum, keep.c_str()));
    }
    // The same vocabulary size can hold another tokenizer's ids (char tables follow their text).
    if (!ck.tokenizer.empty() && (ck.tokenizer != id_.tokenizer || ck.vocab != id_.vocab))
        throw UserError(strfmt("%s: checkpoint was trained on %s tokens, --data %s holds %s tokens%s: its ids would "
                               "stand for other text; resume on data made with the checkpoint's tokenizer (its run had "
                               "--data %s), or %s",
                               from, ck.tokenizer.c_str(), o_.data.c_str(), id_.tokenizer.c_str(),
                               ck.tokenizer == id_.tokenizer ? " of another table" : "",
                               ini_value(ck.options, "data").c_str(), fix.c_str()));
    if (ck.seed != o_.seed)
        throw UserError(strfmt("%s: checkpoint was trained with --seed %llu, this run has --seed %lu; resume with "
                               "the same seed so the sample order continues",
                               from, (unsigned long long)ck.seed, o_.seed));
    // Sample order depends on --shuffle-block too (older checkpoints: 1).
    const std::string block = ini_value(ck.options, "shuffle-block");
    const long ck_block = block.empty() ? 1 : std::atol(block.c_str());
    if (ck_block != o_.shuffle_block)
        throw UserError(strfmt("%s: checkpoint was trained with --shuffle-block %ld, this run has --shuffle-block %ld; "
                               "resume with the same value so the sample order continues",
                               from, ck_block, o_.shuffle_block));
    if (ck.params.size() != params.size())
        throw UserError(strfmt("%s: checkpoint tensors do not match the model's sizes; %s", from, fix.c_str()));
    if (ck.opt_m.size() != opt.full_m() || ck.opt_v.size() != opt.full_v())
        throw UserError(strfmt("%s: checkpoint holds %zu + %zu floats of optimizer state, this run's %s needs %zu + "
                               "%zu%s; resume from a checkpoint with the whole state, or start from its weights "
                               "alone with dptrain-ckpt export and --init-from",
                               from, ck.opt_m.size(), ck.opt_v.size(), name_of(o_.optimizer), opt.full_m(),
                               opt.full_v(), o_.shard_optimizer ? " (to share out over the ranks)" : ""));
}

long Checkpoints::share(MpiCommunicator& world, std::vector<float>& params, Optimizer& opt) {
    // hdr[2]: resumed from this run's own file of that step ("Note [stop mid-step]").
    std::error_code ec;
    const bool own = have_ && std::filesystem::equivalent(resumed_from_, checkpoint_path(o_.checkpoint_dir, found_.step), ec);
    // hdr[3]: the updates the state holds (older checkpoints: the step).
    long hdr[4] = {have_ ? 1L : init_ ? 2L : 0L, have_ ? found_.step : 0L, own ? 1L : 0L,
                   have_ ? (found_.updates >= 0 ? found_.updates : found_.step) : 0L};
    world.broadcast(hdr, sizeof hdr, 0);
    holds_start_ = hdr[2] == 1;
    updates_at_start_ = hdr[3];
    if (holds_start_ && rank_ == 0) last_ = resumed_from_;
    if (hdr[0] == 0) return 0;
    if (hdr[0] == 2) {  // --init-from: weights only; optimizer state starts at zero
        if (rank_ == 0) std::copy(found_.params.begin(), found_.params.end(), params.begin());
        found_ = CheckpointState();
        world.broadcast(params.data(), params.size() * sizeof(float), 0);
        return 0;
    }
    if (o_.shard_optimizer) {
        // Each rank's shard of the whole state (written on any rank count, sharded or not).
        if (rank_ == 0) std::copy(found_.params.begin(), found_.params.end(), params.begin());
        world.broadcast(params.data(), params.size() * sizeof(float), 0);
        const std::vector<size_t> counts = shard_counts(opt.full_m(), world.size());
        world.scatter_blocks(found_.opt_m.data(), opt.m().data(), counts.data(), 0);
        if (opt.full_v() > 0) world.scatter_blocks(found_.opt_v.data(), opt.v().data(), counts.data(), 0);
        found_ = CheckpointState();
        return hdr[1];
    }
    if (rank_ == 0) {
        // In place (find checked the sizes): the gradient path holds these buffers.
        std::copy(found_.params.begin(), found_.params.end(), params.begin());
        std::copy(found_.opt_m.begin(), found_.opt_m.end(), opt.m().begin());
        std::copy(found_.opt_v.begin(), found_.opt_v.end(), opt.v().begin());
        found_ = CheckpointState();
    }
    world.broadcast(params.data(), params.size() * sizeof(float), 0);
    world.broadcast(opt.m().data(), opt.m().size() * sizeof(float), 0);
    world.broadcast(opt.v().data(), opt.v().size() * sizeof(float), 0);
    return hdr[1];
}

std::vector<size_t> Checkpoints::shard_counts(size_t total, int ranks) {
    std::vector<size_t> counts((size_t)ranks);
    for (int q = 0; q < ranks; ++q) counts[(size_t)q] = shard_span(total, q, ranks).size();
    return counts;
}

// Synchronous: from the live buffers, a sharded state shard by shard as each rank sends it (never a
// whole copy on rank 0). Asynchronous: copied (gathered) first for the background thread.
void Checkpoints::save(MpiCommunicator& world, long step, long updates, const Sampler& sampler,
                       const std::vector<float>& params, Optimizer& opt, bool final_one, bool corrupt) {
    if (rank_ != 0) {
        if (!o_.shard_optimizer) return;
        if (o_.async_checkpoint) return gather_state(world, opt, nullptr);
        // In the order rank 0 writes: every rank's m, then every rank's v.
        if (!opt.m().empty()) world.send_floats(opt.m().data(), opt.m().size(), 0);
        if (!opt.v().empty()) world.send_floats(opt.v().data(), opt.v().size(), 0);
        return;
    }
    try {
        CheckpointState& s = async_ ? next_async() : sync_state_;  // the write in flight ends first
        keep_lock(step);
        s.step = step;
        s.updates = updates;
        s.epoch = sampler.epoch_of(step);
        s.epoch_offset = (step % sampler.steps_per_epoch()) * id_.global_batch;
        s.global_batch = id_.global_batch;
        s.train_samples = id_.train_samples;
        s.seed = o_.seed;
        s.world_size = id_.world_size;
        s.model = id_.model;
        s.optimizer = name_of(o_.optimizer);
        s.options = o_.to_ini();
        s.tokenizer = id_.tokenizer;
        s.vocab = id_.vocab;
        if (async_) {
            s.params.assign(params.begin(), params.end());
            if (o_.shard_optimizer) {
                gather_state(world, opt, &s);
            } else {
                s.opt_m.assign(opt.m().begin(), opt.m().end());
                s.opt_v.assign(opt.v().begin(), opt.v().end());
            }
            async_->start(o_.checkpoint_dir, o_.keep_checkpoints);
            async_step_ = step;
            last_ = checkpoint_path(o_.checkpoint_dir, step);
            if (final_one || corrupt) finish_async(step);
        } else {
            last_ = write_sync(world, s, params, opt);
        }
        if (corrupt) corrupt_checkpoint_file(last_);
    } catch (const UserError& e) {
        fatal(e.what(), kExitUser);
    }
}

// A directory deleted mid-run took our lock with it.
// Why: docs/NOTES.md, "Note [checkpoint dir lost]".
bool Checkpoints::lock_lost() const { return lock_fd_ >= 0 && !holds_checkpoint_lock(o_.checkpoint_dir, lock_fd_); }

void Checkpoints::keep_lock(long step) {
    if (!lock_lost()) return;
    const bool dir_gone = file_id(o_.checkpoint_dir) != dir_id_;
    ::close(lock_fd_);
    lock_fd_ = -1;
    std::string holder;
    try {
        lock_fd_ = relock_checkpoint_dir(o_.checkpoint_dir, &holder);
    } catch (const UserError& e) {
        throw UserError(strfmt("--checkpoint-dir %s was deleted during this run and cannot be made again (%s); this "
                               "run stops at step %ld without its checkpoint",
                               o_.checkpoint_dir.c_str(), e.what(), step));
    }
    if (lock_fd_ == -2)
        throw UserError(strfmt("--checkpoint-dir %s was deleted or replaced during this run, and another dptrain holds "
                               "it now (%s); this run stops without writing the checkpoint of step %ld there: run it "
                               "again with another --checkpoint-dir (or --run-dir)",
                               o_.checkpoint_dir.c_str(), holder.c_str(), step));
    std::fprintf(stderr, "dptrain: warning: --checkpoint-dir %s: its %s deleted during this run: %s before the "
                         "checkpoint of step %ld%s\n",
                 o_.checkpoint_dir.c_str(), dir_gone ? "directory was" : "lock was",
                 lock_fd_ >= 0 ? "made again and locked" : "made again (unlocked: no flock there)", step,
                 dir_gone ? "; the checkpoints before it went with the directory" : "");
    dir_id_ = file_id(o_.checkpoint_dir);
}

bool Checkpoints::dir_kept(MpiCommunicator& world) {
    // A background write first: deleted under it, it is written again.
    if (rank_ == 0 && async_) wait();
    int kept = rank_ != 0 || !lock_lost() ? 1 : 0;
    world.broadcast(&kept, sizeof kept, 0);
    return kept != 0;
}

// Without "the previous checkpoints are intact": untrue of a deleted directory.
static std::string write_error(const UserError& e) {
    std::string m = e.what();
    const size_t at = m.find("; the previous checkpoints are intact");
    return at == std::string::npos ? m : m.substr(0, at);
}

// Deleted under the write: relocked and written again unless sharded
// ("Note [checkpoint dir lost]").
std::string Checkpoints::write_sync(MpiCommunicator& world, const CheckpointState& s, const std::vector<float>& params,
                                    Optimizer& opt) {
    auto pieces = [&](const std::vector<float>& mine, size_t full) {
        return o_.shard_optimizer ? shard_pieces(world, mine, full) : TensorPieces::whole(mine.data(), mine.size());
    };
    try {
        return save_checkpoint(o_.checkpoint_dir, s, o_.keep_checkpoints, TensorPieces::whole(params.data(), params.size()),
                               pieces(opt.m(), opt.full_m()), pieces(opt.v(), opt.full_v()));
    } catch (const UserError& e) {
        if (!lock_lost()) throw;
        if (o_.shard_optimizer)
            throw UserError(strfmt("--checkpoint-dir %s was deleted while the checkpoint of step %ld was written there "
                                   "(%s); the sharded state was sent once, so this run stops without it",
                                   o_.checkpoint_dir.c_str(), s.step, write_error(e).c_str()));
    }
    keep_lock(s.step);
    return save_checkpoint(o_.checkpoint_dir, s, o_.keep_checkpoints, TensorPieces::whole(params.data(), params.size()),
                           TensorPieces::whole(opt.m().data(), opt.m().size()),
                           TensorPieces::whole(opt.v().data(), opt.v().size()));
}

// Ends the write in flight; one lost to a deleted directory is said once, and the run goes on.
CheckpointState& Checkpoints::next_async() {
    try {
        return async_->next();
    } catch (const UserError& e) {
        if (!lock_lost()) throw;
        std::fprintf(stderr, "dptrain: warning: --checkpoint-dir %s was deleted while a checkpoint was written there in "
                             "the background: that checkpoint is lost (%s)\n",
                     o_.checkpoint_dir.c_str(), write_error(e).c_str());
    }
    return async_->next();
}

// Rank 0: a sharded tensor as the writer's pieces: its own shard, then each other rank's,
// received into one shard's scratch when the writer asks.
TensorPieces Checkpoints::shard_pieces(MpiCommunicator& world, const std::vector<float>& mine, size_t total) {
    const int W = world.size();
    if (shard_scratch_.size() < shard_span(total, 0, W).size()) shard_scratch_.resize(shard_span(total, 0, W).size());
    TensorPieces t;
    t.size = total;
    int q = 0;
    t.next = [this, &world, &mine, total, W, q](size_t* n) mutable -> const float* {
        for (; q < W; ++q) {
            *n = shard_span(total, q, W).size();
            if (*n == 0) continue;  // that rank sends nothing
            const int from = q++;
            if (from == 0) return mine.data();
            world.recv_floats(shard_scratch_.data(), *n, from);
            return shard_scratch_.data();
        }
        *n = 0;
        return nullptr;
    };
    return t;
}

// Collective: every rank's optimizer shard into rank 0's s (null on other ranks).
void Checkpoints::gather_state(MpiCommunicator& world, Optimizer& opt, CheckpointState* s) {
    const std::vector<size_t> counts = shard_counts(opt.full_m(), world.size());
    if (s) {
        s->opt_m.resize(opt.full_m());
        s->opt_v.resize(opt.full_v());
    }
    world.gather_blocks(opt.m().data(), s ? s->opt_m.data() : nullptr, counts.data(), 0);
    if (opt.full_v() > 0) world.gather_blocks(opt.v().data(), s ? s->opt_v.data() : nullptr, counts.data(), 0);
}

void Checkpoints::wait() {
    if (rank_ != 0 || !async_) return;
    try {
        finish_async(async_step_);
    } catch (const UserError& e) {
        fatal(e.what(), kExitUser);
    }
}

// Failed on a deleted directory: the writer still holds the state, so it is written again.
void Checkpoints::finish_async(long step) {
    try {
        async_->wait();
        return;
    } catch (const UserError& e) {
        if (!lock_lost()) throw;
    }
    keep_lock(step);
    async_->start(o_.checkpoint_dir, o_.keep_checkpoints);
    async_->wait();
}

} // namespace dptrain
