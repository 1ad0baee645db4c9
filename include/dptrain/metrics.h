// What a run reports: wall-clock timers, the fixed-width step and eval lines of rank 0, and the
// JSON-lines metrics file beside them. Not for: deciding what is measured (the trainer does).
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace dptrain {

inline double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct StepStats {
    long step = 0, total = 0;  // step is 1-based: steps completed
    double loss = 0, grad_norm = 0, lr = 0;
    double ms_per_step = 0;     // wall time per step over the interval
    double samples_per_s = 0;   // global samples per second over the interval
    int tokens_per_sample = 0;  // > 0: a language model; the line shows tokens/s
    double mfu = -1;            // model FLOPs utilisation (0..1); < 0: unknown
    double data_wait_pct = 0;   // share of the interval spent waiting for data (max over ranks)
    double comm_pct = 0;        // share spent waiting for gradient all-reduce that backward did not
                                // hide: the exposed communication (max over ranks)
    double comm_total_pct = 0;  // share of the interval the all-reduce calls took, hidden or not
};

struct EvalStats {
    long step = 0;
    double loss = 0, accuracy = 0;
    long samples = 0;
};

// "step   20/200 | loss 1.2345 | norm 0.91 | lr 1.0e-03 | 12.3 ms | 2.6k samples/s | data 0.3% | comm 4.1%"
std::string format_step_line(const StepStats& s);
std::string format_eval_line(const EvalStats& e);
// "12.3k", "1.20M": three significant digits with a unit suffix.
std::string human(double v);

// Rewrites a JSON-lines metrics file keeping only the records whose "step" is <= step (a missing
// file is fine).
void truncate_jsonl_after(const std::string& path, long step);

// Appends one JSON object per line; flushes each line so a crashed run keeps its history.
class JsonlWriter {
  public:
    JsonlWriter() = default;
    ~JsonlWriter();
    // Opens (creating directories) for append; throws UserError naming the path.
    void open(const std::string& path, bool append);
    bool is_open() const { return f_ != nullptr; }
    void write(const std::string& json_object);
    static std::string step_json(const StepStats& s);
    static std::string eval_json(const EvalStats& e);

  private:
    FILE* f_ = nullptr;
};

} // namespace dptrain
