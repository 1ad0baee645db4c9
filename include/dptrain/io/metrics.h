// What a run reports: timers, rank 0's fixed-width step and eval lines, and the JSON-lines
// metrics file. Not for: deciding what is measured (the trainer does).
#pragma once

#include "dptrain/comm/communicator.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/json.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace dptrain {

struct StepStats {
    long step = 0, total = 0;  // step: steps completed
    double loss = 0, grad_norm = 0, lr = 0;
    double ms_per_step = 0;     // over the interval
    double samples_per_s = 0;   // global, over the interval
    int tokens_per_sample = 0;  // > 0: a language model; the line shows tokens/s
    double mfu = -1;            // 0..1; < 0: unknown
    double data_wait_pct = 0;   // max over ranks
    double comm_pct = 0;        // all-reduce wait backward did not hide (max over ranks)
    double comm_total_pct = 0;  // all-reduce calls, hidden or not
    double eta_s = -1;          // to --steps; < 0: unknown
    double stop_in_s = -1;      // --stop-after; < 0: none
    int world_size = 1;         // ranks training (an elastic job's change with each relaunch)
};

struct EvalStats {
    long step = 0;
    double loss = 0, accuracy = 0;
    long samples = 0;
    // nats x tokens / (bytes x ln 2): comparable across tokenizers; -1 for tabular data.
    double bits_per_byte = -1;
    // --eval-task's accuracies over its items (choice_task.h); -1 without one.
    double acc = -1, acc_norm = -1, acc_tokens = -1;
    long task_items = 0;
};

// allreduce is only the wait backward did not hide (exposed communication).
constexpr int kStepPhases = 5;
extern const char* const kStepPhaseNames[kStepPhases];  // data forward backward allreduce optimizer

// Per-phase step times: interval (exact) and run (p90 from a log-spaced histogram, within 5%).
// Nothing allocates after reserve(): it runs every step. Checkpoints sit beside the phases.
struct PhaseSummary {
    long steps = 0;
    long left_out = 0;  // run(): warm-up steps left out (forget_warmup)
    double mean_ms[kStepPhases] = {}, p90_ms[kStepPhases] = {};
    long checkpoints = 0;
    double checkpoint_ms = 0, checkpoint_wait_ms = 0;  // run() only
};
class PhaseTimes {
  public:
    void reserve(long interval_steps);
    void add(int phase, double seconds) { cur_[phase] += seconds; }
    // For communication inside another phase's span.
    void move(int from, int to, double seconds) { cur_[from] -= seconds, cur_[to] += seconds; }
    void end_step();
    // A step a stop left out.
    void drop_step() { std::fill(cur_, cur_ + kStepPhases, 0.0); }
    // wait: another rank's write, not ours.
    void add_checkpoint(bool wait, double seconds) { (wait ? ckpt_wait_s_ : ckpt_s_) += seconds; }
    void count_checkpoint() { ++checkpoints_; }
    PhaseSummary take_interval();  // and starts the next interval
    PhaseSummary run() const;
    // First touches, thread start and start-up skew make the first step cost several.
    void forget_warmup();

    static constexpr int kBins = 200;  // 1 us .. 10^4 s, 20 bins per decade
    static int bin_of(double seconds);
    static double bin_mid(int bin);  // seconds

  private:
    double cur_[kStepPhases] = {};
    std::vector<double> ring_[kStepPhases], scratch_;
    long n_ = 0, run_steps_ = 0, left_out_ = 0;
    double run_sum_[kStepPhases] = {};
    std::vector<long> hist_[kStepPhases];
    long checkpoints_ = 0;
    double ckpt_s_ = 0, ckpt_wait_s_ = 0;
};

// Mean of rank means, worst p90, and the straggler (highest mean).
struct PhaseAcross {
    double mean_ms = 0, p90_ms = 0, max_ms = 0;
    int slowest_rank = 0;
};
// Run totals: rank 0's writes, the other ranks' waits.
struct CheckpointAcross {
    long count = 0;
    double write_ms = 0, wait_ms = 0, wait_max_ms = 0;
    int longest_waiter = 0;
    bool background = false;  // --async-checkpoint: write_ms is only rank 0's copies
};
struct StepBreakdown {
    long steps = 0, left_out = 0;  // left_out: warm-up
    PhaseAcross phase[kStepPhases];
    CheckpointAcross checkpoint;
    std::vector<double> rank_mean_ms;  // [rank * kStepPhases + phase], every rank's means
};
// Collective (one gather); filled on rank 0 only.
StepBreakdown gather_breakdown(const PhaseSummary& mine, MpiCommunicator& comm);
Json breakdown_json(const StepBreakdown& b);
Json checkpoints_json(const CheckpointAcross& c);
// The end-of-run table.
std::string format_breakdown(const StepBreakdown& b, const std::vector<std::string>& hosts);

// Warns once per run of a phase over its threshold at two step lines in a row: one interval can be
// scheduling noise.
class BottleneckRule {
  public:
    static constexpr double kDataPct = 5.0, kCommPct = 25.0;
    struct Verdict {
        bool data = false, comm = false;
    };
    Verdict observe(double data_wait_pct, double comm_pct, int ranks);

  private:
    bool data_before_ = false, comm_before_ = false;
    bool data_warned_ = false, comm_warned_ = false;
};

// "1h02m", "3m05s", "42s"
std::string human_duration(double seconds);

// "step   20/200 | loss 1.2345 | norm 0.91 | lr 1.0e-03 | 12.3 ms | 2.6k samples/s | data 0.3% | comm 4.1%"
std::string format_step_line(const StepStats& s);
std::string format_eval_line(const EvalStats& e);
// "12.3k", "1.20M"
std::string human(double v);

// Keeps the records with "step" <= step; a missing file is fine.
void truncate_jsonl_after(const std::string& path, long step);

// A JSON object, "type" first. Only metric() members are declared to EMF (non-finite: null, undeclared).
class Record {
  public:
    explicit Record(const char* type);
    Record& metric(const char* name, double v, const char* unit = "None");
    Record& value(const char* name, double v);
    Record& integer(const char* name, long v);
    Record& text(const char* name, const std::string& v);
    Record& object(const char* name, const Json& v);
    std::string json() const;
    // With "time" (epoch seconds, ms precision) after "type".
    std::string json(long long epoch_ms) const;
    // CloudWatch EMF: the same plus "_aws" and the dims as string members.
    std::string emf(const std::string& ns, const std::vector<std::pair<std::string, std::string>>& dims,
                    long long timestamp_ms) const;

  private:
    Json j_;
    std::vector<std::pair<std::string, std::string>> metrics_;  // (name, unit)
};

Record step_record(const StepStats& s);
Record eval_record(const EvalStats& e);

// JSON lines (EMF too); flushes each line so a crashed run keeps its history.
class JsonlWriter {
  public:
    JsonlWriter() = default;
    ~JsonlWriter();
    // Creates directories; throws UserError naming the path. emf: dimension "job" (+ "rank", "node").
    void open(const std::string& path, bool append, bool emf = false, const std::string& ns = "",
              const std::string& job = "");
    // A failed write then prints nothing: the caller stops the run (--metrics-required).
    void set_required(bool required) { required_ = required; }
    bool is_open() const { return f_ != nullptr; }
    bool emf() const { return emf_; }
    void write(const Record& r);                                          // job-wide
    void write_rank(const Record& r, int rank, const std::string& node);  // one rank's
    // Why a write failed ("" while none has): the file is closed from then on.
    const std::string& failure() const { return failure_; }

  private:
    void put(const std::string& line);  // a failed write warns once and closes the file
    FILE* f_ = nullptr;
    std::string path_, failure_;
    bool emf_ = false;
    std::string ns_, job_;
    bool required_ = false;
};

} // namespace dptrain
