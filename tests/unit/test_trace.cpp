// A rank's trace (core/trace.h) and their merge (tools/trace_merge.h): the events a full buffer
// leaves out are counted in the file and in the merge, and times are whole nanoseconds.
#include "helpers.h"

#include "dptrain/core/json.h"
#include "dptrain/core/trace.h"
#include "dptrain/tools/trace_merge.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <sstream>

using namespace dptrain;

static std::string text_of(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

TEST_CASE("trace: a full buffer's events are counted, in the file and in the merge", "[trace]") {
    const std::string dir = testing::temp_dir("trace");
    Tracer t;
    t.enable(3);  // three events a track
    t.set_origin(0.0);
    for (long step = 1; step <= 4; ++step) t.mark("forward", step);
    t.close();                       // 4 main-track events: one left out
    for (long step = 1; step <= 5; ++step) t.comm("allreduce", step, 1.0, 1.5, 64, "flat");  // two left out
    CHECK(t.dropped() == 3);
    const std::string one = dir + "/t-rank00000.json", two = dir + "/t-rank00001.json";
    t.write(one, 0, "node-a");
    t.write(two, 1, "node-b");
    long d = -1;
    const Json events = trace_events(one, &d);
    CHECK(d == 3);
    CHECK(events.size() == 3 + 3 + 3);  // three metadata events, three of each track
    CHECK(merge_traces(dir + "/merged.json", {one, two}) == 6);
    // Times in microseconds to the nanosecond, three decimals, never a binary fraction's tail.
    const std::string text = text_of(one);
    CHECK(std::regex_search(text, std::regex("\"ts\":1000000\\.000,\"dur\":500000\\.000")));
    CHECK_FALSE(std::regex_search(text, std::regex("\"(ts|dur)\":[0-9]+\\.[0-9]{4}")));
}
