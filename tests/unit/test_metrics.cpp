// The step breakdown's statistics, the metrics records (JSON lines and EMF) and the progress text.
#include "dptrain/io/metrics.h"
#include "dptrain/io/tensorboard.h"
#include "helpers.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include <stdlib.h>

using namespace dptrain;

TEST_CASE("PhaseTimes: interval mean and p90 are exact, then the interval restarts", "[metrics]") {
    PhaseTimes t;
    t.reserve(10);
    // Step i spends i ms in forward and 1 ms in data; p90 of 1..10 ms by nearest rank is 9 ms.
    for (int i = 1; i <= 10; ++i) {
        t.add(0, 1e-3);
        t.add(1, i * 1e-3);
        t.end_step();
    }
    PhaseSummary s = t.take_interval();
    CHECK(s.steps == 10);
    CHECK(s.mean_ms[0] == Approx(1.0));
    CHECK(s.mean_ms[1] == Approx(5.5));
    CHECK(s.p90_ms[1] == Approx(9.0));
    CHECK(s.mean_ms[2] == 0.0);
    // The next interval sees only its own steps.
    t.add(1, 0.1);
    t.end_step();
    s = t.take_interval();
    CHECK(s.steps == 1);
    CHECK(s.mean_ms[1] == Approx(100.0));
    CHECK(s.p90_ms[1] == Approx(100.0));
}

TEST_CASE("PhaseTimes: the whole run's p90 comes from the histogram within 6%", "[metrics]") {
    PhaseTimes t;
    t.reserve(4);
    // 1000 steps: forward takes 1..1000 us; the true p90 is 900 us, the mean 500.5 us.
    for (int i = 1; i <= 1000; ++i) {
        t.add(1, i * 1e-6);
        t.end_step();
    }
    PhaseSummary s = t.run();
    CHECK(s.steps == 1000);
    CHECK(s.mean_ms[1] == Approx(0.5005));
    CHECK(std::abs(s.p90_ms[1] / 0.9 - 1.0) < 0.06);
    // Bins are 20 per decade: neighbouring bin centres differ by 10^(1/20) (12%).
    CHECK(PhaseTimes::bin_of(1e-3) == 60);
    CHECK(PhaseTimes::bin_mid(60) / PhaseTimes::bin_mid(59) == Approx(std::pow(10.0, 0.05)));
    CHECK(PhaseTimes::bin_of(0.0) == 0);
    CHECK(PhaseTimes::bin_of(1e9) == PhaseTimes::kBins - 1);
}

TEST_CASE("Breakdown: checkpoints are rows of their own, spread over the steps, not a step phase", "[metrics]") {
    PhaseTimes t;
    t.reserve(4);
    for (int i = 0; i < 100; ++i) {
        t.add(1, 10e-3);  // 10 ms of forward a step
        t.end_step();
    }
    t.count_checkpoint();
    t.add_checkpoint(false, 2.0);  // rank 0 wrote for 2 s
    t.add_checkpoint(true, 0.5);   // a wait on this (one-rank) clock
    const PhaseSummary s = t.run();
    CHECK(s.checkpoints == 1);
    CHECK(s.checkpoint_ms == Approx(2000.0));
    CHECK(s.checkpoint_wait_ms == Approx(500.0));
    CHECK(s.mean_ms[1] == Approx(10.0));  // the step's phases do not see it
    StepBreakdown b;
    b.steps = 100;
    b.phase[1].mean_ms = 10.0;
    b.rank_mean_ms.assign(2 * kStepPhases, 0.0);  // two ranks
    b.checkpoint = {1, 2000.0, 1900.0, 1900.0, 1};
    const std::string text = format_breakdown(b, {"a", "b"});
    // 2 s over 100 steps: 20 ms a step, +200% beside the 10 ms step.
    CHECK(text.find("  ckpt         20.000 ms +200.0% | 1 written by rank 0, 2.000 s each\n") != std::string::npos);
    CHECK(text.find("  ckpt-wait    19.000 ms +190.0% | the other ranks waiting for the write (not communication); "
                    "longest: rank 1, 1.900 s in all\n") != std::string::npos);
    CHECK(checkpoints_json(b.checkpoint)["wait_max_ms"].get<double>() == 1900.0);
    CHECK(!breakdown_json(b).contains("checkpoint"));  // "phases" holds the step's phases alone
    // --async-checkpoint: the time is rank 0's copies, and no rank waits for the write.
    b.checkpoint = {2, 40.0, 0.0, 0.0, 0, true};
    const std::string copied = format_breakdown(b, {"a", "b"});
    CHECK(copied.find("| 2 copied by rank 0, 0.020 s each (the steps' stall; a background thread writes the copies)\n") !=
          std::string::npos);
    CHECK(copied.find("written") == std::string::npos);
    CHECK(copied.find("ckpt-wait") == std::string::npos);
    b.checkpoint = {};
    CHECK(format_breakdown(b, {"a", "b"}).find("ckpt") == std::string::npos);
}

TEST_CASE("Bottleneck warnings: two step lines in a row over the threshold, once a run", "[metrics]") {
    BottleneckRule r;
    // Data: one noisy interval, then a quiet one, warns of nothing.
    CHECK_FALSE(r.observe(40.0, 0, 2).data);
    CHECK_FALSE(r.observe(1.0, 0, 2).data);
    // Alternating high and low never warns.
    for (int i = 0; i < 4; ++i) CHECK_FALSE(r.observe(i % 2 ? 1.0 : 40.0, 0, 2).data);
    // The threshold itself is not over it.
    CHECK_FALSE(r.observe(BottleneckRule::kDataPct, 0, 2).data);
    CHECK_FALSE(r.observe(BottleneckRule::kDataPct, 0, 2).data);
    // Two in a row warn, on the second; a third does not warn again, nor does a later pair.
    CHECK_FALSE(r.observe(6.0, 0, 2).data);
    BottleneckRule::Verdict v = r.observe(6.0, 0, 2);
    CHECK(v.data);
    CHECK_FALSE(v.comm);
    CHECK_FALSE(r.observe(6.0, 0, 2).data);
    CHECK_FALSE(r.observe(1.0, 0, 2).data);
    CHECK_FALSE(r.observe(50.0, 0, 2).data);
    CHECK_FALSE(r.observe(50.0, 0, 2).data);

    // The all-reduce: the same rule at its own threshold, apart from the data warning, and never
    // on one rank (nothing to wait for).
    BottleneckRule c;
    CHECK_FALSE(c.observe(0, 90.0, 1).comm);
    CHECK_FALSE(c.observe(0, 90.0, 1).comm);
    CHECK_FALSE(c.observe(0, BottleneckRule::kCommPct + 1, 4).comm);
    v = c.observe(50.0, BottleneckRule::kCommPct + 1, 4);
    CHECK(v.comm);
    CHECK_FALSE(v.data);
    v = c.observe(50.0, 90.0, 4);
    CHECK(v.data);
    CHECK_FALSE(v.comm);
}

TEST_CASE("Eval line and record: bits per byte for language models only", "[metrics]") {
    EvalStats e;
    e.step = 200;
    e.loss = 1.5;
    e.accuracy = 0.5;
    e.samples = 64;
    CHECK(format_eval_line(e) == "eval at step 200 | val loss 1.5000 | val accuracy 50.00% | 64 samples");
    CHECK(eval_record(e).json().find("bits_per_byte") == std::string::npos);
    e.bits_per_byte = 1.5 / std::log(2.0);
    CHECK(format_eval_line(e) == "eval at step 200 | val loss 1.5000 | val accuracy 50.00% | 64 samples | 2.1640 bits per byte");
    CHECK(eval_record(e).json().find("\"val_bits_per_byte\":2.16") != std::string::npos);
}

TEST_CASE("Record: JSON with null for non-finite numbers, EMF declares only finite metrics", "[metrics]") {
    Record r("step");
    r.integer("step", 1234567).metric("loss", NAN).metric("ms_per_step", 2.5, "Milliseconds").value("mfu", -1);
    r.text("note", "a \"quoted\"\nline");
    CHECK(r.json() == "{\"type\":\"step\",\"step\":1234567,\"loss\":null,\"ms_per_step\":2.5,\"mfu\":-1,"
                      "\"note\":\"a \\\"quoted\\\"\\nline\"}");
    std::string e = r.emf("dptrain", {{"job", "j1"}, {"rank", "3"}}, 1700000000123LL);
    CHECK(e.rfind("{\"_aws\":{\"Timestamp\":1700000000123,\"CloudWatchMetrics\":[{\"Namespace\":\"dptrain\","
                  "\"Dimensions\":[[\"job\",\"rank\"]],\"Metrics\":[{\"Name\":\"ms_per_step\",\"Unit\":\"Milliseconds\"}]}]}",
                  0) == 0);
    // The members: the dimensions, then the type and the time (the timestamp in seconds).
    CHECK(e.find(",\"job\":\"j1\",\"rank\":\"3\",\"type\":\"step\",\"time\":1700000000.123,\"step\":1234567,") !=
          std::string::npos);
    CHECK(r.json(1700000000004LL).rfind("{\"type\":\"step\",\"time\":1700000000.004,\"step\":1234567,", 0) == 0);
    CHECK(e.find("\"Name\":\"loss\"") == std::string::npos);
    CHECK(e.back() == '}');
}

TEST_CASE("step record and line: progress, ETA and unknown MFU", "[metrics]") {
    StepStats s;
    s.step = 250;
    s.total = 1000;
    s.loss = 1.5;
    s.samples_per_s = 1000;
    s.eta_s = 3725;
    std::string line = format_step_line(s);
    CHECK(line.find("step  250/1000  25% |") == 0);
    CHECK(line.find("| ETA 1h02m") != std::string::npos);
    std::string j = step_record(s).json();
    CHECK(j.find("\"progress_pct\":25,") != std::string::npos);
    CHECK(j.find("\"eta_s\":3725") != std::string::npos);
    CHECK(j.find("\"mfu\":-1") != std::string::npos);
    // An MLP's tokens/s: 0 in the file, no metric in CloudWatch; a language model's both.
    CHECK(j.find("\"tokens_per_s\":0") != std::string::npos);
    CHECK(step_record(s).emf("ns", {{"job", "j"}}, 1).find("{\"Name\":\"tokens_per_s\"") == std::string::npos);
    StepStats lm = s;
    lm.tokens_per_sample = 64;
    CHECK(step_record(lm).emf("ns", {{"job", "j"}}, 1).find("{\"Name\":\"tokens_per_s\",\"Unit\":\"Count/Second\"}") !=
          std::string::npos);
    CHECK(line.find("--stop-after") == std::string::npos);
    // --stop-after: the ETA is still to --steps; when this run stops is said beside it.
    s.stop_in_s = 42;
    CHECK(format_step_line(s).find("| ETA 1h02m (this run stops in 42s: --stop-after)") != std::string::npos);
    CHECK(step_record(s).json().find("\"stop_in_s\":42") != std::string::npos);
    CHECK(human_duration(42.4) == "42s");
    CHECK(human_duration(185) == "3m05s");
    CHECK(human_duration(NAN) == "?");
}

static long long now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

TEST_CASE("every record written to the file carries its wall-clock time after its type", "[metrics]") {
    const std::string path = testing::temp_dir("metrics") + "/m.jsonl";
    for (bool emf : {false, true}) {
        // The writer's clock (system_clock, in whole milliseconds). Not std::time(): it reads the
        // kernel's coarse clock, which can lag by a tick, so a record written at x.003 s once
        // found std::time() still at x - 1 after it.
        const long long before = now_ms();
        {
            JsonlWriter w;
            w.open(path, false, emf, "ns", "job");
            w.write(Record("step").integer("step", 3));
            w.write_rank(Record("rank").integer("step", 3), 1, "node-a");
        }
        const long long after = now_ms();
        std::ifstream in(path);
        std::string line;
        int lines = 0;
        while (std::getline(in, line)) {
            ++lines;
            INFO(line);
            const size_t at = line.find(",\"time\":");
            REQUIRE(at != std::string::npos);
            CHECK(line.substr(0, at).rfind("\"type\":\"") != std::string::npos);  // right after the type
            const long long t = std::llround(std::strtod(line.c_str() + at + 8, nullptr) * 1000.0);
            CHECK(t >= before);
            CHECK(t <= after);
        }
        CHECK(lines == 2);
    }
}

TEST_CASE("a resumed run's metrics keep the records up to its step, and drop a line cut short", "[metrics]") {
    const std::string path = testing::temp_dir("metrics") + "/m.jsonl";
    std::ofstream(path) << "{\"type\":\"run\",\"note\":\"\\\"step\\\":99\"}\n"
                        << "{\"type\":\"step\",\"time\":1.5,\"step\":10}\n"
                        << "{\"type\":\"eval\",\"step\":20}\n"
                        << "{\"type\":\"step\",\"step\":30}\n"
                        << "{\"type\":\"step\",\"st\n";  // a crash while writing
    truncate_jsonl_after(path, 20);
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text == "{\"type\":\"run\",\"note\":\"\\\"step\\\":99\"}\n"
                  "{\"type\":\"step\",\"time\":1.5,\"step\":10}\n"
                  "{\"type\":\"eval\",\"step\":20}\n");
}

TEST_CASE("TensorBoard's framing: CRC-32C, its mask, and a record around an event", "[metrics]") {
    CHECK(crc32c("", 0) == 0u);
    CHECK(crc32c("123456789", 9) == 0xE3069283u);  // the CRC-32C check value
    const std::string event = tb_scalars_event(1.5, 7, {{"train/loss", 2.0f}});
    const std::string r = tfrecord(event);
    REQUIRE(r.size() == 16 + event.size());
    uint64_t n = 0;
    uint32_t head_crc = 0, data_crc = 0;
    std::memcpy(&n, r.data(), 8);
    std::memcpy(&head_crc, r.data() + 8, 4);
    std::memcpy(&data_crc, r.data() + 12 + event.size(), 4);
    CHECK(n == event.size());
    CHECK(head_crc == masked_crc32c(r.data(), 8));
    CHECK(data_crc == masked_crc32c(event.data(), event.size()));
    CHECK(r.compare(12, event.size(), event) == 0);
    // wall_time (field 1, fixed64), then step (field 2, varint 7), then the summary (field 5).
    CHECK((unsigned char)event[0] == 0x09);
    CHECK((unsigned char)event[9] == 0x10);
    CHECK((unsigned char)event[10] == 7);
    CHECK((unsigned char)event[11] == 0x2A);
}

// A full disk (/dev/full: every write fails with ENOSPC): the writer says so once and goes on
// without the file; it neither throws nor writes again (the run went on silently, its metrics cut).
TEST_CASE("JsonlWriter: a failed write warns once and stops writing, without ending the run", "[metrics]") {
    JsonlWriter w;
    w.open("/dev/full", true);
    REQUIRE(w.is_open());
    fflush(stderr);
    char* text = nullptr;
    size_t size = 0;
    FILE* capture = open_memstream(&text, &size);
    FILE* saved = stderr;
    stderr = capture;
    CHECK_NOTHROW(w.write(Record("step").integer("step", 1)));
    CHECK_NOTHROW(w.write(Record("step").integer("step", 2)));
    stderr = saved;
    std::fclose(capture);
    const std::string said(text, size);
    std::free(text);
    CHECK(!w.is_open());
    CHECK(said.find("dptrain: warning: --metrics /dev/full: a write failed (No space left on device)") != std::string::npos);
    CHECK(said.find("warning", said.find("warning") + 1) == std::string::npos);  // once
}
