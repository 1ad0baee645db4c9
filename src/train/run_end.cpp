// The end of a run: the collectives that gather what it did (breakdown, peak memory), the trace,
// the last checkpoint's write, then the closing lines. Not for: their wording (reporter.cpp).
#include "dptrain/train/loop.h"

#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/core/memory.h"

#include <cstring>

namespace dptrain {

// Collective: every rank took the same path here.
RunSummary StepLoop::summarize(int code, long start, long done, long end) {
    RunSummary s;
    s.code = code;
    s.start = start;
    s.done = done;
    s.end = end;
    s.usr1 = preempted_;
    s.final_loss = final_loss_;
    if (evaluated_) s.last_eval = last_eval_;
    s.skipped = skipped_;
    s.staged = p_.model.staged_batches();
    s.metrics = p_.o.metrics;
    s.halted = p_.report.metrics_halt();
    // With the step on the GPU, the plan's GPU-only rows are not in host memory.
    int on_gpu = p_.device.gpu() >= 0 && std::strcmp(p_.grads.where(), "GPU") == 0 ? 1 : 0;
    p_.world.allreduce(&on_gpu, 1, ReduceOp::min);
    s.on_gpu = on_gpu;
    // Ranks with the most and least peak resident memory (rank 0 holds the checkpoint's copy too).
    const double mine = (double)peak_resident_bytes();
    s.peak_most = p_.world.max_loc(mine);
    s.peak_least = p_.world.max_loc(-mine);
    s.peak_least.first = -s.peak_least.first;
    s.host_planned = on_gpu ? p_.planned_host_bytes : p_.planned_bytes;
    // The most any GPU allocated, beside the plan's GPU part (cuBLAS's workspace, NCCL's buffers
    // and the input slots are not planned).
    if (on_gpu) {
        const size_t now = p_.device.gpu_memory_used();
        s.gpu_most = p_.world.max_loc(now > p_.gpu_used_at_start ? (double)(now - p_.gpu_used_at_start) : 0.0);
        s.gpu_planned = p_.planned_gpu_bytes;
    }
    return s;
}

int StepLoop::finish(int code, long start, long done, long end) {
    p_.clock.mark(Phase::done, done, true);
    StepBreakdown whole = gather_breakdown(p_.clock.times().run(), p_.world);
    whole.checkpoint.background = p_.o.async_checkpoint;
    p_.report.run_breakdown(whole, done, now_seconds() - t_run_);
    // --metrics-required: rank 0's failed metrics write ends the run with exit 2, after its checkpoint.
    int halted = p_.report.metrics_halt().empty() ? 0 : 1;
    p_.world.allreduce(&halted, 1, ReduceOp::max);
    if (halted && code != kExitNonfinite) code = kExitUser;
    RunSummary s = summarize(code, start, done, end);
    p_.report.memory(s);
    if (p_.clock.tracer().on()) {
        try {
            p_.clock.tracer().write(Tracer::rank_path(p_.o.trace, p_.topo.rank, start), p_.topo.rank, p_.topo.host);
            if (const size_t dropped = p_.clock.tracer().dropped(); dropped > 0 && p_.topo.rank == 0)
                p_.report.print(strfmt("note: --trace: %zu events of rank 0 are not in its trace (its buffers were full: "
                                       "trace a part of a run this long)\n",
                                       dropped));
        } catch (const UserError& e) {
            fatal(e.what(), kExitUser);
        }
    }
    p_.ckpt.wait();
    // From here other ranks only wait for rank 0 (its last background write, its lines).
    if (p_.topo.rank != 0) p_.clock.watchdog().waiting(true);
    s.seconds = now_seconds() - t_run_;
    s.checkpoint = p_.ckpt.last();
    p_.report.finished(s);
    return code;
}

} // namespace dptrain
