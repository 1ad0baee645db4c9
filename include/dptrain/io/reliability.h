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

// Process exit codes (docs/RELIABILITY.md; the sbatch scripts requeue on kExitPreempted).
constexpr int kExitOk = 0;
constexpr int kExitFatal = 1;       // MPI / HDF5 / internal error, watchdog, a peer's failure
constexpr int kExitUser = 2;        // a bad option, file, shard or checkpoint
constexpr int kExitNonfinite = 4;   // NaN/Inf loss or gradient with --on-nonfinite stop
constexpr int kExitPreempted = 75;  // SIGUSR1 (requeue) or SIGTERM (an end): checkpoint written

// SIGTERM and SIGUSR1 set a flag (and nothing else: async-signal-safe); the trainer polls it at
// every step and all ranks agree through the gradient all-reduce.
void install_preemption_handlers();
bool preemption_requested();
int preemption_signal();  // the signal received, 0 if none

// checkpoint_wait: the other ranks waiting for rank 0's synchronous checkpoint write.
enum class Phase : int { setup, data, forward, backward, allreduce, optimizer, eval, checkpoint, checkpoint_wait, done };
const char* phase_name(Phase p);

// A thread that ends the job when one step (or one evaluation / checkpoint) runs longer than
// `timeout_s`: it prints one line naming this rank, its host, the step and the phase, then calls
// MPI_Abort. A rank waiting in the all-reduce (or for rank 0's checkpoint) is usually waiting for
// a stuck peer, so it waits a grace period longer: the stuck rank names itself first.
// Watchdog::allow(kUnwatched): a wait left unwatched, where another rank's watchdog watches what
// it waits for (a node's copy to --stage-dir, the other nodes' copies).
constexpr double kUnwatched = 1e12;

class Watchdog {
  public:
    explicit Watchdog(double timeout_s);
    ~Watchdog();
    // Marks the start of step `step` (1-based: the step being computed) or of a long phase.
    void begin(long step, Phase p);
    // Changes the phase within the current step, without restarting its clock.
    void phase(Phase p) { phase_.store((int)p, std::memory_order_relaxed); }
    // Gives the current phase extra_s more than the timeout (set-up: the lock wait); begin() ends it.
    void allow(double extra_s) { extra_.store(extra_s, std::memory_order_relaxed); }
    // This rank, its own part done, waits for its peers (set-up's agreement after a phase only
    // rank 0 works in, a sharded checkpoint's sends, the end): as in the all-reduce, a grace
    // longer before it speaks, so that the rank that is stuck names itself first, and its line
    // says it waits. begin() ends it.
    void waiting(bool w) { waiting_.store(w, std::memory_order_relaxed); }
    void stop();
    // Node heartbeats in `dir` (on the shared filesystem, beside the checkpoints): when `writer`
    // (one rank per node), this thread rewrites dir/HOST with its step, phase and time at every
    // tick. A rank that times out waiting for its peers reads every node's heartbeat and says
    // which node went silent (lost) or is stuck where (a network failure leaves both sides alive
    // and waiting). Call before the first step.
    void heartbeats(const std::string& dir, const std::string& host, bool writer, std::vector<std::string> nodes);
    // The verdict on the other nodes from their heartbeats; "" when there are none to read.
    std::string peers_report(double now_unix) const;

  private:
    // The heartbeat writer's flags, shared with it: stop() may leave it behind, blocked in a write
    // on a filesystem that stopped answering, and it must then touch nothing of this object.
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

// --inject-fault RANK:STEP:KIND[,RANK:STEP:KIND...]: make failures happen on purpose, for tests.
// STEP is the 1-based step during which the fault fires; slow fires at every step from STEP on.
struct Fault {
    enum class Kind {
        kill, hang, nan, corrupt_checkpoint, io_error, slow, slow_read, slow_checkpoint,
        term_in_forward, term_in_backward,  // the rank sends itself SIGTERM right after that pass
        stage_hang,  // --stage-dir: the rank's copy stops after its first piece, as on a filesystem that hangs
        stage_slow   // --stage-dir: each piece of the rank's copy takes 2 s longer
    } kind;
    int rank;
    long step;
};
class FaultPlan {
  public:
    // Throws UserError naming the bad entry.
    static FaultPlan parse(const std::string& spec);
    // A fault that would never fire (a rank not in the run, a step past the last) is refused, so a
    // test of the failure path cannot pass without the failure: throws UserError naming it.
    void check_fires(int world_size, long steps) const;
    bool has(int rank, long step, Fault::Kind kind) const;
    // Whether a fault of `kind` (slow: a straggler; slow_checkpoint) holds for `rank` at `step`:
    // one given for that step or an earlier one.
    bool slow(int rank, long step, Fault::Kind kind = Fault::Kind::slow) const;
    // slow-read: the first 0-based step from which `rank`'s reads are slow, -1 for none.
    long slow_read_from(int rank) const;
    bool empty() const { return faults_.empty(); }

  private:
    std::vector<Fault> faults_;
};

} // namespace dptrain
