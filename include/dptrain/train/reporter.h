// What a run tells its user, all from rank 0: the start-up banner, the step lines (and the
// in-place progress line on a terminal between them), evaluation lines, the op profile, the
// warnings that name a bottleneck, the end-of-run breakdown and result; and beside them the
// metrics file (JSON lines or CloudWatch EMF), with every rank's GPU health (NVML) at each step
// line. Not for: measuring (step_clock.h, the loop) or deciding anything about training.
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

// What the banner says of the run, gathered by the set-up.
struct RunFacts {
    std::string backend, device_note;           // Device::describe, Device::note
    std::string no_gpu;                         // a CUDA build on a machine without a GPU: why (else "")
    std::string data, io_note;                  // Task::describe, Task::load_node_memory
    std::string model;                          // the model's signature
    size_t params = 0;
    long global_batch = 0, steps_per_epoch = 0;
    std::string gradients;                      // GradientPath::describe
    std::vector<std::string> gradient_notes;    // GradientPath::notes
    double peak_gflops = 0;                     // summed over the ranks; 0: unknown (no MFU)
    double flops_per_sample = 0;
    const char* unit = "sample";                // Task::unit
    int tokens_per_sample = 0;                  // Task::tokens_per_sample
    bool on_gpu = false;                        // the model computes on a GPU
    std::string resumed_from;
    size_t activation_bytes = 0;  // Model::activation_bytes (0: not known)
    std::string initialized_from;  // --init-from, with what the import says ("" when not used)
    std::string memory_plan;       // plan_table's (memory_plan.h), "" when not planned
    long start_step = 0, start_epoch = 0;
};

// What a run did, gathered at its end (collectives, StepLoop::summarize) for the Reporter to say.
struct RunSummary {
    int code = 0;  // kExitOk, kExitPreempted (a stop signal: checkpoint written) or kExitNonfinite
    long start = 0, done = 0, end = 0;  // the steps it began after, finished, and was to end at
    double seconds = 0;
    bool usr1 = false;  // the stop was a preemption notice (SIGUSR1), not SIGTERM
    double final_loss = 0;  // the last step line's training loss
    std::optional<EvalStats> last_eval;
    long skipped = 0;  // non-finite steps skipped
    long staged = -1;  // batches copied to the GPU during the step before; -1: a model that never stages
    std::string checkpoint, metrics;  // the newest checkpoint's path, the metrics file
    // The peak resident bytes of the ranks that used the most and the least (value, rank), beside
    // the plan's host total; on_gpu: the step ran on the GPUs, whose most allocated is beside the
    // plan's GPU part.
    std::pair<double, int> peak_most{0, 0}, peak_least{0, 0}, gpu_most{0, 0};
    size_t host_planned = 0, gpu_planned = 0;
    bool on_gpu = false;
};

class Reporter {
  public:
    Reporter(const Options& o, const Topology& topo);

    // Rank 0 prints s (other ranks nothing), first clearing an in-place progress line.
    void print(const std::string& s);
    // Rank 0 writes RUN_DIR/stopped-by ("SIGUSR1" or "SIGTERM"): which signal made the run
    // checkpoint and exit 75, for a batch script to requeue only a preemption. open_metrics
    // removes an earlier run's.
    void stopped_by(const char* signal);
    // After the run's first checkpoint: the time a stop signal needs (finish the step, then
    // checkpoint), as a metrics record, and printed when it is a second or more, with a warning
    // when it nears what launchers give by default.
    void stop_budget(long step, double checkpoint_s, double step_s);

    // Set-up, local: this rank's GPU in NVML for --gpu-health; throws UserError with --gpu-health
    // on and no GPU for this rank.
    void open_gpu_health();
    // Set-up, collective: GPU health is on when any rank has a GPU to read.
    void agree_gpu_health();
    // Set-up, rank 0: the metrics file (a resumed run keeps the records up to its step) and, with
    // --tensorboard, the run's event file.
    void open_metrics(long start_step);
    // Collective: every rank's host (to name stragglers), then the banner (the rank table is
    // collective too).
    void banner(const RunFacts& facts);

    // Collective, at each step line: prints it, gathers the ranks' GPU readings and writes the
    // records; from the second step line on, warns (once each) of a data or network bottleneck.
    void step_line(const StepStats& st, const StepBreakdown& bd);
    // Between step lines on a terminal: the progress line, updated in place at most 4 times a second.
    void progress(long done, double now, double per_step_s, double eta_s);
    void eval_line(const EvalStats& e);
    // --profile-ops: rank 0's forward and backward of one step, by kind of op.
    void op_times(long step, const OpTimes& t, const char* how_timed);
    // Rank 0: the whole run's step breakdown (gather_breakdown's) and its summary record.
    void run_breakdown(const StepBreakdown& whole, long done, double seconds);
    // Rank 0: the run's peak memory beside its plan (host, and GPU where the step ran there).
    void memory(const RunSummary& s);
    // Rank 0: the run's closing lines: how it ended, where its checkpoint and metrics are (a stop
    // also writes RUN_DIR/stopped-by).
    void finished(const RunSummary& s);
    // A non-finite step: stop (one error line on stderr) or skip (a warning).
    // `input`: where a non-finite input value is (StepLoop::nonfinite_input), or "".
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
    bool tty_ = false;                // rank 0: progress updates in place
    bool status_shown_ = false;
    double last_status_ = 0;
    JsonlWriter jsonl_;
    TensorBoardWriter tb_;
    GpuHealth nvml_;
    int gpu_index_ = -1;  // this rank's GPU in NVML, -1 for none
    bool gpu_health_ = false;
    std::string gpu_health_note_;
    bool warned_gpu_data_ = false, warned_gpu_comm_ = false;
    BottleneckRule bottleneck_;
    bool warned_mfu_ = false;
};

// RUN_DIR/stopped-by holding `signal` (made with the directory when a stop comes before the run
// made it); a warning on stderr when it cannot be written. Reporter::stopped_by, and set-up's stop.
void write_stopped_by(const std::string& run_dir, const char* signal);

} // namespace dptrain
