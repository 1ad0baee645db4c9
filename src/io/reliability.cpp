// Signals, the watchdog and fault injection.
// Not for: checkpoint files (checkpoint.cpp) or the training loop.
#include "dptrain/io/reliability.h"

#include "dptrain/core/error.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/files.h"

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace dptrain {

// Lock-free, so handlers may use it; atomic, since any thread (readers, the checkpoint writer,
// OpenMP's, MPI's) may take a signal, two at once.
static std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler needs a lock-free flag");

// A preemption notice sticks: under --signal=USR1@120 the time limit's SIGTERM can arrive during
// the notice's checkpoint, and the job must still be requeued (stopped-by says SIGUSR1).
static void on_signal(int sig) {
    if (sig == SIGUSR1) {
        g_signal.store(SIGUSR1);
        return;
    }
    // SIGHUP (a closed terminal or ssh session) is an end like SIGTERM, not a requeue.
    int none = 0;
    g_signal.compare_exchange_strong(none, sig == SIGHUP ? SIGTERM : sig);
}

void install_preemption_handlers() {
    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGUSR1, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);
}

bool preemption_requested() { return g_signal != 0; }
int preemption_signal() { return g_signal; }

const char* phase_name(Phase p) {
    switch (p) {
    case Phase::setup: return "setup";
    case Phase::data: return "data";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::allreduce: return "all-reduce";
    case Phase::optimizer: return "optimizer";
    case Phase::eval: return "evaluation";
    case Phase::checkpoint: return "checkpoint";
    case Phase::checkpoint_wait: return "checkpoint-wait";
    case Phase::done: return "finish";
    }
    return "?";
}

Watchdog::Watchdog(double timeout_s) : timeout_(timeout_s), since_(now_seconds()) {
    tick_ = timeout_ > 0 ? std::min(1.0, timeout_ / 10) : 1.0;
    if (timeout_ > 0) thread_ = std::thread(&Watchdog::run, this);
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::stop() {
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (!beat_thread_.joinable()) return;
    // A heartbeat write that never returns (a dead shared filesystem) must not hang a finished
    // run's end: after 2 s the writer is left behind (it holds only `beat_`) for exit to end.
    std::unique_lock<std::mutex> g(beat_->mu);
    beat_->stop = true;
    beat_->cv.notify_all();
    if (beat_->cv.wait_for(g, std::chrono::seconds(2), [&] { return beat_->done; })) {
        g.unlock();
        beat_thread_.join();
        return;
    }
    std::fprintf(stderr, "dptrain: warning: the heartbeat file %s/%s: a write has not returned for 2 s (the shared "
                         "filesystem?); ending without it\n",
                 hb_dir_.c_str(), hb_host_.c_str());
    beat_thread_.detach();
}

void Watchdog::begin(long step, Phase p) {
    since_.store(now_seconds(), std::memory_order_relaxed);
    extra_.store(0.0, std::memory_order_relaxed);
    waiting_.store(false, std::memory_order_relaxed);
    step_.store(step, std::memory_order_relaxed);
    phase_.store((int)p, std::memory_order_relaxed);
}

static double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void Watchdog::heartbeats(const std::string& dir, const std::string& host, bool writer, std::vector<std::string> nodes) {
    {
        std::lock_guard<std::mutex> g(mu_);
        hb_dir_ = dir;
        hb_host_ = host;
        hb_writer_ = writer;
        hb_nodes_ = std::move(nodes);
    }
    if (writer && timeout_ > 0) {
        try {
            make_directories(dir, "node heartbeats");
        } catch (const UserError& e) {
            // Heartbeats only name a lost node after a timeout; training goes on without them.
            std::fprintf(stderr, "dptrain: warning: %s; a timeout will not name the silent node\n", e.what());
            return;
        }
        beat_ = std::make_shared<Beat>();
        beat_thread_ = std::thread(&Watchdog::beat, this, beat_, dir + "/." + host + ".tmp", dir + "/" + host, tick_);
    }
}

// Its own thread, so a slow shared filesystem delays only the heartbeat, which goes on while the
// watchdog waits for the launcher. Reads this object only while b->stop is unset (stop() sets it
// before it may leave the thread behind); then touches only `b`.
void Watchdog::beat(std::shared_ptr<Beat> b, std::string tmp, std::string path, double tick) {
    std::unique_lock<std::mutex> g(b->mu);
    while (!b->cv.wait_for(g, std::chrono::duration<double>(tick), [&] { return b->stop; })) {
        long step = step_.load();
        Phase p = (Phase)phase_.load(std::memory_order_relaxed);
        g.unlock();
        // Rewritten whole and renamed, so a reader never sees half a line.
        if (FILE* f = std::fopen(tmp.c_str(), "w")) {
            std::fprintf(f, "%ld %s %.3f\n", step, phase_name(p), unix_now());
            if (std::fclose(f) == 0) std::rename(tmp.c_str(), path.c_str());
        }
        g.lock();
    }
    b->done = true;
    b->cv.notify_all();
}

std::string Watchdog::peers_report(double now) const {
    std::string out;
    const double silent_after = std::max(5.0, 3 * tick_);
    for (const std::string& node : hb_nodes_) {
        if (node == hb_host_) continue;
        std::string path = hb_dir_ + "/" + node;
        FILE* f = std::fopen(path.c_str(), "r");
        long step = -1;
        char phase[32] = "?";
        double at = 0;
        bool ok = f && std::fscanf(f, "%ld %31s %lf", &step, phase, &at) == 3;
        if (f) std::fclose(f);
        std::string verdict;
        if (!ok) verdict = strfmt("%s: no heartbeat file (%s)", node.c_str(), path.c_str());
        else if (now - at > silent_after)
            verdict = strfmt("%s lost: no heartbeat for %.0f s (last: step %ld, %s)", node.c_str(), now - at, step, phase);
        else if (std::strcmp(phase, "all-reduce") == 0 && std::labs(step - step_.load()) <= 1)
            // A step apart is the same exchange: a sender can finish before its receiver does.
            verdict = strfmt("%s alive and also waiting in all-reduce of step %ld: the network between the nodes failed",
                             node.c_str(), step);
        else verdict = strfmt("%s alive, in %s of step %ld", node.c_str(), phase, step);
        out += (out.empty() ? "" : "; ") + verdict;
    }
    return out;
}

void Watchdog::run() {
    // A waiting rank gives the stuck one this long to report itself first.
    const double grace = std::max(2.0, 0.2 * timeout_);
    const auto tick = std::chrono::duration<double>(tick_);
    std::unique_lock<std::mutex> g(mu_);
    while (!cv_.wait_for(g, tick, [&] { return stop_; })) {
        // Every phase is watched, set-up and the run's end included.
        const Phase p = (Phase)phase_.load(std::memory_order_relaxed);
        const double waited = now_seconds() - since_.load(std::memory_order_relaxed);
        const double extra = extra_.load(std::memory_order_relaxed);
        const bool waiting_for_peers =
            p == Phase::allreduce || p == Phase::checkpoint_wait || waiting_.load(std::memory_order_relaxed);
        if (waited < timeout_ + extra + (waiting_for_peers ? grace : 0.0)) continue;
        std::string what =
            p == Phase::setup && step_.load() == 0
                ? strfmt("set-up stuck for %.1f s (--step-timeout %g%s): a file, device or peer that does not answer",
                         waited, timeout_, extra > 0 ? strfmt(" + --lock-wait %g", extra).c_str() : "")
                : strfmt("step %ld stuck in %s for %.1f s (--step-timeout %g)", step_.load(), phase_name(p), waited,
                         timeout_);
        g.unlock();  // so stop() and the heartbeat thread go on
        if (waiting_for_peers) {
            // The heartbeat files may have gone with the network: read on their own thread, 2 s.
            std::string peers;
            if (hb_nodes_.size() > 1) {
                auto box = std::make_shared<std::pair<std::mutex, std::string>>();
                auto done = std::make_shared<std::atomic<bool>>(false);
                double now = unix_now();
                std::thread([this, box, done, now] {
                    std::string r = peers_report(now);
                    std::lock_guard<std::mutex> lk(box->first);
                    box->second = r;
                    done->store(true);
                }).detach();
                for (int i = 0; i < 20 && !done->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
                std::lock_guard<std::mutex> lk(box->first);
                peers = done->load() ? box->second
                                     : "the other nodes' heartbeat files did not answer within 2 s (the shared "
                                       "filesystem is unreachable too)";
            }
            what += peers.empty() ? "; this rank waits for its peers: one of them is stuck or gone"
                                  : "; this rank waits for its peers: " + peers;
        }
        std::fprintf(stderr, "dptrain: error: %s (%s)\n", what.c_str(), process_identity().c_str());
        std::fflush(stderr);
        // A rank waiting for unreachable peers would leave mpirun waiting on them even after
        // MPI_Abort, so it first gives the launcher's own failure detection (daemon keepalive,
        // Slurm's node health) time to end the job cleanly.
        if (waiting_for_peers) std::this_thread::sleep_for(std::chrono::seconds(30));
        abort_job(kExitFatal);
    }
}

void FaultPlan::check_fires(int world_size, long steps) const {
    for (const Fault& f : faults_) {
        if (f.rank >= world_size)
            throw UserError(strfmt("--inject-fault: rank %d is not in this run of %d rank%s (0..%d); the fault would "
                                   "never happen",
                                   f.rank, world_size, world_size == 1 ? "" : "s", world_size - 1));
        if (f.step > steps)
            throw UserError(strfmt("--inject-fault: step %ld is past --steps %ld; the fault would never happen", f.step,
                                   steps));
    }
}

FaultPlan FaultPlan::parse(const std::string& spec) {
    FaultPlan plan;
    std::stringstream ss(spec);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        int rank = -1, used = 0;
        long step = -1;
        char kind[32] = {0};
        bool ok = std::sscanf(item.c_str(), "%d:%ld:%31s%n", &rank, &step, kind, &used) == 3 &&
                  used == (int)item.size() && rank >= 0 && step >= 1;
        Fault f{Fault::Kind::kill, rank, step};
        std::string k = kind;
        if (k == "kill") f.kind = Fault::Kind::kill;
        else if (k == "hang") f.kind = Fault::Kind::hang;
        else if (k == "nan") f.kind = Fault::Kind::nan;
        else if (k == "corrupt-checkpoint") f.kind = Fault::Kind::corrupt_checkpoint;
        else if (k == "io-error") f.kind = Fault::Kind::io_error;
        else if (k == "slow") f.kind = Fault::Kind::slow;
        else if (k == "slow-read") f.kind = Fault::Kind::slow_read;
        else if (k == "slow-checkpoint") f.kind = Fault::Kind::slow_checkpoint;
        else if (k == "term-in-forward") f.kind = Fault::Kind::term_in_forward;
        else if (k == "term-in-backward") f.kind = Fault::Kind::term_in_backward;
        else if (k == "stage-hang") f.kind = Fault::Kind::stage_hang;
        else if (k == "stage-slow") f.kind = Fault::Kind::stage_slow;
        else ok = false;
        if (!ok)
            throw UserError(strfmt("--inject-fault '%s': expected RANK:STEP:KIND with STEP >= 1 and KIND one of kill, "
                                   "hang, nan, corrupt-checkpoint, io-error, slow, slow-read, slow-checkpoint, "
                                   "term-in-forward, term-in-backward, stage-hang, stage-slow",
                                   item.c_str()));
        plan.faults_.push_back(f);
    }
    return plan;
}

bool FaultPlan::slow(int rank, long step, Fault::Kind kind) const {
    for (const Fault& f : faults_)
        if (f.rank == rank && f.step <= step && f.kind == kind) return true;
    return false;
}

long FaultPlan::slow_read_from(int rank) const {
    long from = -1;
    for (const Fault& f : faults_)
        if (f.rank == rank && f.kind == Fault::Kind::slow_read && (from < 0 || f.step - 1 < from)) from = f.step - 1;
    return from;
}

bool FaultPlan::has(int rank, long step, Fault::Kind kind) const {
    for (const Fault& f : faults_)
        if (f.rank == rank && f.step == step && f.kind == kind) return true;
    return false;
}

} // namespace dptrain
