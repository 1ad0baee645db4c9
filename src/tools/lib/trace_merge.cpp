// trace_events and merge_traces: parse each rank's trace with the strict JSON reader, concatenate
// the events, write one document.
#include "dptrain/tools/trace_merge.h"

#include "dptrain/core/error.h"
#include "dptrain/tools/json.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace dptrain {

Json trace_events(const std::string& path, long* dropped) {
    std::ifstream in(path);
    if (!in) throw UserError(strfmt("%s: cannot open it", path.c_str()));
    std::stringstream ss;
    ss << in.rdbuf();
    Json doc;
    try {
        doc = parse_json(ss.str());
    } catch (const JsonError& e) {
        throw UserError(strfmt("%s: %s (a trace cut short? its rank may have stopped while writing it)", path.c_str(),
                               e.what()));
    }
    const Json* events = json_member(doc, "traceEvents");
    if (!events || !events->is_array())
        throw UserError(strfmt("%s: not a dptrain trace (no traceEvents array)", path.c_str()));
    if (dropped) {
        const Json* other = json_member(doc, "otherData");
        const Json* n = other && other->is_object() ? json_member(*other, "dropped") : nullptr;
        *dropped = n && n->is_number_integer() && n->get<long>() > 0 ? n->get<long>() : 0;
    }
    return *events;
}

long merge_traces(const std::string& out, const std::vector<std::string>& inputs) {
    Json merged = {{"displayTimeUnit", "ms"}, {"traceEvents", Json::array()}};
    Json& all = merged["traceEvents"];
    long dropped = 0;
    for (const std::string& path : inputs) {
        long d = 0;
        for (Json& e : trace_events(path, &d)) all.push_back(std::move(e));
        dropped += d;
    }
    merged["otherData"] = {{"dropped", dropped}};
    FILE* f = std::fopen(out.c_str(), "w");
    if (!f) throw UserError(strfmt("%s: cannot write it", out.c_str()));
    const std::string text = json_text(merged) + "\n";
    const bool written = std::fputs(text.c_str(), f) >= 0;
    if (std::fclose(f) != 0 || !written) throw UserError(strfmt("%s: write failed", out.c_str()));
    return dropped;
}

} // namespace dptrain
