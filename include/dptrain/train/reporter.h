// What a run tells its user, from rank 0: banner, step, progress and evaluation lines, the op
// profile, bottleneck warnings, the end's breakdown; and the metrics file with every rank's GPU
// health. Not for: measuring (step_clock.h, the loop) or deciding anything about training.
#pragma once

#include "dptrain/comm/communicator.h"
#include "dptrain/comm/topology.h"
#include "dptrain/config/options.h"
#include "dptrain/io/gpu_health.h"
#include "dptrain/io/metrics.h"
#include "dptrain/io/tensorboard.h"
#include "dptrain/model/op_times.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

struct RunFacts {
    std::string backend, device_note;
    std::string no_gpu;                         // why a CUDA build found no GPU, else ""
    std::string data, io_note;
    std::string model;                          // signature
    size_t params = 0;
    long global_batch = 0, steps_per_epoch = 0;
    std::string gradients;
    std::vector<std::string> gradient_notes;
    double peak_gflops = 0;                     // summed over the ranks; 0: no MFU
    double flops_per_sample = 0;
    const char* unit = "sample";
    int tokens_per_sample = 0;
    bool on_gpu = false;
    std::string resumed_from;
    size_t activation_bytes = 0;  // 0: not known
    std::string initialized_from;  // --init-from and what the import says
    std::string memory_plan;       // plan_table's, "" when not planned
    long start_step = 0, start_epoch = 0;
};

// Gathered at the run's end (collectives, StepLoop::summarize).
struct RunSummary {
    int code = 0;  // kExitOk, kExitPreempted, kExitNonfinite, or kExitUser (--metrics-required)
    long start = 0, done = 0, end = 0;  // the steps it began after, finished, and was to end at
    double seconds = 0;
    bool usr1 = false;  // a preemption notice, not SIGTERM
    double final_loss = 0;  // the last step line's
    std::optional<EvalStats> last_eval;
    long skipped = 0;  // non-finite steps skipped
    long staged = -1;  // batches staged to the GPU in the step before; -1: never stages
    std::string checkpoint, metrics;
    std::string halted;  // rank 0: why a metrics write failed under --metrics-required (exit 2)
    // (value, rank) of the ranks with the most and least peak resident bytes; gpu_most beside the
    // plan's GPU part when on_gpu.
    std::pair<double, int> peak_most{0, 0}, peak_least{0, 0}, gpu_most{0, 0};
    size_t host_planned = 0, gpu_planned = 0;
    bool on_gpu = false;
};

class Reporter {
  public:
    Reporter(const Options& o, const Topology& topo);

    // Rank 0 prints s, first clearing an in-place progress line.
    void print(const std::string& s);
    // Rank 0 writes RUN_DIR/stopped-by, so a batch script requeues only a preemption.
    void stopped_by(const char* signal);
    // After the first checkpoint: what a stop needs (the step, then the checkpoint), recorded;
    // printed from a second on, warning when it nears launchers' default grace.
    void stop_budget(long step, double checkpoint_s, double step_s);

    // Set-up, local: throws UserError with --gpu-health on and no GPU for this rank.
    void open_gpu_health();
    // Set-up, collective: on when any rank has a GPU to read.
    void agree_gpu_health();
    // Set-up, rank 0: a resumed run keeps the records up to its step; --tensorboard's event file.
    void open_metrics(long start_step);
    // Collective: every rank's host (to name stragglers), then the banner.
    void banner(const RunFacts& facts);

    // Collective: prints the line, gathers GPU readings, writes the records; from the second line
    // on, warns once each of a data or network bottleneck.
    void step_line(const StepStats& st, const StepBreakdown& bd);
    // On a terminal, in place, at most 4 times a second.
    void progress(long done, double now, double per_step_s, double eta_s);
    void eval_line(const EvalStats& e);
    // --profile-ops: rank 0's forward and backward of one step, by kind of op.
    void op_times(long step, const OpTimes& t, const char* how_timed);
    // Rank 0: the whole run's step breakdown and its summary record.
    void run_breakdown(const StepBreakdown& whole, long done, double seconds);
    // Rank 0: the peak memory beside its plan.
    void memory(const RunSummary& s);
    // Rank 0: how the run ended, where its checkpoint and metrics are.
    void finished(const RunSummary& s);
    // Rank 0 under --metrics-required: why a metrics write failed; "" while none has (other ranks:
    // always ""). The run then stops at its next step.
    const std::string& metrics_halt() const;
    // stopping: one error line on stderr, else a warning. `input`: a bad input's place, or "".
    void nonfinite(long step, bool loss, double norm, bool stopping, long skipped, const std::string& input);

  private:
    void banner_machine(const RunFacts& f, const std::string& table);
    void banner_model(const RunFacts& f);
    void banner_start(const RunFacts& f);
    void warn_bottleneck(const StepStats& st, const StepBreakdown& bd);
    std::vector<double> gather_gpu_health();
    void write_gpu_records(const std::vector<double>& all, long step, const StepStats& st);
    void write_rank_records(const StepBreakdown& bd, long step);

    const Options& o_;
    const Topology& topo_;
    MpiCommunicator world_;
    int rank_, W_;
    RunFacts facts_;
    std::vector<std::string> hosts_;  // rank 0: every rank's host
    bool tty_ = false;
    bool status_shown_ = false;
    double last_status_ = 0;
    JsonlWriter jsonl_;
    TensorBoardWriter tb_;
    GpuHealth nvml_;
    int gpu_index_ = -1;  // in NVML; -1 for none
    bool gpu_health_ = false;
    std::string gpu_health_note_;
    bool warned_gpu_data_ = false, warned_gpu_comm_ = false;
    BottleneckRule bottleneck_;
    bool warned_mfu_ = false;
};

// Makes RUN_DIR when a stop precedes it; a warning when it cannot be written.
void write_stopped_by(const std::string& run_dir, const char* signal);

} // namespace dptrain
