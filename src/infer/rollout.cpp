// CheckpointWatcher (rollout.h): offers a run's newest complete checkpoint as it appears.
// Not for: swapping it in (completions.cpp).
#include "dptrain/infer/rollout.h"

#include "dptrain/core/error.h"
#include "dptrain/io/checkpoint.h"
#include "dptrain/model/gpt.h"

#include <sys/stat.h>

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

std::string watched_dir(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "";
    const std::string sub = path + "/checkpoints";
    return stat(sub.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? sub : path;
}

CheckpointWatcher::CheckpointWatcher(CompletionEngine& engine, ServeCounters& counters, std::string dir, double poll,
                                     std::string current, long step)
    : engine_(engine), counters_(counters), dir_(std::move(dir)), poll_(poll), current_(std::move(current)),
      step_(step) {
    if (dir_.empty() || poll_ <= 0) return;
    // Newer files there now are the ones loading passed over (and named): damaged.
    for (const std::string& path : list_checkpoints(dir_))
        if (checkpoint_step(path) > step_) rejected_.insert(key_of(path));
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
    for (const std::string& path : list_checkpoints(dir_)) {  // newest first
        if (path == current_ || checkpoint_step(path) <= step_) return;
        const std::string key = key_of(path);
        if (rejected_.count(key)) continue;
        if (offer(path)) return;
        rejected_.insert(key);
    }
}

bool CheckpointWatcher::offer(const std::string& path) {
    try {
        InferenceModel m = load_inference_model(path);
        if (Gpt(m.cfg, 0).signature() != Gpt(engine_.config(), 0).signature() || !m.tok->same_as(engine_.tokenizer()))
            throw UserError(strfmt("%s holds another model or tokenizer (%s)", path.c_str(),
                                   Gpt(m.cfg, 0).signature().c_str()));
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

} // namespace dptrain
