// Which checkpoints of a run may be served: CHECKPOINT_DIR/promotions.jsonl, a record a line,
// appended under a lock by whoever promotes (dptrain-ckpt promote, a run's --promote-if) or
// withdraws (dptrain-ckpt rollback, a canary that saw errors). Servers following promotions read
// it; the rotation of checkpoints keeps the promoted ones. Not for: the checkpoints themselves.
#pragma once

#include <string>
#include <vector>

namespace dptrain {

struct Promotion {
    long step = 0;
    std::string file;  // the checkpoint's name in the directory
    double time = 0;   // Unix seconds it was promoted
    std::string reason, by;
};

constexpr const char* kPromotionLog = "promotions.jsonl";

// The promotions in force, oldest first: every "promote" record not yet withdrawn (a withdraw
// takes back the newest promotion of its step). *has_log: whether DIR holds the log. A cut last
// line (a writer stopped in it) is left out; any other bad line throws UserError naming it.
std::vector<Promotion> read_promotions(const std::string& dir, bool* has_log = nullptr);

// action: "promote" or "withdraw". Throws UserError naming the file when it cannot be written.
void append_promotion(const std::string& dir, const std::string& action, const Promotion& p);

// Makes DIR's log where it has none (empty): a run with --promote-if does at its start, so that
// servers following it by default (--follow auto) take promoted checkpoints only, from the first.
void open_promotion_log(const std::string& dir);

// The checkpoint directory of PATH: a run directory's checkpoints/, a checkpoint's folder, or PATH.
std::string checkpoint_dir_of(const std::string& path);

} // namespace dptrain
