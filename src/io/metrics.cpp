// Step and eval lines, JSONL metrics.
// Not for: deciding what is measured (the trainer).
#include "dptrain/io/metrics.h"

#include "dptrain/core/error.h"
#include "dptrain/core/files.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace dptrain {

std::string human(double v) {
    const char* units[] = {"", "k", "M", "G", "T"};
    int u = 0;
    while (v >= 999.5 && u < 4) {
        v /= 1000.0;
        ++u;
    }
    return strfmt(v >= 99.95 ? "%.0f%s" : v >= 9.995 ? "%.1f%s" : "%.2f%s", v, units[u]);
}

const char* const kStepPhaseNames[kStepPhases] = {"data", "forward", "backward", "allreduce", "optimizer"};

void PhaseTimes::reserve(long interval_steps) {
    for (int p = 0; p < kStepPhases; ++p) {
        ring_[p].assign((size_t)std::max(1L, interval_steps), 0.0);
        hist_[p].assign(kBins, 0);
    }
    scratch_.assign(ring_[0].size(), 0.0);
}

int PhaseTimes::bin_of(double seconds) {
    if (!(seconds > 1e-6)) return 0;
    int b = (int)(20.0 * std::log10(seconds * 1e6));
    return std::min(b, kBins - 1);
}

double PhaseTimes::bin_mid(int bin) { return 1e-6 * std::pow(10.0, (bin + 0.5) / 20.0); }

void PhaseTimes::end_step() {
    // The ring holds the interval; a longer interval than reserved keeps its latest steps.
    size_t slot = (size_t)(n_ % (long)ring_[0].size());
    for (int p = 0; p < kStepPhases; ++p) {
        ring_[p][slot] = cur_[p];
        run_sum_[p] += cur_[p];
        ++hist_[p][bin_of(cur_[p])];
        cur_[p] = 0;
    }
    ++n_;
    ++run_steps_;
}

PhaseSummary PhaseTimes::take_interval() {
    PhaseSummary s;
    long n = std::min<long>(n_, (long)ring_[0].size());
    s.steps = n_;
    for (int p = 0; p < kStepPhases && n > 0; ++p) {
        double sum = 0;
        for (long i = 0; i < n; ++i) sum += scratch_[i] = ring_[p][i];
        // p90 by the nearest-rank rule.
        long k = std::max(0L, (long)std::ceil(0.9 * n) - 1);
        std::nth_element(scratch_.begin(), scratch_.begin() + k, scratch_.begin() + n);
        s.mean_ms[p] = 1e3 * sum / n;
        s.p90_ms[p] = 1e3 * scratch_[k];
    }
    n_ = 0;
    return s;
}

void PhaseTimes::forget_warmup() {
    left_out_ += run_steps_;
    n_ = 0;
    run_steps_ = 0;
    for (int p = 0; p < kStepPhases; ++p) {
        run_sum_[p] = 0;
        std::fill(hist_[p].begin(), hist_[p].end(), 0L);
    }
}

PhaseSummary PhaseTimes::run() const {
    PhaseSummary s;
    s.steps = run_steps_;
    s.left_out = left_out_;
    s.checkpoints = checkpoints_;
    s.checkpoint_ms = 1e3 * ckpt_s_;
    s.checkpoint_wait_ms = 1e3 * ckpt_wait_s_;
    if (run_steps_ == 0) return s;
    long k = std::max(1L, (long)std::ceil(0.9 * run_steps_));
    for (int p = 0; p < kStepPhases; ++p) {
        s.mean_ms[p] = 1e3 * run_sum_[p] / run_steps_;
        long seen = 0;
        for (int b = 0; b < kBins; ++b) {
            seen += hist_[p][b];
            if (seen >= k) {
                s.p90_ms[p] = 1e3 * bin_mid(b);
                break;
            }
        }
    }
    return s;
}

StepBreakdown gather_breakdown(const PhaseSummary& mine, MpiCommunicator& comm) {
    const int rank = comm.rank(), size = comm.size();
    constexpr int kEach = 2 * kStepPhases + 2;  // means, p90s, checkpoint write and wait
    double local[kEach];
    for (int p = 0; p < kStepPhases; ++p) {
        local[p] = mine.mean_ms[p];
        local[kStepPhases + p] = mine.p90_ms[p];
    }
    local[2 * kStepPhases] = mine.checkpoint_ms;
    local[2 * kStepPhases + 1] = mine.checkpoint_wait_ms;
    std::vector<double> all(rank == 0 ? (size_t)size * kEach : 0);
    comm.gather(local, sizeof local, all.data(), 0);
    StepBreakdown b;
    b.steps = mine.steps;
    b.left_out = mine.left_out;
    if (rank != 0) return b;
    b.rank_mean_ms.resize((size_t)size * kStepPhases);
    CheckpointAcross& c = b.checkpoint;
    c.count = mine.checkpoints;
    c.write_ms = all[2 * kStepPhases];
    for (int r = 1; r < size; ++r) {
        const double wait = all[(size_t)r * kEach + 2 * kStepPhases + 1];
        c.wait_ms += wait / (size - 1);
        if (r == 1 || wait > c.wait_max_ms) {
            c.wait_max_ms = wait;
            c.longest_waiter = r;
        }
    }
    for (int r = 0; r < size; ++r) {
        const double* v = &all[(size_t)r * kEach];
        for (int p = 0; p < kStepPhases; ++p) {
            PhaseAcross& a = b.phase[p];
            b.rank_mean_ms[(size_t)r * kStepPhases + p] = v[p];
            a.mean_ms += v[p] / size;
            a.p90_ms = std::max(a.p90_ms, v[kStepPhases + p]);
            if (r == 0 || v[p] > a.max_ms) {
                a.max_ms = v[p];
                a.slowest_rank = r;
            }
        }
    }
    return b;
}

Json breakdown_json(const StepBreakdown& b) {
    Json out = Json::object();
    for (int p = 0; p < kStepPhases; ++p) {
        const PhaseAcross& a = b.phase[p];
        out[kStepPhaseNames[p]] = Json{{"mean_ms", json_number(a.mean_ms, 4)},
                                       {"p90_ms", json_number(a.p90_ms, 4)},
                                       {"max_ms", json_number(a.max_ms, 4)},
                                       {"slowest_rank", a.slowest_rank}};
    }
    return out;
}

Json checkpoints_json(const CheckpointAcross& c) {
    return Json{{"count", c.count},
                {"write_ms", json_number(c.write_ms, 4)},
                {"wait_ms", json_number(c.wait_ms, 4)},
                {"wait_max_ms", json_number(c.wait_max_ms, 4)},
                {"longest_waiter", c.longest_waiter}};
}

// Spread over the steps, beside the step's time; the wait is the other ranks' while rank 0 writes.
static std::string format_checkpoint_rows(const CheckpointAcross& c, long steps, double step_ms, size_t ranks) {
    if (c.count <= 0 || steps <= 0) return "";
    auto share = [&](double total_ms) {
        const double pct = step_ms > 0 ? 100.0 * total_ms / steps / step_ms : 0.0;
        return strfmt(pct < 999.95 ? "%+5.1f%%" : "%+5.0f%%", pct);
    };
    std::string s = strfmt("  %-9s %9.3f ms %s | %ld %s by rank 0, %.3f s each%s\n", "ckpt", c.write_ms / steps,
                           share(c.write_ms).c_str(), c.count, c.background ? "copied" : "written",
                           1e-3 * c.write_ms / c.count,
                           c.background ? " (the steps' stall; a background thread writes the copies)" : "");
    if (ranks > 1 && !c.background)
        s += strfmt("  %-9s %9.3f ms %s | the other ranks waiting for the write (not communication); longest: "
                    "rank %d, %.3f s in all\n",
                    "ckpt-wait", c.wait_ms / steps, share(c.wait_ms).c_str(), c.longest_waiter, 1e-3 * c.wait_max_ms);
    return s;
}

std::string format_breakdown(const StepBreakdown& b, const std::vector<std::string>& hosts) {
    double step = 0;
    for (int p = 0; p < kStepPhases; ++p) step += b.phase[p].mean_ms;
    std::string s = strfmt("step breakdown over %ld steps%s (ms per step; mean over ranks, worst rank's p90, slowest "
                           "rank):\n",
                           b.steps, b.left_out > 0 ? " (the first, a warm-up, left out)" : "");
    for (int p = 0; p < kStepPhases; ++p) {
        const PhaseAcross& a = b.phase[p];
        std::string host = a.slowest_rank < (int)hosts.size() ? " on " + hosts[a.slowest_rank] : "";
        std::string slowest = b.rank_mean_ms.size() > kStepPhases
                                  ? strfmt(" | slowest rank %d%s: %.3f ms (%+.0f%%)", a.slowest_rank, host.c_str(), a.max_ms,
                                           a.mean_ms > 0 ? 100.0 * (a.max_ms / a.mean_ms - 1.0) : 0.0)
                                  : "";
        s += strfmt("  %-9s %9.3f ms %5.1f%% | p90 %9.3f ms%s\n", kStepPhaseNames[p], a.mean_ms,
                    step > 0 ? 100.0 * a.mean_ms / step : 0.0, a.p90_ms, slowest.c_str());
    }
    return s + format_checkpoint_rows(b.checkpoint, b.steps, step, b.rank_mean_ms.size() / kStepPhases);
}

BottleneckRule::Verdict BottleneckRule::observe(double data_wait_pct, double comm_pct, int ranks) {
    const bool data_high = data_wait_pct > kDataPct, comm_high = ranks > 1 && comm_pct > kCommPct;
    Verdict v;
    v.data = data_high && data_before_ && !data_warned_;
    v.comm = comm_high && comm_before_ && !comm_warned_;
    data_before_ = data_high, comm_before_ = comm_high;
    data_warned_ |= v.data, comm_warned_ |= v.comm;
    return v;
}

std::string human_duration(double t) {
    if (!(t >= 0) || t > 1e8) return "?";
    long s = std::lround(t);
    if (s >= 3600) return strfmt("%ldh%02ldm", s / 3600, s % 3600 / 60);
    if (s >= 60) return strfmt("%ldm%02lds", s / 60, s % 60);
    return strfmt("%lds", s);
}

std::string format_step_line(const StepStats& s) {
    int w = (int)std::to_string(s.total).size();
    std::string rate = s.tokens_per_sample > 0 ? strfmt("%5s tok/s", human(s.samples_per_s * s.tokens_per_sample).c_str())
                                               : strfmt("%5s samples/s", human(s.samples_per_s).c_str());
    std::string mfu = s.mfu >= 0 ? strfmt(" | MFU %4.1f%%", 100.0 * s.mfu) : "";
    std::string eta = s.eta_s >= 0 ? " | ETA " + human_duration(s.eta_s) : "";
    if (s.stop_in_s >= 0) eta += " (this run stops in " + human_duration(s.stop_in_s) + ": --stop-after)";
    return strfmt("step %*ld/%ld %3.0f%% | loss %.4f | norm %.3f | lr %.2e | %6.1f ms | %s%s | data %4.1f%% | comm %4.1f%%%s",
                  w, s.step, s.total, s.total > 0 ? std::floor(100.0 * s.step / s.total) : 0.0, s.loss, s.grad_norm,
                  s.lr, s.ms_per_step, rate.c_str(), mfu.c_str(), s.data_wait_pct, s.comm_pct, eta.c_str());
}

std::string format_eval_line(const EvalStats& e) {
    std::string line = strfmt("eval at step %ld | val loss %.4f | val accuracy %.2f%% | %ld samples", e.step, e.loss,
                              100.0 * e.accuracy, e.samples);
    if (e.bits_per_byte >= 0) line += strfmt(" | %.4f bits per byte", e.bits_per_byte);
    if (e.acc >= 0)
        line += strfmt(" | task: %ld items, acc %.4f, acc_norm %.4f, acc_tokens %.4f", e.task_items, e.acc, e.acc_norm,
                       e.acc_tokens);
    return line;
}

void truncate_jsonl_after(const std::string& path, long step) {
    FILE* in = std::fopen(path.c_str(), "r");
    if (!in) return;
    std::string kept, line;
    char buf[4096];
    while (std::fgets(buf, sizeof buf, in)) {
        line += buf;
        if (line.empty() || line.back() != '\n') continue;
        // A line cut short does not parse, and is dropped.
        const Json rec = Json::parse(line, nullptr, /*allow_exceptions=*/false);
        const Json* at = rec.is_object() && rec.contains("step") ? &rec["step"] : nullptr;
        if (!rec.is_discarded() && (!at || !at->is_number() || at->get<double>() <= (double)step)) kept += line;
        line.clear();
    }
    std::fclose(in);
    std::string tmp = path + ".tmp";
    FILE* out = std::fopen(tmp.c_str(), "w");
    if (!out || std::fputs(kept.c_str(), out) < 0 || std::fclose(out) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0)
        throw UserError(strfmt("--metrics %s: cannot rewrite it for the resumed run: %s", path.c_str(), std::strerror(errno)));
}

Record::Record(const char* type) { j_["type"] = type; }

Record& Record::metric(const char* name, double v, const char* unit) {
    j_[name] = json_number(v);
    if (std::isfinite(v)) metrics_.emplace_back(name, unit);
    return *this;
}

Record& Record::value(const char* name, double v) {
    j_[name] = json_number(v);
    return *this;
}

Record& Record::integer(const char* name, long v) {
    j_[name] = v;
    return *this;
}

Record& Record::text(const char* name, const std::string& v) {
    j_[name] = v;
    return *this;
}

Record& Record::object(const char* name, const Json& v) {
    j_[name] = v;
    return *this;
}

std::string Record::json() const { return json_text(j_); }

static void members_with_time(const Json& j, long long epoch_ms, Json& out) {
    for (auto it = j.begin(); it != j.end(); ++it) {
        out[it.key()] = it.value();
        if (it == j.begin()) out["time"] = (double)epoch_ms / 1000.0;
    }
}

std::string Record::json(long long epoch_ms) const {
    Json out = Json::object();
    members_with_time(j_, epoch_ms, out);
    return json_text(out);
}

std::string Record::emf(const std::string& ns, const std::vector<std::pair<std::string, std::string>>& dims,
                        long long timestamp_ms) const {
    Json names = Json::array(), defs = Json::array();
    for (const auto& d : dims) names.push_back(d.first);
    for (const auto& m : metrics_) defs.push_back(Json{{"Name", m.first}, {"Unit", m.second}});
    Json out = Json::object();
    out["_aws"] = Json{{"Timestamp", timestamp_ms},
                       {"CloudWatchMetrics",
                        Json::array({Json{{"Namespace", ns}, {"Dimensions", Json::array({names})}, {"Metrics", defs}}})}};
    for (const auto& d : dims) out[d.first] = d.second;
    members_with_time(j_, timestamp_ms, out);
    return json_text(out);
}

Record step_record(const StepStats& s) {
    Record r("step");
    r.integer("step", s.step).integer("total", s.total);
    r.metric("world_size", s.world_size, "Count");
    r.metric("loss", s.loss).metric("grad_norm", s.grad_norm).metric("lr", s.lr);
    r.metric("ms_per_step", s.ms_per_step, "Milliseconds").metric("samples_per_s", s.samples_per_s, "Count/Second");
    r.metric("data_wait_pct", s.data_wait_pct, "Percent").metric("comm_exposed_pct", s.comm_pct, "Percent");
    r.metric("comm_total_pct", s.comm_total_pct, "Percent");
    // The MLP's 0 stays in the file but is no CloudWatch metric.
    if (s.tokens_per_sample > 0) r.metric("tokens_per_s", s.samples_per_s * s.tokens_per_sample, "Count/Second");
    else r.value("tokens_per_s", 0);
    // Unknown: -1 in the file, as before, but not declared.
    if (s.mfu >= 0) r.metric("mfu", s.mfu);
    else r.value("mfu", -1);
    r.value("progress_pct", s.total > 0 ? 100.0 * s.step / s.total : 0);
    if (s.eta_s >= 0) r.value("eta_s", s.eta_s);
    if (s.stop_in_s >= 0) r.value("stop_in_s", s.stop_in_s);
    return r;
}

Record eval_record(const EvalStats& e) {
    Record r("eval");
    r.integer("step", e.step).metric("val_loss", e.loss).metric("val_accuracy", e.accuracy);
    if (e.bits_per_byte >= 0) r.metric("val_bits_per_byte", e.bits_per_byte);
    if (e.acc >= 0)
        r.metric("acc", e.acc).metric("acc_norm", e.acc_norm).metric("acc_tokens", e.acc_tokens).integer("task_items",
                                                                                                      e.task_items);
    r.integer("samples", e.samples);
    return r;
}

JsonlWriter::~JsonlWriter() {
    if (f_) std::fclose(f_);
}

void JsonlWriter::open(const std::string& path, bool append, bool emf, const std::string& ns, const std::string& job) {
    const size_t slash = path.rfind('/');
    if (slash != std::string::npos && slash > 0) make_directories(path.substr(0, slash), "--metrics");
    f_ = std::fopen(path.c_str(), append ? "a" : "w");
    path_ = path;
    if (!f_) throw UserError(strfmt("--metrics %s: cannot open for writing: %s", path.c_str(), std::strerror(errno)));
    emf_ = emf;
    ns_ = ns;
    job_ = job;
}

static long long epoch_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

void JsonlWriter::write(const Record& r) {
    const long long ms = epoch_ms();
    if (f_) put(emf_ ? r.emf(ns_, {{"job", job_}}, ms) : r.json(ms));
}

void JsonlWriter::write_rank(const Record& r, int rank, const std::string& node) {
    const long long ms = epoch_ms();
    if (f_) put(emf_ ? r.emf(ns_, {{"job", job_}, {"rank", std::to_string(rank)}, {"node", node}}, ms) : r.json(ms));
}

// A failed write (a full disk, a quota, a lost mount) is said once, with the file and the reason,
// and the run goes on without its metrics; the cut last line is what every reader leaves out.
void JsonlWriter::put(const std::string& line) {
    errno = 0;
    const bool ok = std::fputs(line.c_str(), f_) >= 0 && std::fputc('\n', f_) != EOF && std::fflush(f_) == 0;
    if (ok) return;
    const int err = errno;
    std::fclose(f_);
    f_ = nullptr;
    failure_ = err ? std::strerror(err) : "unknown error";
    if (required_) return;  // the run stops at its next step, with a checkpoint, and says so
    std::fprintf(stderr, "dptrain: warning: --metrics %s: a write failed (%s); the run goes on without its metrics "
                         "from here (the file ends at the last complete record; --metrics-required stops instead)\n",
                 path_.c_str(), failure_.c_str());
    std::fflush(stderr);
}

} // namespace dptrain
