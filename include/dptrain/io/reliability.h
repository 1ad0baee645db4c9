// What keeps a job from hanging or losing work: exit codes, the preemption signal flag, the step
// watchdog, and fault injection for tests (--inject-fault). Not for: checkpoint files
// (checkpoint.h) or the loop (train/loop.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dptrain {

// Exit codes (docs/RELIABILITY.md, "Exit codes"; the sbatch scripts requeue on kExitPreempted).
constexpr int kExitOk = 0;
constexpr int kExitFatal = 1;       // MPI / HDF5 / internal error, watchdog, a peer's failure
constexpr int kExitUser = 2;        // a bad option, file, shard or checkpoint
constexpr int kExitNonfinite = 4;   // NaN/Inf loss or gradient with --on-nonfinite stop
constexpr int kExitPreempted = 75;  // SIGUSR1 (requeue) or SIGTERM: checkpoint written

// The handlers only set a flag (async-signal-safe); the ranks agree on it through the all-reduce.
// SIGTERM and SIGHUP (a lost terminal) end the run with a checkpoint; SIGUSR1 asks for a requeue.
void install_preemption_handlers();
bool preemption_requested();
int preemption_signal();  // 0 if none

// checkpoint_wait: other ranks waiting for rank 0's synchronous checkpoint write.
enum class Phase : int { setup, data, forward, backward, allreduce, optimizer, eval, checkpoint, checkpoint_wait, done };
const char* phase_name(Phase p);

// Ends the job (one line naming rank, host, step and phase, then MPI_Abort) when a step, evaluation
// or checkpoint outlasts `timeout_s`. A rank waiting on peers gets a grace longer, so the stuck
// rank names itself first. allow(kUnwatched): a wait another rank's watchdog already watches.
constexpr double kUnwatched = 1e12;

class Watchdog {
  public:
    explicit Watchdog(double timeout_s);
    ~Watchdog();
    // `step` is 1-based: the step being computed.
    void begin(long step, Phase p);
    // Without restarting the step's clock.
    void phase(Phase p) { phase_.store((int)p, std::memory_order_relaxed); }
    // Extra time for the current phase (set-up: the lock wait); begin() ends it.
    void allow(double extra_s) { extra_.store(extra_s, std::memory_order_relaxed); }
    // Own part done, waiting for peers: a grace longer, as in the all-reduce, so the stuck rank
    // names itself first. begin() ends it.
    void waiting(bool w) { waiting_.store(w, std::memory_order_relaxed); }
    void stop();
    // When `writer` (one rank per node), rewrites dir/HOST (step, phase, time) every tick. A rank
    // timing out on its peers reads them to say which node went silent or where it is stuck (a
    // network failure leaves both sides alive and waiting). Call before the first step.
    void heartbeats(const std::string& dir, const std::string& host, bool writer, std::vector<std::string> nodes);
    // "" when there are no heartbeats to read.
    std::string peers_report(double now_unix) const;

  private:
    // Shared with the writer: stop() may leave it blocked on a dead filesystem, and it must then
    // touch nothing of this object.
    struct Beat {
        std::mutex mu;
        std::condition_variable cv;
        bool stop = false, done = false;
    };
    void run();
    void beat(std::shared_ptr<Beat> b, std::string tmp, std::string path, double tick);
    double timeout_;
    std::atomic<long> step_{0};
    std::atomic<int> phase_{(int)Phase::setup};
    std::atomic<double> since_;
    std::atomic<double> extra_{0.0};
    std::atomic<bool> waiting_{false};
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::string hb_dir_, hb_host_;
    bool hb_writer_ = false;
    std::vector<std::string> hb_nodes_;
    double tick_ = 1.0;
    std::thread thread_, beat_thread_;
    std::shared_ptr<Beat> beat_;
};

// --inject-fault RANK:STEP:KIND[,...], for tests. STEP is 1-based; slow kinds fire from STEP on.
struct Fault {
    enum class Kind {
        kill, hang, nan, corrupt_checkpoint, io_error, slow, slow_read, slow_checkpoint,
        term_in_forward, term_in_backward,  // SIGTERM to itself right after that pass
        stage_hang,  // --stage-dir: the copy stops after its first piece
        stage_slow   // --stage-dir: each piece takes 2 s longer
    } kind;
    int rank;
    long step;
};
class FaultPlan {
  public:
    // Throws UserError naming the bad entry.
    static FaultPlan parse(const std::string& spec);
    // Refuses a fault that would never fire, so a failure test cannot pass without the failure.
    void check_fires(int world_size, long steps) const;
    bool has(int rank, long step, Fault::Kind kind) const;
    // Given for `step` or an earlier one.
    bool slow(int rank, long step, Fault::Kind kind = Fault::Kind::slow) const;
    // The first 0-based slow-read step, -1 for none.
    long slow_read_from(int rank) const;
    bool empty() const { return faults_.empty(); }

  private:
    std::vector<Fault> faults_;
};

} // namespace dptrain
