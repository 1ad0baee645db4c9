// Chrome trace recording and writing. Not for: merging ranks (tools/trace_merge.h).
#include "dptrain/core/trace.h"

#include "dptrain/core/error.h"
#include "dptrain/core/json.h"
#include "dptrain/core/clock.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>

namespace dptrain {

void Tracer::enable(size_t capacity) {
    cap_ = capacity;
    main_.reserve(capacity);
    comm_.reserve(capacity);
    on_ = true;
}

void Tracer::mark(const char* name, long step) {
    if (!on_) return;
    double t = now_seconds();
    if (open_) {
        if (main_.size() < cap_) main_.push_back({open_, nullptr, open_step_, open_t_, t, 0});
        else ++dropped_main_;
    }
    open_ = name;
    open_step_ = step;
    open_t_ = t;
}

size_t Tracer::dropped() const {
    std::lock_guard<std::mutex> g(mu_);
    return dropped_main_ + dropped_comm_;
}

void Tracer::close() {
    if (!on_ || !open_) return;
    double t = now_seconds();
    if (main_.size() < cap_) main_.push_back({open_, nullptr, open_step_, open_t_, t, 0});
    else ++dropped_main_;
    open_ = nullptr;
}

void Tracer::comm(const char* name, long step, double t0, double t1, size_t bytes, const char* algo) {
    if (!on_) return;
    std::lock_guard<std::mutex> g(mu_);
    if (comm_.size() < cap_) comm_.push_back({name, algo, step, t0, t1, bytes});
    else ++dropped_comm_;
}

std::string Tracer::rank_path(const std::string& path, int rank, long first_step) {
    size_t slash = path.rfind('/'), dot = path.rfind('.');
    bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    std::string tag = (first_step > 0 ? strfmt("-from%08ld", first_step) : std::string()) + strfmt("-rank%05d", rank);
    return has_ext ? path.substr(0, dot) + tag + path.substr(dot) : path + tag + ".json";
}

void Tracer::write(const std::string& path, int rank, const std::string& host) const {
    std::lock_guard<std::mutex> g(mu_);
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) throw UserError(strfmt("--trace %s: cannot write it: %s", path.c_str(), std::strerror(errno)));
    // Timestamps in microseconds from the origin the ranks agreed on (set_origin), so that merged
    // ranks line up; without one, from this rank's first event.
    double base = origin_;
    if (base < 0) {
        base = 1e300;
        for (const Event& e : main_) base = std::min(base, e.t0);
        for (const Event& e : comm_) base = std::min(base, e.t0);
        if (base == 1e300) base = 0;
    }
    // Whole nanoseconds as microseconds with three decimals: a double's carry binary fractions.
    auto ns = [base](double t) { return (long long)std::llround((t - base) * 1e9); };
    auto us = [](long long n) {
        const std::lldiv_t d = std::lldiv(n < 0 ? -n : n, 1000);
        return strfmt("%s%lld.%03lld", n < 0 ? "-" : "", d.quot, d.rem);
    };
    auto timed = [&](const Event& e, int tid) {
        const long long t0 = ns(e.t0), t1 = ns(e.t1);
        return strfmt("{\"ph\":\"X\",\"name\":%s,\"pid\":%d,\"tid\":%d,\"ts\":%s,\"dur\":%s,\"args\":{\"step\":%ld",
                      json_text(Json(e.name)).c_str(), rank, tid, us(t0).c_str(), us(t1 - t0).c_str(), e.step);
    };
    Json head = {{"displayTimeUnit", "ms"},
                 {"otherData", {{"rank", rank}, {"host", host}, {"dropped", dropped_main_ + dropped_comm_}}},
                 {"traceEvents", Json::array()}};
    std::string text = json_text(head);
    text.resize(text.size() - 2);  // "]}": the events go in between, one a line
    std::fputs(text.c_str(), f);
    const std::string who = strfmt("rank %d (%s)", rank, host.c_str());
    const Json meta[3] = {
        {{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", who}}}},
        {{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", "step"}}}},
        {{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", 1}, {"args", {{"name", "all-reduce"}}}}};
    for (int i = 0; i < 3; ++i) std::fprintf(f, "%s\n%s", i ? "," : "", json_text(meta[i]).c_str());
    for (const Event& e : main_) std::fprintf(f, ",\n%s}}", timed(e, 0).c_str());
    for (const Event& e : comm_)
        std::fprintf(f, ",\n%s,\"bytes\":%zu,\"algorithm\":%s}}", timed(e, 1).c_str(), e.bytes,
                     json_text(Json(e.algo ? e.algo : "")).c_str());
    std::fprintf(f, "\n]}\n");
    if (std::fclose(f) != 0) throw UserError(strfmt("--trace %s: write failed (disk full?)", path.c_str()));
}

} // namespace dptrain
