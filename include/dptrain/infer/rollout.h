// Rollout for dptrain serve: a thread that offers each newer checkpoint of the same model to the
// engine. Not for: swapping it in (the engine) or HTTP (serve.cpp).
#pragma once

#include "dptrain/infer/completions.h"
#include "dptrain/infer/serve_api.h"

#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace dptrain {

struct ServeOptions;

// A run directory's checkpoints/, or PATH itself; "" for a file.
std::string watched_dir(const std::string& path);

// What a server serves of a directory: its newest complete checkpoint; the newest promotion
// (canary), or the newest one promoted canary_seconds ago (promoted, the stable replicas'); one
// step (pinned).
enum class Follow { newest, promoted, canary, pinned };
struct FollowSpec {
    Follow mode = Follow::newest;
    long pin = -1;
    double canary_seconds = 300;
};
// Unix seconds, as promotion records keep them.
double wall_seconds();
// "auto": promoted where dir holds a promotion log, else newest. Throws UserError for another word.
Follow follow_mode(const std::string& word, const std::string& dir);
// serve's --follow, --pin and --canary-seconds for dir (watched_dir's); throws UserError.
FollowSpec follow_of(const ServeOptions& o, const std::string& dir);
// What the spec serves at start: o.checkpoint when following the newest, else the promotion's or
// the pin's file, which must be there (throws UserError naming the fix); said on stderr.
std::string first_checkpoint(const ServeOptions& o, const std::string& dir, const FollowSpec& f);
// The checkpoint the spec serves now in dir, "" when none (no promotion in force, the pin's step
// not there). Stable replicas with no promotion that old take the oldest in force.
std::string followed_file(const std::string& dir, const FollowSpec& f, double now);

// Offers the newest checkpoint newer than `current` that verifies and holds the same model and
// tokenizer; one that fails is named once and passed over for the next older. Files newer than
// `current` at start are taken as ones loading passed over (damaged) until written anew. No
// thread when dir is "" or poll is 0.
class CheckpointWatcher {
  public:
    CheckpointWatcher(CompletionEngine& engine, ServeCounters& counters, std::string dir, double poll,
                      std::string current, long step, FollowSpec follow = {});
    ~CheckpointWatcher();
    CheckpointWatcher(const CheckpointWatcher&) = delete;
    CheckpointWatcher& operator=(const CheckpointWatcher&) = delete;

  private:
    void run();
    void look();
    void look_promoted();
    void watch_canary();
    bool offer(const std::string& path);  // false: named on stderr
    long server_errors();

    CompletionEngine& engine_;
    ServeCounters& counters_;
    std::string dir_;
    double poll_;
    std::string current_;
    long step_;
    std::set<std::string> rejected_;  // (path, inode, mtime), so a rewrite is looked at again
    FollowSpec follow_;
    double swapped_at_ = 0;  // canary: when the current promotion came in (0: not on trial), 5xx then
    long errors_at_swap_ = 0;
    long window_step_ = 0;   // the newest step taken; going back to an older one opens no window
    bool stop_ = false;
    std::mutex mu_;
    std::condition_variable cv_;
    std::thread thread_;
};

} // namespace dptrain
