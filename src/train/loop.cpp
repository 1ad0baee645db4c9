// StepLoop: the loop, one step, the step line's interval, and the end of the run.
#include "dptrain/train/loop.h"

#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/core/memory.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <csignal>
#include <cstring>
#include <thread>

namespace dptrain {

int StepLoop::run(long start) {
    const Options& o = p_.o;
    const long end = o.stop_after > 0 ? std::min(o.steps, start + o.stop_after) : o.steps;
    if (start >= end) {
        p_.report.print(strfmt("nothing to train: the checkpoint is at step %ld and --steps is %ld\n", start, o.steps));
        return kExitOk;
    }
    const int rank = p_.topo.rank;
    updates_ = p_.ckpt.updates_at_start();
    long io_fail = -1;  // the 0-based step whose read fails, when injected on this rank
    for (long s = start; s < end; ++s)
        if (p_.faults.has(rank, s + 1, Fault::Kind::io_error)) io_fail = s;
    Prefetcher pf(p_.task.readers(o.io_threads), p_.sampler, rank, p_.topo.size, o.batch_size,
                  Prefetcher::slots_for(o.prefetch, o.grad_accum, o.io_threads), start, end, io_fail, o.io == IoMode::collective, p_.faults.slow_read_from(rank), o.grad_accum);
    // On a GPU the batches (and a host path's parameters and gradients) are copied every step:
    // page-locked, released before the ring is freed.
    std::vector<std::pair<void*, size_t>> regions = pf.buffers();
    for (auto& r : p_.grads.host_buffers()) regions.push_back(r);
    std::unique_ptr<Pinned> pinned = p_.device.pin(regions);
    if (pinned && !pinned->note.empty()) p_.report.print(strfmt("note: %s\n", pinned->note.c_str()));
    p_.grads.upload_state();  // the starting point, fresh or resumed, to where the step runs
    // However the loop ends, a batch being staged to the GPU has arrived before the ring's memory
    // is unpinned and freed (declared after both, so destroyed first).
    struct Unstage {
        Model& m;
        ~Unstage() { m.unstage(); }
    } unstage{p_.model};
    if (!o.trace.empty()) {
        // About 8 events a step (phases, evaluation, checkpoint), 3 more (data, forward, backward)
        // for each micro-batch after the first, plus the buckets; capped.
        const size_t per_step = 8 + 3 * (size_t)(o.grad_accum - 1) + p_.grads.traced_per_step();
        p_.clock.tracer().enable(std::min<size_t>(4u << 20, (size_t)(end - start) * per_step + 64));
        p_.grads.set_tracer(&p_.clock.tracer());
        p_.clock.tracer().set_origin(trace_origin());
    }
    // A warm-up as long as the run leaves the schedule's peak and decay out, unseen but in the lr
    // column (the default 10 steps, in a run of 4, trained at a tenth to 40% of --lr).
    if (o.warmup_steps >= o.steps && start < end)
        p_.report.print(strfmt("note: --warmup-steps %ld >= --steps %ld: the learning rate only rises, to %.2e at the "
                               "last step (--lr %.2e), and never decays; a warm-up of about a tenth of --steps gives "
                               "the schedule its peak and decay\n",
                               o.warmup_steps, o.steps, p_.sched.at(o.steps - 1), o.lr));
    p_.clock.times().reserve(std::min(o.log_every, end - start));
    if (o.profile_ops > 0 && (o.profile_ops <= start || o.profile_ops > end))
        p_.report.print(strfmt("note: --profile-ops %ld: that step is not in this run (steps %ld..%ld); no op times\n",
                               o.profile_ops, start + 1, end));
    // A stop before the first step then writes nothing: the checkpoint of `start` is there.
    last_saved_ = p_.ckpt.holds_start() ? start : -1;
    t_run_ = now_seconds();
    iv_ = Interval();
    iv_.t0 = t_run_;
    iv_.first = start;
    return train(pf, start, end);
}

int StepLoop::train(Prefetcher& pf, long start, long end) {
    const Options& o = p_.o;
    int code = kExitOk;
    long done = start;
    for (long s = start; s < end; ++s) {
        done = s + 1;
        p_.clock.mark(Phase::data, done, true);
        inject_before_step(done);
        const Step st = step(pf, s);
        if (st.abandoned) {
            // Nothing of this step was applied: the checkpoint is of the step before it, and the
            // breakdown's steps are the ones done.
            p_.clock.drop_step();
            done = s;
            preempted_ = st.preempted;
            code = kExitPreempted;
            // The stop came during that checkpoint (and its directory was not deleted since).
            const bool written = last_saved_ == done && p_.ckpt.dir_kept(p_.world);
            p_.report.print(strfmt("stop: step %ld left out (the signal came before its backward); checkpoint of "
                                   "step %ld%s\n",
                                   s + 1, s,
                                   !written ? "" : s == start ? " (the one this run resumed from)" : " (written just before)"));
            if (!written) checkpoint(done, true);
            break;
        }
        if (!st.finite) {
            ++skipped_;
            p_.report.nonfinite(done, st.nonfinite_loss, last_norm_, o.on_nonfinite == OnNonfinite::stop, skipped_,
                                st.bad_input);
            if (o.on_nonfinite == OnNonfinite::stop) {
                code = kExitNonfinite;
                break;
            }
        } else {
            iv_.loss += st.loss;
            ++iv_.steps;
        }
        iv_.samples += st.global_n;
        const double t_end = p_.clock.end_step();
        const bool line = done % o.log_every == 0 || done == end || st.stop_requested;
        if (line) step_line(pf, t_end, done, start, end);
        if (done == start + 1 && !line) {
            // The run's first step is its warm-up: the rates and shares of the first step line
            // start after it (its loss still counts), and so does the run's breakdown (below).
            pf.take_wait_seconds();
            p_.grads.take_comm_seconds();
            iv_.t0 = t_end;
            iv_.first = done;
            iv_.samples = 0;
            iv_.exposed = iv_.other = 0;
        }
        if (done == start + 1 && done < end) p_.clock.times().forget_warmup();
        if (!line && done > start + 1) {
            // Between step lines, on a terminal: one line updated in place.
            const double per_step = (t_end - iv_.t0 - iv_.other) / (double)(done - iv_.first);
            p_.report.progress(done, t_end, per_step, (t_end - t_run_) / (double)(done - start) * (double)(o.steps - done));
        }
        const double t_other = now_seconds();  // evaluation and checkpoints are left out of the step's rate
        // A stop goes to its checkpoint first: an evaluation can outlast the launcher's grace.
        bool stop = st.stop_requested, usr1 = st.preempted;
        if (!stop && ((o.eval_every > 0 && done % o.eval_every == 0) || done == o.steps)) {
            p_.clock.mark(Phase::eval, done, true);
            if (std::optional<EvalStats> e = p_.eval.run(done, p_.params.data())) {
                last_eval_ = *e;
                evaluated_ = true;
                p_.report.eval_line(last_eval_);
            } else {
                stop = true;
                usr1 = p_.eval.stop_signal() == SIGUSR1;
                p_.report.print(strfmt("stop: the evaluation at step %ld cut short by %s; checkpoint of step %ld\n", done,
                                       usr1 ? "SIGUSR1" : "SIGTERM", done));
            }
        }
        const bool last = done == end || stop;
        if ((o.checkpoint_every > 0 && done % o.checkpoint_every == 0) || last) checkpoint(done, last);
        iv_.other += now_seconds() - t_other;
        if (stop) {
            code = kExitPreempted;
            preempted_ = usr1;
            break;
        }
    }
    return finish(code, start, done, end);
}

// The stop signal as this rank has it, into the control floats: [0] asked to stop, [2] by SIGUSR1.
static void note_stop(float* ctl) {
    ctl[0] = preemption_requested() ? 1.0f : 0.0f;
    ctl[2] = preemption_signal() == SIGUSR1 ? 1.0f : 0.0f;
}

// Optimizer step s (0-based): forward and backward of each of its --grad-accum micro-batches,
// the gradients summed into one buffer, then their sum over the ranks (once, on the last
// micro-batch, whose backward alone starts buckets) and the update.
// A stop signal that has arrived before a forward, or during it, leaves the rest of this rank's
// compute out: it goes straight to the sum, whose control floats tell every rank not to apply
// the step, so a long step does not delay the checkpoint. The sum itself still runs (it is the
// agreement; buckets backward did not start are sent by reduce()).
StepLoop::Step StepLoop::step(Prefetcher& pf, long s) {
    const long done = s + 1;
    const int rank = p_.topo.rank, N = p_.o.grad_accum;
    GradientPath& g = p_.grads;
    const bool profiled = done == p_.o.profile_ops && rank == 0;  // rank 0 prints them (the last micro-batch's)
    Step st;
    double loss_sum = 0;
    float* ctl = nullptr;
    bool leave_out = false;
    std::string found;  // the first non-finite input of this rank's earlier micro-batches
    const Batch* b = nullptr;
    for (int k = 0; k < N && !leave_out; ++k) {
        if (k > 0) {
            pf.release();  // the micro-batch before: its gradients are in the buffer
            p_.clock.mark(Phase::data, done);
        }
        b = &pf.next();
        const bool last = k == N - 1;
        // The data phase is the wait for the batch alone; readying the gradients counts as compute.
        p_.clock.mark(Phase::forward, done);
        if (k == 0) {
            g.begin_step(done);
            ctl = g.control();
            note_stop(ctl);
            ctl[1] = ctl[3] = 0.0f;
            st.global_n = b->global_n;
            leave_out = ctl[0] > 0.0f;
            if (leave_out) break;
        }
        const ModelBatch in = p_.task.batch(b->x.data(), b->y.data(), b->n);
        const double terms = (double)b->global_n * p_.model.terms_per_sample();
        if (profiled && last) p_.model.set_op_times(&op_times_);
        const double loss = p_.model.forward(p_.params.data(), in, nullptr);
        loss_sum += loss;
        if (p_.faults.slow(rank, done)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (k == 0 && p_.faults.has(rank, done, Fault::Kind::term_in_forward)) raise(SIGTERM);
        if (!std::isfinite(loss)) ctl[1] = NAN;
        // A micro-batch is handed back before the step's sum shows whether it was finite, so its
        // inputs are looked at now (one pass over them; a NaN can leave the loss finite, e.g.
        // through a ReLU, and show only in the gradient). The last one is looked at after the sum.
        if (!last && found.empty()) found = find_nonfinite(*b);
        note_stop(ctl);  // before backward: its first bucket carries the control floats
        leave_out = ctl[0] > 0.0f;
        if (leave_out) break;
        if (k == 0 && p_.faults.has(rank, done, Fault::Kind::nan)) g.poison();
        // The next batch, when the reader has it: a GPU model copies it on its input stream while
        // this backward runs (the CPU models ignore it).
        if (const Batch* nb = pf.peek()) p_.model.stage(p_.task.batch(nb->x.data(), nb->y.data(), nb->n));
        p_.clock.mark(Phase::backward, done);
        p_.model.backward(g.grads(), p_.params.data(), in, (float)(1.0 / terms), last ? g.hook() : nullptr);
        if (!last) p_.model.finish();  // timed as backward (the last one is waited for by backward_done)
        if (last && p_.faults.has(rank, done, Fault::Kind::term_in_backward)) raise(SIGTERM);
    }
    if (leave_out) {
        ctl[1] = 0.0f;
        ctl[3] = 1.0f;
    }
    g.backward_done();
    if (profiled && !leave_out) {
        p_.model.set_op_times(nullptr);  // waits for the GPU's timed ops
        p_.report.op_times(done, op_times_, p_.device.op_timing());
    }
    p_.clock.mark(Phase::allreduce, done);
    iv_.exposed += g.reduce();
    // Every rank sees the same summed gradients and control floats from here on.
    p_.clock.mark(Phase::optimizer, done);
    st.stop_requested = ctl[0] > 0.0f;
    st.preempted = ctl[2] > 0.0f;
    st.abandoned = ctl[3] > 0.0f;
    if (st.abandoned) {
        pf.release();
        return st;
    }
    st.nonfinite_loss = !std::isfinite(ctl[1]);
    last_norm_ = g.norm();
    st.finite = std::isfinite(last_norm_) && !st.nonfinite_loss;
    if (!st.finite) st.bad_input = first_nonfinite(found.empty() ? find_nonfinite(*b) : found);
    pf.release();  // after the look at the batch above: the reader refills its slot from here on
    last_lr_ = p_.sched.at(s);
    st.loss = loss_sum / ((double)st.global_n * p_.model.terms_per_sample());
    if (st.finite) {
        // With --shard-optimizer, the parameters' all-gather after the update: communication the
        // step waits for, counted with the all-reduce's phase as the step line counts it.
        // The update's count from 1, as PyTorch's: a step skipped as non-finite updated nothing,
        // and counting it would correct the moments' bias for an update they never had.
        const double gathered = g.update(last_norm_, last_lr_, ++updates_);
        iv_.exposed += gathered;
        p_.clock.times().move((int)Phase::optimizer - (int)Phase::data, (int)Phase::allreduce - (int)Phase::data,
                              gathered);
    }
    return st;
}

// One step's fault injection on this rank (--inject-fault kill, hang).
void StepLoop::inject_before_step(long done) {
    const int rank = p_.topo.rank;
    if (p_.faults.has(rank, done, Fault::Kind::kill)) raise(SIGKILL);
    if (p_.faults.has(rank, done, Fault::Kind::hang)) {
        p_.clock.mark(Phase::forward, done);
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
}

// Collective: one origin for every rank's trace. After a barrier, the earliest clock reading of the
// ranks on this host: one monotonic clock serves a machine, so its ranks line up exactly (each
// rank's own first event made a rank that started late look early); hosts line up within the
// barrier's exit skew.
double StepLoop::trace_origin() {
    p_.world.barrier();
    const double mine = now_seconds();
    std::vector<double> all((size_t)p_.world.size());
    p_.world.allgather(&mine, sizeof mine, all.data());
    const std::vector<std::string> hosts = p_.world.allgather_text(p_.topo.host);
    double origin = mine;
    for (size_t r = 0; r < all.size(); ++r)
        if (hosts[r] == p_.topo.host) origin = std::min(origin, all[r]);
    return origin;
}

// Collective: the interval's rates, shares and mean loss over the ranks, and its step line.
// int loss: each rank's shares of the steps' global mean losses add up to the global means.
void StepLoop::step_line(Prefetcher& pf, double t, long done, long start, long end) {
    const double dt = t - iv_.t0 - iv_.other;
    double shares[3] = {pf.take_wait_seconds() / dt, iv_.exposed / dt, p_.grads.take_comm_seconds() / dt};
    p_.world.allreduce(shares, 3, ReduceOp::max);
    p_.world.allreduce_sum(&iv_.loss, 1);
    const StepBreakdown bd = gather_breakdown(p_.clock.times().take_interval(), p_.world);
    StepStats st;
    st.step = done;
    st.total = p_.o.steps;
    st.loss = iv_.steps ? iv_.loss / iv_.steps : NAN;
    final_loss_ = st.loss;
    st.grad_norm = last_norm_;
    st.lr = last_lr_;
    st.ms_per_step = 1000.0 * dt / std::max(1L, done - iv_.first);
    st.samples_per_s = iv_.samples / dt;
    st.tokens_per_sample = p_.task.tokens_per_sample();
    st.mfu = p_.peak_gflops > 0 ? st.samples_per_s * p_.model.flops_per_sample() / (p_.peak_gflops * 1e9) : -1;
    st.data_wait_pct = 100.0 * shares[0];
    st.comm_pct = 100.0 * shares[1];
    st.comm_total_pct = 100.0 * shares[2];
    // The time left is to --steps, as the line's share is; a run that --stop-after ends sooner says
    // when it stops too.
    const double per_step = (t - t_run_) / (double)(done - start);
    st.eta_s = per_step * (double)(p_.o.steps - done);
    if (end < p_.o.steps) st.stop_in_s = per_step * (double)(end - done);
    p_.report.step_line(st, bd);
    iv_ = Interval();
    iv_.t0 = now_seconds();
    iv_.first = done;
}

// The first non-finite input value of micro-batch b on this rank, as "rank R: SHARD row K,
// feature J = nan"; "" when all are finite.
std::string StepLoop::find_nonfinite(const Batch& b) {
    const int F = p_.task.train().floats_per_sample();
    long at = -1;
    for (long i = 0; F > 0 && i < (long)b.n * F && at < 0; ++i)
        if (!std::isfinite(b.x[(size_t)i])) at = i;
    if (at < 0) return "";
    const int rank = p_.topo.rank, W = p_.topo.size, N = p_.o.grad_accum;
    std::vector<long> idx((size_t)b.n);
    p_.sampler.slice(b.step, b.micro * W + rank, W * N, idx.data());  // the Prefetcher's part
    return strfmt("rank %d: %s, feature %ld = %g", rank, p_.task.train().where(idx[(size_t)(at / F)]).c_str(), at % F,
                  (double)b.x[(size_t)at]);
}

// After a non-finite step (every rank takes it, together): `mine` (find_nonfinite's) of the lowest
// rank that has one; "" when every rank's inputs were finite (the model or the learning rate made it).
std::string StepLoop::first_nonfinite(const std::string& mine) {
    // max_loc picks the highest value: the lowest rank holding one scores highest.
    const int rank = p_.topo.rank, W = p_.topo.size;
    const auto who = p_.world.max_loc(!mine.empty() ? (double)(W - rank) : 0.0);
    if (who.first <= 0) return "";
    char text[1024] = {};
    if (rank == who.second) std::snprintf(text, sizeof text, "%s", mine.c_str());
    p_.world.broadcast(text, sizeof text, who.second);
    return text;
}

// Rank 0 writes the checkpoint of `done` from the host state (every replica is identical; with the
// optimizer state sharded, every rank brings its shard to the host, and save gathers them). The
// other ranks wait for a synchronous write here, in a phase of its own: waiting in the next step's
// all-reduce instead, they would count it as communication.
void StepLoop::checkpoint(long done, bool final_one) {
    const double t0 = now_seconds();
    last_saved_ = done;
    p_.clock.mark(Phase::checkpoint, done, true);
    if (p_.topo.rank == 0 || p_.o.shard_optimizer) p_.grads.download_state();
    if (p_.topo.rank == 0 && p_.faults.slow(0, done, Fault::Kind::slow_checkpoint))
        std::this_thread::sleep_for(std::chrono::seconds(3));
    // Rank 0 writes; the others (sending their shards of a sharded state) wait for it.
    if (p_.topo.rank != 0) p_.clock.watchdog().waiting(true);
    p_.ckpt.save(p_.world, done, updates_, p_.sampler, p_.params, p_.opt, final_one,
                 p_.faults.has(0, done, Fault::Kind::corrupt_checkpoint));
    if (!p_.o.async_checkpoint) {
        p_.clock.mark(Phase::checkpoint_wait, done);
        p_.world.barrier();
        // From the first one, measured: what a stop signal costs, for the grace before SIGKILL.
        if (!stop_budget_said_ && !final_one) {
            const PhaseSummary run = p_.clock.times().run();  // this rank's mean step so far
            double step_ms = 0;
            for (double ms : run.mean_ms) step_ms += ms;
            p_.report.stop_budget(done, now_seconds() - t0, 1e-3 * step_ms);
            stop_budget_said_ = true;
        }
    }
}

// The end of the run: the whole run's breakdown, the trace, the last checkpoint's write, and the
// closing lines.
int StepLoop::finish(int code, long start, long done, long end) {
    p_.clock.mark(Phase::done, done, true);
    // Every rank took the same path here, so all of them gather.
    StepBreakdown whole = gather_breakdown(p_.clock.times().run(), p_.world);
    whole.checkpoint.background = p_.o.async_checkpoint;
    p_.report.run_breakdown(whole, done, now_seconds() - t_run_);
    // With the step on the GPU (parameters, gradients and state there), the plan's GPU-only rows are
    // not in the host's memory (the host keeps its own parameters and state).
    int on_gpu = p_.device.gpu() >= 0 && std::strcmp(p_.grads.where(), "GPU") == 0 ? 1 : 0;
    p_.world.allreduce(&on_gpu, 1, ReduceOp::min);
    // The peak resident memory of the ranks that used the most and the least (rank 0 also holds
    // the checkpoint's copy), beside the plan's host total for rank 0.
    const double mine = (double)peak_resident_bytes();
    const auto most = p_.world.max_loc(mine), least = p_.world.max_loc(-mine);
    const size_t host_planned = on_gpu ? p_.planned_host_bytes : p_.planned_bytes;
    if (most.first > 0)
        p_.report.print(strfmt("memory: peak resident %.1f MiB on rank %d, the most%s; %.1f MiB on rank %d, the least\n",
                               most.first / 1048576.0, most.second,
                               host_planned ? strfmt(" (planned %.1f MiB%s)", host_planned / 1048576.0,
                                                     on_gpu ? " in the host's memory" : "")
                                                  .c_str()
                                            : "",
                               -least.first / 1048576.0, least.second));
    // What the run allocated on each GPU, the most of them beside the plan's GPU part (cuBLAS's
    // workspace, NCCL's buffers and the input slots are not in the plan).
    if (on_gpu) {
        const size_t now = p_.device.gpu_memory_used();
        const double run = now > p_.gpu_used_at_start ? (double)(now - p_.gpu_used_at_start) : 0.0;
        const auto gpu_most = p_.world.max_loc(run);
        p_.report.print(strfmt("GPU memory: %.1f MiB allocated by the run on rank %d's GPU, the most (planned %.1f MiB "
                               "on the GPU)\n",
                               gpu_most.first / 1048576.0, gpu_most.second, p_.planned_gpu_bytes / 1048576.0));
    }
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
    // From here the other ranks only wait for rank 0 (its last background write, its lines).
    if (p_.topo.rank != 0) p_.clock.watchdog().waiting(true);
    const double secs = now_seconds() - t_run_;
    if (code == kExitNonfinite) return code;
    if (code == kExitPreempted) {
        // Only a preemption notice asks for a requeue; SIGTERM (scancel, a time limit, a deleted
        // pod) ends the job on purpose, and a launcher that requeued it would undo that.
        const char* what = preempted_ ? "preempted: a rank received SIGUSR1 (a preemption notice)"
                                      : "stopped: a rank received SIGTERM (scancel, a time limit or a deleted pod)";
        const char* then = preempted_ ? "requeue the job with --resume auto to continue"
                                      : "stopped with a checkpoint; run again with --resume auto to continue from it";
        p_.report.stopped_by(preempted_ ? "SIGUSR1" : "SIGTERM");
        p_.report.print(strfmt("%s; stopped after step %ld with a checkpoint\ncheckpoint: %s\nexit %d: %s\n", what, done,
                               p_.ckpt.last().c_str(), kExitPreempted, then));
        return code;
    }
    // The last evaluation, with its step where it is not the last step's (--stop-after, a stop).
    std::string tail = evaluated_ ? strfmt(" | val loss %.4f | val accuracy %.2f%%%s", last_eval_.loss,
                                           100.0 * last_eval_.accuracy,
                                           last_eval_.step == done ? "" : strfmt(" (at step %ld)", last_eval_.step).c_str())
                                  : "";
    if (skipped_) tail += strfmt(" | %ld non-finite steps skipped", skipped_);
    if (p_.model.staged_batches() >= 0)
        tail += strfmt(" | %ld of %ld batches copied to the GPU during the step before", p_.model.staged_batches(),
                       end - start);
    // Three significant digits at least: a short run's "in 0.0 s" said nothing.
    p_.report.print(strfmt("done: steps %ld..%ld in %.*f s | train loss %.4f (last interval)%s\n", start + 1, end,
                           secs < 1 ? 3 : secs < 10 ? 2 : 1, secs, final_loss_, tail.c_str()));
    p_.report.print(strfmt("checkpoint: %s\nmetrics: %s\n", p_.ckpt.last().c_str(), p_.o.metrics.c_str()));
    return kExitOk;
}

} // namespace dptrain
