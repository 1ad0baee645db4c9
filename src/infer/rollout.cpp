// CheckpointWatcher (rollout.h): offers a run's newest complete checkpoint as it appears.
// Not for: swapping it in (completions.cpp).
#include "dptrain/infer/rollout.h"

#include "dptrain/config/infer_options.h"
#include "dptrain/core/error.h"
#include "dptrain/io/checkpoint.h"
#include "dptrain/io/promotion.h"
#include "dptrain/model/gpt.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace dptrain {

namespace {

// A rename gives a new inode, so a rewritten file is looked at afresh.
std::string key_of(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? path + strfmt(":%llu:%lld.%09ld", (unsigned long long)st.st_ino,
                                                        (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec)
                                        : path;
}

} // namespace

double wall_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string watched_dir(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "";
    const std::string sub = path + "/checkpoints";
    return stat(sub.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? sub : path;
}

Follow follow_mode(const std::string& word, const std::string& dir) {
    if (word == "newest") return Follow::newest;
    if (word == "promoted") return Follow::promoted;
    if (word == "canary") return Follow::canary;
    if (word != "auto") throw UserError(strfmt("--follow '%s' is unknown; use auto, promoted, canary or newest", word.c_str()));
    bool has_log = false;
    if (!dir.empty()) read_promotions(dir, &has_log);
    return has_log ? Follow::promoted : Follow::newest;
}

std::string followed_file(const std::string& dir, const FollowSpec& f, double now) {
    if (f.mode == Follow::pinned) {
        for (const std::string& path : list_checkpoints(dir))
            if (checkpoint_step(path) == f.pin) return path;
        return "";
    }
    if (f.mode == Follow::newest) {
        const auto all = list_checkpoints(dir);
        return all.empty() ? "" : all.front();
    }
    const std::vector<Promotion> active = read_promotions(dir);
    if (active.empty()) return "";
    const Promotion* pick = &active.back();
    if (f.mode == Follow::promoted) {
        pick = &active.front();
        for (const Promotion& p : active)
            if (p.time <= now - f.canary_seconds) pick = &p;
    }
    return dir + "/" + pick->file;
}

CheckpointWatcher::CheckpointWatcher(CompletionEngine& engine, ServeCounters& counters, std::string dir, double poll,
                                     std::string current, long step, FollowSpec follow)
    : engine_(engine), counters_(counters), dir_(std::move(dir)), poll_(poll), current_(std::move(current)),
      step_(step), follow_(follow) {
    window_step_ = step_;
    if (dir_.empty() || poll_ <= 0 || follow_.mode == Follow::pinned) return;
    // Newer files there now are the ones loading passed over (and named): damaged. Promotions
    // name their file, and a rollback goes to an older one.
    for (const std::string& path : list_checkpoints(dir_))
        if (follow_.mode == Follow::newest && checkpoint_step(path) > step_) rejected_.insert(key_of(path));
    thread_ = std::thread([this] { run(); });
}

CheckpointWatcher::~CheckpointWatcher() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void CheckpointWatcher::run() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!cv_.wait_for(lk, std::chrono::duration<double>(poll_), [&] { return stop_; })) {
        lk.unlock();
        look();
        lk.lock();
    }
}

void CheckpointWatcher::look() {
    if (follow_.mode != Follow::newest) return look_promoted();
    for (const std::string& path : list_checkpoints(dir_)) {  // newest first
        if (path == current_ || checkpoint_step(path) <= step_) return;
        const std::string key = key_of(path);
        if (rejected_.count(key)) continue;
        if (offer(path)) return;
        rejected_.insert(key);
    }
}

// The promotion the mode serves, older too (a rollback); a canary first looks at its own errors.
void CheckpointWatcher::look_promoted() {
    std::string target;
    try {
        if (follow_.mode == Follow::canary) watch_canary();
    } catch (const UserError& e) {  // a read-only volume, say: the promotions are still followed
        std::fprintf(stderr, "serve: cannot withdraw a promotion: %s\n", e.what());
    }
    try {
        target = followed_file(dir_, follow_, wall_seconds());
    } catch (const UserError& e) {
        std::fprintf(stderr, "serve: %s; still serving step %ld\n", e.what(), step_);
        return;
    }
    if (target.empty() || target == current_ || rejected_.count(key_of(target))) return;
    if (offer(target)) {
        // A window only for a promotion taken as it came (not one gone back to by a rollback).
        const long step = checkpoint_step(target);
        swapped_at_ = step > window_step_ ? wall_seconds() : 0;
        window_step_ = std::max(window_step_, step);
        errors_at_swap_ = server_errors();
    } else {
        rejected_.insert(key_of(target));
    }
}

long CheckpointWatcher::server_errors() {
    std::lock_guard<std::mutex> lk(counters_.mu);
    long n = 0;
    for (const auto& [status, count] : counters_.by_status) n += status >= 500 && status != 503 ? count : 0;
    return n;
}

// Within --canary-seconds of taking a promotion, a rise in this replica's server errors (5xx, not
// 503) withdraws it: the stable replicas never take it, and the canary moves back.
void CheckpointWatcher::watch_canary() {
    const long errors = server_errors() - errors_at_swap_;
    if (errors <= 0 || swapped_at_ <= 0 || wall_seconds() - swapped_at_ > follow_.canary_seconds) return;
    const std::vector<Promotion> active = read_promotions(dir_);
    // The newest promotion, made within --canary-seconds: an old one (a restart, a rollback) is not on trial.
    if (active.empty() || dir_ + "/" + active.back().file != current_ ||
        wall_seconds() - active.back().time > follow_.canary_seconds)
        return;
    Promotion p = active.back();
    p.time = wall_seconds();
    p.reason = strfmt("canary: %ld server errors within %.0f s of serving it", errors, p.time - swapped_at_);
    p.by = "dptrain serve --follow canary";
    append_promotion(dir_, "withdraw", p);
    errors_at_swap_ += errors;
    std::fprintf(stderr, "serve: withdrew the promotion of step %ld (%s)\n", p.step, p.reason.c_str());
}

bool CheckpointWatcher::offer(const std::string& path) {
    try {
        InferenceModel m = load_inference_model(path);
        if (lm_signature(m.cfg) != lm_signature(engine_.config()) || !m.tok->same_as(engine_.tokenizer()))
            throw UserError(strfmt("%s holds another model or tokenizer (%s)", path.c_str(),
                                   lm_signature(m.cfg).c_str()));
        current_ = path;
        step_ = m.step;
        engine_.offer_model(std::move(m));
        return true;
    } catch (const std::exception& e) {
        {
            std::lock_guard<std::mutex> lk(counters_.mu);
            ++counters_.checkpoints_skipped;
        }
        // The error names the file.
        std::fprintf(stderr, "serve: skipping a newer checkpoint: %s; still serving step %ld\n", e.what(), step_);
        return false;
    }
}

FollowSpec follow_of(const ServeOptions& o, const std::string& dir) {
    FollowSpec f;
    f.mode = o.pin >= 0 ? Follow::pinned : follow_mode(o.follow, dir);
    f.pin = o.pin;
    f.canary_seconds = o.canary_seconds;
    if (dir.empty() && f.mode != Follow::newest)
        throw UserError(strfmt("serve: --%s needs a run or checkpoint directory; --checkpoint %s is a file",
                               o.pin >= 0 ? "pin" : "follow", o.checkpoint.c_str()));
    return f;
}

// What the spec serves at start: for promotions and pins, their file, which must be there.
std::string first_checkpoint(const ServeOptions& o, const std::string& dir, const FollowSpec& f) {
    if (f.mode == Follow::newest) return o.checkpoint;
    const std::string file = followed_file(dir, f, wall_seconds());
    if (!file.empty()) {
        std::fprintf(stderr, "serve: %s\n",
                     f.mode == Follow::pinned ? strfmt("pinned to step %ld", f.pin).c_str()
                     : f.mode == Follow::canary ? "a canary: each promotion at once"
                                                : strfmt("following promotions once promoted for %g s", f.canary_seconds).c_str());
        return file;
    }
    if (f.mode == Follow::pinned)
        throw UserError(strfmt("serve: --pin %ld: %s holds no checkpoint of that step", f.pin, dir.c_str()));
    throw UserError(strfmt("serve: --follow %s: %s has no promotion in force; promote one (dptrain-ckpt promote CKPT) "
                           "or serve the newest (--follow newest)",
                           o.follow.c_str(), dir.c_str()));
}

} // namespace dptrain
