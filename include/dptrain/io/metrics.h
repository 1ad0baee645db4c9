// What a run reports: wall-clock timers, the fixed-width step and eval lines of rank 0, and the
// JSON-lines metrics file beside them. Not for: deciding what is measured (the trainer does).
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
    double eta_s = -1;          // seconds left to --steps at the run's pace so far; < 0: unknown
    double stop_in_s = -1;      // --stop-after: seconds until this run stops, before --steps; < 0: none
};

struct EvalStats {
    long step = 0;
    double loss = 0, accuracy = 0;
    long samples = 0;
    // Language models: the validation loss in bits per byte of the text predicted (loss in nats
    // x tokens / (bytes x ln 2)), comparable across tokenizers; -1 for tabular data.
    double bits_per_byte = -1;
};

// The phases of one training step that the breakdown times, in order: waiting for the batch,
// forward, backward, waiting for the gradient all-reduce that backward did not hide (exposed
// communication), and the optimizer (norm, clipping, update).
constexpr int kStepPhases = 5;
extern const char* const kStepPhaseNames[kStepPhases];  // data forward backward allreduce optimizer

// This rank's time per step in each phase, over the current interval (exact mean and p90 from a
// ring sized at start) and over the whole run (mean, and p90 from a log-spaced histogram: within
// 5%). add() and end_step() are a few additions; nothing allocates after reserve().
// Checkpoints are not part of a step: their totals over the run are kept beside the phases (rank
// 0's writes, and every other rank's wait for a synchronous write).
struct PhaseSummary {
    long steps = 0;
    long left_out = 0;  // run(): the run's first steps left out as its warm-up (forget_warmup)
    double mean_ms[kStepPhases] = {}, p90_ms[kStepPhases] = {};
    long checkpoints = 0;
    double checkpoint_ms = 0, checkpoint_wait_ms = 0;  // totals over the run (run() only)
};
class PhaseTimes {
  public:
    void reserve(long interval_steps);
    void add(int phase, double seconds) { cur_[phase] += seconds; }
    // Moves time of the step in progress from one phase to another (communication inside another
    // phase's span).
    void move(int from, int to, double seconds) { cur_[from] -= seconds, cur_[to] += seconds; }
    void end_step();
    // Forgets the step in progress (a step a stop left out: nothing of it was applied).
    void drop_step() { std::fill(cur_, cur_ + kStepPhases, 0.0); }
    // Time spent writing a checkpoint (wait: false) or waiting for another rank's write (true).
    void add_checkpoint(bool wait, double seconds) { (wait ? ckpt_wait_s_ : ckpt_s_) += seconds; }
    void count_checkpoint() { ++checkpoints_; }
    PhaseSummary take_interval();  // and starts the next interval
    PhaseSummary run() const;
    // Leaves the steps so far out of the interval and the run's figures: the run's first step,
    // which pays for first touches of memory, threads starting and the ranks' skew at start-up
    // (a step line of it, or the run's means with it, read several times a step's cost).
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

// One phase across the ranks: the mean over ranks of their mean, the worst rank's p90, and the
// rank with the highest mean (the straggler) with its mean.
struct PhaseAcross {
    double mean_ms = 0, p90_ms = 0, max_ms = 0;
    int slowest_rank = 0;
};
// The checkpoints of the run: rank 0's write time, and the wait of the other ranks (mean and the
// longest waiter), all as totals over the run.
struct CheckpointAcross {
    long count = 0;
    double write_ms = 0, wait_ms = 0, wait_max_ms = 0;
    int longest_waiter = 0;
    bool background = false;  // --async-checkpoint: write_ms is rank 0's copies for the background writer
};
struct StepBreakdown {
    long steps = 0, left_out = 0;  // steps in it; the run's first steps left out (warm-up)
    PhaseAcross phase[kStepPhases];
    CheckpointAcross checkpoint;
    std::vector<double> rank_mean_ms;  // [rank * kStepPhases + phase], every rank's means
};
// Collective over `comm` (one gather); the result is filled on rank 0 only.
StepBreakdown gather_breakdown(const PhaseSummary& mine, MpiCommunicator& comm);
// {"data":{"mean_ms":..,"p90_ms":..,"max_ms":..,"slowest_rank":..},...}
Json breakdown_json(const StepBreakdown& b);
// {"count":..,"write_ms":..,"wait_ms":..,"wait_max_ms":..,"longest_waiter":..}
Json checkpoints_json(const CheckpointAcross& c);
// The end-of-run table: one line per phase with its share of the step and the slowest rank.
std::string format_breakdown(const StepBreakdown& b, const std::vector<std::string>& hosts);

// When the step lines say a phase is the bottleneck: waiting for data over 5% of the step, or
// for the all-reduce over 25% with more than one rank, at two step lines in a row. One interval
// alone is not enough: on a short step it can be scheduling noise (0.05 ms of a 0.4 ms step, with
// the reader threads and two ranks on two cores), where a real bottleneck stays. Each warning is
// given once per run.
class BottleneckRule {
  public:
    static constexpr double kDataPct = 5.0, kCommPct = 25.0;
    struct Verdict {
        bool data = false, comm = false;  // warn of this phase now
    };
    // One step line's shares (StepStats' data_wait_pct and comm_pct) on `ranks` ranks.
    Verdict observe(double data_wait_pct, double comm_pct, int ranks);

  private:
    bool data_before_ = false, comm_before_ = false;  // the line before was over the threshold
    bool data_warned_ = false, comm_warned_ = false;
};

// "1h02m", "3m05s", "42s"
std::string human_duration(double seconds);

// "step   20/200 | loss 1.2345 | norm 0.91 | lr 1.0e-03 | 12.3 ms | 2.6k samples/s | data 0.3% | comm 4.1%"
std::string format_step_line(const StepStats& s);
std::string format_eval_line(const EvalStats& e);
// "12.3k", "1.20M": three significant digits with a unit suffix.
std::string human(double v);

// Rewrites a JSON-lines metrics file keeping only the records whose "step" is <= step (a missing
// file is fine).
void truncate_jsonl_after(const std::string& path, long step);

// One metrics record: a JSON object with "type" first. metric() members are numbers that EMF
// declares as CloudWatch metrics (a non-finite value is written as null and not declared);
// value() and text() members are carried along without being metrics.
class Record {
  public:
    explicit Record(const char* type);
    Record& metric(const char* name, double v, const char* unit = "None");
    Record& value(const char* name, double v);
    Record& integer(const char* name, long v);
    Record& text(const char* name, const std::string& v);
    Record& object(const char* name, const Json& v);
    std::string json() const;
    // As written to a file: "time" (wall-clock seconds since the epoch, to the millisecond) right
    // after "type".
    std::string json(long long epoch_ms) const;
    // The CloudWatch Embedded Metric Format version: the same members ("time" too) plus "_aws"
    // (timestamp in ms since the epoch, namespace, one dimension set) and the dimension members as
    // strings. dims: (name, value) pairs.
    std::string emf(const std::string& ns, const std::vector<std::pair<std::string, std::string>>& dims,
                    long long timestamp_ms) const;

  private:
    Json j_;                                                    // "type" first, then the members
    std::vector<std::pair<std::string, std::string>> metrics_;  // (name, unit)
};

Record step_record(const StepStats& s);
Record eval_record(const EvalStats& e);

// Appends one JSON object per line (JSON lines, or CloudWatch EMF: also JSON lines); flushes each
// line so a crashed run keeps its history.
class JsonlWriter {
  public:
    JsonlWriter() = default;
    ~JsonlWriter();
    // Opens (creating directories) for append; throws UserError naming the path. emf: write EMF
    // records in namespace `ns` with the dimension "job" (and "rank", "node" for per-rank ones).
    void open(const std::string& path, bool append, bool emf = false, const std::string& ns = "",
              const std::string& job = "");
    bool is_open() const { return f_ != nullptr; }
    bool emf() const { return emf_; }
    void write(const Record& r);                                                // a job-wide record
    void write_rank(const Record& r, int rank, const std::string& node);  // one rank's record

  private:
    void put(const std::string& line);
    FILE* f_ = nullptr;
    bool emf_ = false;
    std::string ns_, job_;
};

} // namespace dptrain
