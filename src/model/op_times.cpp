// OpTimes: the per-kind sums of --profile-ops and their table.
#include "dptrain/model/op_times.h"

#include "dptrain/core/error.h"

#include <algorithm>
#include <vector>

namespace dptrain {

const char* op_kind_name(OpKind k) {
    switch (k) {
    case OpKind::matmul: return "matmul";  // with its bf16 rounding under --precision bf16
    case OpKind::attention: return "attention";
    case OpKind::layernorm: return "layernorm";
    case OpKind::activation: return "activation";
    case OpKind::crossentropy: return "crossentropy";
    case OpKind::encoder: return "encoder";
    case OpKind::copy: return "copy";
    case OpKind::other: return "other";
    case OpKind::count: break;
    }
    return "?";
}

double OpTimes::total() const {
    double t = 0;
    for (double s : seconds_) t += s;
    return t;
}

std::string OpTimes::table() const {
    std::vector<int> kinds;
    for (int k = 0; k < (int)OpKind::count; ++k)
        if (calls_[k] > 0) kinds.push_back(k);
    std::stable_sort(kinds.begin(), kinds.end(), [&](int a, int b) { return seconds_[a] > seconds_[b]; });
    const double all = total();
    std::string out;
    for (int k : kinds)
        out += strfmt("  %-13s %10.3f ms %6.1f%% %6ld call%s\n", op_kind_name((OpKind)k), 1e3 * seconds_[k],
                      all > 0 ? 100.0 * seconds_[k] / all : 0.0, calls_[k], calls_[k] == 1 ? "" : "s");
    out += strfmt("  %-13s %10.3f ms\n", "total", 1e3 * all);
    return out;
}

} // namespace dptrain
