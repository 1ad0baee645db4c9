// Rollout for dptrain serve: a thread that watches a run's checkpoint directory and offers each
// newer complete checkpoint of the same model to the completion engine. Not for: swapping the
// model in (the engine does that between batches) or the HTTP side (serve.cpp).
#pragma once

#include "dptrain/app/completions.h"
#include "dptrain/app/serve_api.h"

#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace dptrain {

// The directory a checkpoint PATH stands for (a run directory's checkpoints/, or PATH itself);
// "" for a file: nothing to watch.
std::string watched_dir(const std::string& path);

// Every poll seconds, the newest checkpoint of `dir` newer than the model served (`current`, of
// step `step`) that loads (checksums verified) and holds the same model and tokenizer is offered
// to the engine. One that fails, or holds another model, is named on stderr once and passed over
// for the next older one; the old model keeps serving when none is left. Files newer than
// `current` when the watcher starts are taken as the ones loading passed over (damaged): looked
// at again only once written anew. No thread when dir is "" or poll is 0.
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
    bool offer(const std::string& path);  // false (named on stderr) when it fails or holds another model

    CompletionEngine& engine_;
    ServeCounters& counters_;
    std::string dir_;
    double poll_;
    std::string current_;
    long step_;
    std::set<std::string> rejected_;  // files as they were (path, inode, mtime) found wanting
    bool stop_ = false;
    std::mutex mu_;
    std::condition_variable cv_;
    std::thread thread_;
};

} // namespace dptrain
