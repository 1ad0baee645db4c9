// json_text and json_number: compact output, numbers rounded as the metrics have always been.
#include "dptrain/core/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace dptrain {

std::string json_text(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

Json json_number(double v, int digits) {
    if (!std::isfinite(v)) return nullptr;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    const double r = std::strtod(buf, nullptr);
    if (r == std::floor(r) && std::fabs(r) < 1e15) return (long long)r;
    return r;
}

} // namespace dptrain
