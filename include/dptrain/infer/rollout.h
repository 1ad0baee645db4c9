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

// A run directory's checkpoints/, or PATH itself; "" for a file.
std::string watched_dir(const std::string& path);

// Offers the newest checkpoint newer than `current` that verifies and holds the same model and
// tokenizer; one that fails is named once and passed over for the next older. Files newer than
// `current` at start are taken as ones loading passed over (damaged) until written anew. No
// thread when dir is "" or poll is 0.
class CheckpointWatcher {
  public:
    CheckpointWatcher(CompletionEngine& engine, ServeCounters& counters, std::string dir, double poll,
                      std::string current, long step);
    ~CheckpointWatcher();
    CheckpointWatcher(const CheckpointWatcher&) = delete;
    CheckpointWatcher& operator=(const CheckpointWatcher&) = delete;

  private:
    void run();
    void look();
    bool offer(const std::string& path);  // false: named on stderr

    CompletionEngine& engine_;
    ServeCounters& counters_;
    std::string dir_;
    double poll_;
    std::string current_;
    long step_;
    std::set<std::string> rejected_;  // (path, inode, mtime), so a rewrite is looked at again
    bool stop_ = false;
    std::mutex mu_;
    std::condition_variable cv_;
    std::thread thread_;
};

} // namespace dptrain
