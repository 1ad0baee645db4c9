// Step and eval lines, JSONL metrics.
#include "dptrain/metrics.h"

#include "dptrain/error.h"

#include <sys/stat.h>

#include <cerrno>
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

std::string format_step_line(const StepStats& s) {
    int w = (int)std::to_string(s.total).size();
    std::string rate = s.tokens_per_sample > 0 ? strfmt("%5s tok/s", human(s.samples_per_s * s.tokens_per_sample).c_str())
                                               : strfmt("%5s samples/s", human(s.samples_per_s).c_str());
    std::string mfu = s.mfu >= 0 ? strfmt(" | MFU %4.1f%%", 100.0 * s.mfu) : "";
    return strfmt("step %*ld/%ld | loss %.4f | norm %.3f | lr %.2e | %6.1f ms | %s%s | data %4.1f%% | comm %4.1f%%", w,
                  s.step, s.total, s.loss, s.grad_norm, s.lr, s.ms_per_step, rate.c_str(), mfu.c_str(), s.data_wait_pct,
                  s.comm_pct);
}

std::string format_eval_line(const EvalStats& e) {
    return strfmt("eval at step %ld | val loss %.4f | val accuracy %.2f%% | %ld samples", e.step, e.loss,
                  100.0 * e.accuracy, e.samples);
}

void truncate_jsonl_after(const std::string& path, long step) {
    FILE* in = std::fopen(path.c_str(), "r");
    if (!in) return;
    std::string kept, line;
    char buf[4096];
    while (std::fgets(buf, sizeof buf, in)) {
        line += buf;
        if (line.empty() || line.back() != '\n') continue;
        size_t at = line.find("\"step\":");
        long s = at == std::string::npos ? 0 : std::atol(line.c_str() + at + 7);
        if (s <= step) kept += line;
        line.clear();
    }
    std::fclose(in);
    std::string tmp = path + ".tmp";
    FILE* out = std::fopen(tmp.c_str(), "w");
    if (!out || std::fputs(kept.c_str(), out) < 0 || std::fclose(out) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0)
        throw UserError(strfmt("--metrics %s: cannot rewrite it for the resumed run: %s", path.c_str(), std::strerror(errno)));
}

JsonlWriter::~JsonlWriter() {
    if (f_) std::fclose(f_);
}

void JsonlWriter::open(const std::string& path, bool append) {
    std::string cur;
    for (size_t i = 0; i < path.size(); ++i) {
        if (path[i] == '/' && !cur.empty()) mkdir(cur.c_str(), 0755);
        cur += path[i];
    }
    f_ = std::fopen(path.c_str(), append ? "a" : "w");
    if (!f_) throw UserError(strfmt("--metrics %s: cannot open for writing: %s", path.c_str(), std::strerror(errno)));
}

void JsonlWriter::write(const std::string& json_object) {
    if (!f_) return;
    std::fputs(json_object.c_str(), f_);
    std::fputc('\n', f_);
    std::fflush(f_);
}

std::string JsonlWriter::step_json(const StepStats& s) {
    return strfmt("{\"type\":\"step\",\"step\":%ld,\"total\":%ld,\"loss\":%.6g,\"grad_norm\":%.6g,\"lr\":%.6g,"
                  "\"ms_per_step\":%.4g,\"samples_per_s\":%.6g,\"data_wait_pct\":%.4g,\"comm_exposed_pct\":%.4g,"
                  "\"comm_total_pct\":%.4g,\"tokens_per_s\":%.6g,\"mfu\":%.4g}",
                  s.step, s.total, s.loss, s.grad_norm, s.lr, s.ms_per_step, s.samples_per_s, s.data_wait_pct,
                  s.comm_pct, s.comm_total_pct, s.samples_per_s * s.tokens_per_sample, s.mfu);
}

std::string JsonlWriter::eval_json(const EvalStats& e) {
    return strfmt("{\"type\":\"eval\",\"step\":%ld,\"val_loss\":%.6g,\"val_accuracy\":%.6g,\"samples\":%ld}", e.step,
                  e.loss, e.accuracy, e.samples);
}

} // namespace dptrain
