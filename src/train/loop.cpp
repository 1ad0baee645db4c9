// StepLoop: the loop, one step, and what follows a step (its line, evaluation, checkpoint).
// Not for: the run's end (run_end.cpp) or the faults tests inject (faults.cpp).
#include "dptrain/train/loop.h"

#include "dptrain/config/option_checks.h"
#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/io/promotion.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>

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
    long io_fail = -1;  // the 0-based step whose read fails (injected)
    for (long s = start; s < end; ++s)
        if (p_.faults.has(rank, s + 1, Fault::Kind::io_error)) io_fail = s;
    Prefetcher pf(p_.task.readers(o.io_threads), p_.sampler, rank, p_.topo.size, o.batch_size,
                  Prefetcher::slots_for(o.prefetch, o.grad_accum, o.io_threads), start, end, io_fail,
                  o.io == IoMode::collective, p_.faults.slow_read_from(rank), o.grad_accum);
    // On a GPU these are copied every step: page-locked, released before the ring is freed.
    std::vector<std::pair<void*, size_t>> regions = pf.buffers();
    for (auto& r : p_.grads.host_buffers()) regions.push_back(r);
    std::unique_ptr<Pinned> pinned = p_.device.pin(regions);
    if (pinned && !pinned->note.empty()) p_.report.print(strfmt("note: %s\n", pinned->note.c_str()));
    p_.grads.upload_state();
    // A batch being staged to the GPU must arrive before the ring is unpinned and freed: declared
    // after both, so destroyed first, however the loop ends.
    struct Unstage {
        Model& m;
        ~Unstage() { m.unstage(); }
    } unstage{p_.model};
    prepare(start, end);
    return train(pf, start, end);
}

void StepLoop::prepare(long start, long end) {
    const Options& o = p_.o;
    if (!o.trace.empty()) {
        // ~8 events a step, 3 more per extra micro-batch, plus the buckets; capped.
        const size_t per_step = 8 + 3 * (size_t)(o.grad_accum - 1) + p_.grads.traced_per_step();
        p_.clock.tracer().enable(std::min<size_t>(4u << 20, (size_t)(end - start) * per_step + 64));
        p_.grads.set_tracer(&p_.clock.tracer());
        p_.clock.tracer().set_origin(trace_origin());
    }
    if (o.warmup_steps >= o.steps)
        p_.report.print(strfmt("note: --warmup-steps %ld >= --steps %ld: the learning rate only rises, to %.2e at the "
                               "last step (--lr %.2e), and never decays; a warm-up of about a tenth of --steps gives "
                               "the schedule its peak and decay\n",
                               o.warmup_steps, o.steps, p_.sched.at(o.steps - 1), o.lr));
    p_.clock.times().reserve(std::min(o.log_every, end - start));
    if (o.profile_ops > 0 && (o.profile_ops <= start || o.profile_ops > end))
        p_.report.print(strfmt("note: --profile-ops %ld: that step is not in this run (steps %ld..%ld); no op times\n",
                               o.profile_ops, start + 1, end));
    // A stop before the first step writes nothing ("Note [stop mid-step]").
    last_saved_ = p_.ckpt.holds_start() ? start : -1;
    t_run_ = now_seconds();
    iv_ = Interval();
    iv_.t0 = t_run_;
    iv_.first = start;
}

int StepLoop::train(Prefetcher& pf, long start, long end) {
    const Options& o = p_.o;
    long done = start;
    for (long s = start; s < end; ++s) {
        done = s + 1;
        p_.clock.mark(Phase::data, done, true);
        faults_.at(FaultPoint::step_start, done);
        const Step st = step(pf, s);
        if (st.agreed.left_out) return finish(left_out(s, start, st.agreed.preempted), start, s, end);
        if (!st.finite) {
            ++skipped_;
            const bool stopping = o.on_nonfinite == OnNonfinite::stop;
            p_.report.nonfinite(done, st.agreed.nonfinite, last_norm_, stopping, skipped_, st.bad_input);
            if (stopping) return finish(kExitNonfinite, start, done, end);
        } else {
            iv_.loss += st.loss;
            ++iv_.steps;
        }
        account(pf, st, done, start, end);
        const double t_other = now_seconds();  // left out of the step's rate
        // A stop goes to its checkpoint first: an evaluation can outlast the launcher's grace.
        bool usr1 = st.agreed.preempted;
        const bool stop = st.agreed.stop || !evaluate(done, &usr1);
        const bool last = done == end || stop;
        if ((o.checkpoint_every > 0 && done % o.checkpoint_every == 0) || last || !promote_reason_.empty())
            checkpoint(done, last);
        if (!promote_reason_.empty()) promote(done);
        iv_.other += now_seconds() - t_other;
        if (stop) {
            preempted_ = usr1;
            return finish(kExitPreempted, start, done, end);
        }
    }
    return finish(kExitOk, start, done, end);
}

// Optimizer step s (0-based): compute, the sum over the ranks, and the update, unless the ranks
// agreed to leave it out or it was not finite.
StepLoop::Step StepLoop::step(Prefetcher& pf, long s) {
    const long done = s + 1;
    GradientPath& g = p_.grads;
    const bool profiled = done == p_.o.profile_ops && p_.topo.rank == 0;
    const Compute c = compute(pf, done, profiled);
    g.backward_done();
    if (profiled && !c.mine.left_out) {
        p_.model.set_op_times(nullptr);  // waits for the GPU's timed ops
        p_.report.op_times(done, op_times_, p_.device.op_timing());
    }
    p_.clock.mark(Phase::allreduce, done);
    iv_.exposed += g.reduce();
    // Every rank sees the same summed gradients and control from here on.
    p_.clock.mark(Phase::optimizer, done);
    Step st;
    st.agreed = g.agreed_control();
    st.global_n = c.global_n;
    if (st.agreed.left_out) {
        pf.release();
        return st;
    }
    last_norm_ = g.norm();
    st.finite = std::isfinite(last_norm_) && !st.agreed.nonfinite;
    if (!st.finite) st.bad_input = first_nonfinite(c.found.empty() ? find_nonfinite(*c.last) : c.found);
    pf.release();  // after the look above: the reader may refill the slot
    last_lr_ = p_.sched.at(s);
    st.loss = c.loss_sum / ((double)st.global_n * p_.model.terms_per_sample());
    if (st.finite) apply();
    return st;
}

bool StepLoop::note_stop(StepControl& mine) {
    mine.stop = preemption_requested() || !p_.report.metrics_halt().empty();  // --metrics-required
    mine.preempted = preemption_signal() == SIGUSR1;
    p_.grads.set_control(mine);
    return mine.stop;
}

// Each --grad-accum micro-batch into one buffer (only the last backward starts buckets). A stop
// before backward leaves the rest out; the sum still runs: docs/NOTES.md, "Note [stop mid-step]".
StepLoop::Compute StepLoop::compute(Prefetcher& pf, long done, bool profiled) {
    const int N = p_.o.grad_accum;
    GradientPath& g = p_.grads;
    Compute c;
    for (int k = 0; k < N; ++k) {
        if (k > 0) {
            pf.release();  // its gradients are in the buffer
            p_.clock.mark(Phase::data, done);
        }
        c.last = &pf.next();
        const bool last = k == N - 1;
        // The data phase is the wait for the batch alone; readying the gradients counts as compute.
        p_.clock.mark(Phase::forward, done);
        if (k == 0) {
            g.begin_step(done);
            c.global_n = c.last->global_n;
            if ((c.mine.left_out = note_stop(c.mine))) break;
        }
        const ModelBatch in = p_.task.batch(c.last->x.data(), c.last->y.data(), c.last->n);
        const double terms = (double)c.last->global_n * p_.model.terms_per_sample();
        if (profiled && last) p_.model.set_op_times(&op_times_);
        const double loss = p_.model.forward(p_.params.data(), in, nullptr);
        c.loss_sum += loss;
        faults_.at(FaultPoint::forward_done, done, k, N);
        c.mine.nonfinite = c.mine.nonfinite || !std::isfinite(loss);
        // Handed back before the sum shows finiteness, so its inputs are checked now (a NaN can
        // leave the loss finite, e.g. through a ReLU). The last one is checked after the sum.
        if (!last && c.found.empty()) c.found = find_nonfinite(*c.last);
        if ((c.mine.left_out = note_stop(c.mine))) break;  // before backward: its first bucket carries it
        faults_.at(FaultPoint::backward_start, done, k, N);
        // A GPU model copies the next batch while this backward runs.
        if (const Batch* nb = pf.peek()) p_.model.stage(p_.task.batch(nb->x.data(), nb->y.data(), nb->n));
        p_.clock.mark(Phase::backward, done);
        p_.model.backward(g.grads(), p_.params.data(), in, (float)(1.0 / terms), last ? g.hook() : nullptr);
        if (!last) p_.model.finish();  // timed as backward
        faults_.at(FaultPoint::backward_done, done, k, N);
    }
    if (c.mine.left_out) {
        c.mine.nonfinite = false;
        g.set_control(c.mine);
    }
    return c;
}

// Updates are counted from 1, as PyTorch's, skipping non-finite steps: counting those would
// bias-correct the moments for updates they never had.
void StepLoop::apply() {
    const double gathered = p_.grads.update(last_norm_, last_lr_, ++updates_);
    // --shard-optimizer's all-gather: communication the step waits for, counted as all-reduce.
    iv_.exposed += gathered;
    p_.clock.times().move((int)Phase::optimizer - (int)Phase::data, (int)Phase::allreduce - (int)Phase::data,
                          gathered);
}

// Step s + 1 (s is 0-based) was left out, nothing applied: the checkpoint is of step s
// ("Note [stop mid-step]"). Returns the exit code.
int StepLoop::left_out(long s, long start, bool preempted) {
    p_.clock.drop_step();  // the breakdown counts only steps done
    preempted_ = preempted;
    const bool written = last_saved_ == s && p_.ckpt.dir_kept(p_.world);
    p_.report.print(strfmt("stop: step %ld left out (the stop came before its backward); checkpoint of step %ld%s\n",
                           s + 1, s,
                           !written ? "" : s == start ? " (the one this run resumed from)" : " (written just before)"));
    if (!written) checkpoint(s, true);
    return kExitPreempted;
}

// The step line when due, else the progress line on a terminal; the first step is warm-up.
void StepLoop::account(Prefetcher& pf, const Step& st, long done, long start, long end) {
    iv_.samples += st.global_n;
    const double t_end = p_.clock.end_step();
    const bool line = done % p_.o.log_every == 0 || done == end || st.agreed.stop;
    if (line) step_line(pf, t_end, done, start, end);
    if (done == start + 1 && !line) {
        // Warm-up is left out of the first line's rates and the run's breakdown; its loss counts.
        pf.take_wait_seconds();
        p_.grads.take_comm_seconds();
        iv_.t0 = t_end;
        iv_.first = done;
        iv_.samples = 0;
        iv_.exposed = iv_.other = 0;
    }
    if (done == start + 1 && done < end) p_.clock.times().forget_warmup();
    if (!line && done > start + 1) {
        const double per_step = (t_end - iv_.t0 - iv_.other) / (double)(done - iv_.first);
        p_.report.progress(done, t_end, per_step, (t_end - t_run_) / (double)(done - start) * (double)(p_.o.steps - done));
    }
}

// False when a stop signal cut the evaluation short (*usr1: whether it was a preemption notice).
bool StepLoop::evaluate(long done, bool* usr1) {
    const Options& o = p_.o;
    if (!((o.eval_every > 0 && done % o.eval_every == 0) || done == o.steps)) return true;
    p_.clock.mark(Phase::eval, done, true);
    if (p_.eval.has_task()) p_.grads.download_params();  // the items are decoded from the host copy
    if (std::optional<EvalStats> e = p_.eval.run(done, p_.params.data())) {
        last_eval_ = *e;
        evaluated_ = true;
        p_.report.eval_line(last_eval_);
        promote_reason_.clear();
        if (!o.promote_if.empty()) {
            std::string why;
            bool all = true;
            for (const PromoteCondition& c : parse_promote_if(o.promote_if)) {
                const double v = c.metric == "val_loss"          ? e->loss
                                 : c.metric == "val_accuracy"    ? e->accuracy
                                 : c.metric == "val_bits_per_byte" ? e->bits_per_byte
                                 : c.metric == "acc"             ? e->acc
                                 : c.metric == "acc_norm"        ? e->acc_norm
                                                                 : e->acc_tokens;
                all = all && v >= 0 && c.holds(v);  // -1: no text (bits per byte), no --eval-task
                why += strfmt("%s%s %.6g %s %s", why.empty() ? "" : ", ", c.metric.c_str(), v, c.op.c_str(),
                              c.value_text.c_str());
            }
            if (all) promote_reason_ = "--promote-if: " + why;
        }
        return true;
    }
    *usr1 = p_.eval.stop_signal() == SIGUSR1;
    p_.report.print(strfmt("stop: the evaluation at step %ld cut short by %s; checkpoint of step %ld\n", done,
                           *usr1 ? "SIGUSR1" : "SIGTERM", done));
    return false;
}

// Collective: one trace origin for every rank, the earliest reading on this host after a barrier:
// one monotonic clock per machine lines its ranks up exactly; hosts within the barrier's exit skew.
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

// Collective: the interval's step line. Each rank's shares of the global mean losses add up.
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
    st.world_size = p_.world.size();
    st.mfu = p_.peak_gflops > 0 ? st.samples_per_s * p_.model.flops_per_sample() / (p_.peak_gflops * 1e9) : -1;
    st.data_wait_pct = 100.0 * shares[0];
    st.comm_pct = 100.0 * shares[1];
    st.comm_total_pct = 100.0 * shares[2];
    // ETA is to --steps, as the line's share is; --stop-after also says when it stops.
    const double per_step = (t - t_run_) / (double)(done - start);
    st.eta_s = per_step * (double)(p_.o.steps - done);
    if (end < p_.o.steps) st.stop_in_s = per_step * (double)(end - done);
    p_.report.step_line(st, bd);
    iv_ = Interval();
    iv_.t0 = now_seconds();
    iv_.first = done;
}

// "rank R: SHARD row K, feature J = nan" for the first non-finite input of b; "" when all finite.
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

// After a non-finite step, on every rank: the lowest rank's finding; "" when every input was finite
// (the model or the learning rate made it).
std::string StepLoop::first_nonfinite(const std::string& mine) {
    // max_loc takes the highest: the lowest rank holding one scores highest.
    const int rank = p_.topo.rank, W = p_.topo.size;
    const auto who = p_.world.max_loc(!mine.empty() ? (double)(W - rank) : 0.0);
    if (who.first <= 0) return "";
    char text[1024] = {};
    if (rank == who.second) std::snprintf(text, sizeof text, "%s", mine.c_str());
    p_.world.broadcast(text, sizeof text, who.second);
    return text;
}

// Rank 0 writes from the host state (replicas are identical; sharded optimizer state is gathered).
// Other ranks wait in a phase of their own: in the next all-reduce it would count as communication.
// --keep-promoted N: the promotions in force past the newest N are withdrawn, oldest first.
void StepLoop::withdraw_oldest() {
    if (p_.o.keep_promoted <= 0) return;
    std::vector<Promotion> active = read_promotions(p_.o.checkpoint_dir);
    for (size_t i = 0; i + (size_t)p_.o.keep_promoted < active.size(); ++i) {
        Promotion old = active[i];
        old.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        old.reason = strfmt("--keep-promoted %d: newer ones are in force", p_.o.keep_promoted);
        old.by = "dptrain --keep-promoted";
        append_promotion(p_.o.checkpoint_dir, "withdraw", old);
    }
}

// --promote-if held: rank 0 promotes this step's checkpoint once it is whole on disk.
void StepLoop::promote(long done) {
    p_.ckpt.wait();
    if (p_.topo.rank == 0) {
        Promotion pr;
        pr.step = done;
        pr.file = p_.ckpt.last().substr(p_.ckpt.last().rfind('/') + 1);
        pr.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        pr.reason = promote_reason_;
        pr.by = "dptrain --promote-if";
        try {
            append_promotion(p_.o.checkpoint_dir, "promote", pr);
            p_.report.print(strfmt("promoted step %ld (%s)\n", done, promote_reason_.c_str()));
            withdraw_oldest();
        } catch (const UserError& e) {
            std::fprintf(stderr, "dptrain: warning: %s; step %ld not promoted\n", e.what(), done);
        }
    }
    promote_reason_.clear();
}

void StepLoop::checkpoint(long done, bool final_one) {
    const double t0 = now_seconds();
    last_saved_ = done;
    p_.clock.mark(Phase::checkpoint, done, true);
    if (p_.topo.rank == 0 || p_.o.shard_optimizer) p_.grads.download_state();
    faults_.at(FaultPoint::checkpoint_start, done);
    if (p_.topo.rank != 0) p_.clock.watchdog().waiting(true);
    p_.ckpt.save(p_.world, done, updates_, p_.sampler, p_.params, p_.opt, final_one,
                 faults_.corrupts_checkpoint(done));
    if (p_.o.async_checkpoint) return;
    p_.clock.mark(Phase::checkpoint_wait, done);
    p_.world.barrier();
    // Measured once: what a stop costs, for the grace before SIGKILL.
    if (!stop_budget_said_ && !final_one) {
        const PhaseSummary run = p_.clock.times().run();  // this rank's mean step so far
        double step_ms = 0;
        for (double ms : run.mean_ms) step_ms += ms;
        p_.report.stop_budget(done, now_seconds() - t0, 1e-3 * step_ms);
        stop_budget_said_ = true;
    }
}

} // namespace dptrain
