// dptrain-report: after a run, `trace` merges the per-rank Chrome traces, `plot` charts
// metrics.jsonl (drawn by plot.h; this file picks the data). Not for live monitoring: it reads the
// files as they are when it starts.
#include "dptrain/core/error.h"
#include "dptrain/tools/cli.h"
#include "dptrain/tools/json.h"
#include "dptrain/tools/trace_merge.h"
#include "dptrain/tools/plot.h"
#include "dptrain/core/files.h"

#include <boost/program_options.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace dptrain;
namespace po = boost::program_options;

namespace {

const char* kUsage =
    "usage: dptrain-report trace OUT.json TRACE-rank*.json\n"
    "           merge the per-rank Chrome traces written by --trace into OUT.json\n"
    "       dptrain-report plot RUN_DIR|METRICS.jsonl [--out DIR] [--describe]\n"
    "           charts of the run's metrics (RUN_DIR/metrics.jsonl): loss.{svg,png}, lr.{svg,png},\n"
    "           throughput.{svg,png} and phases.{svg,png}, written to DIR (default: plots/ beside\n"
    "           the metrics file); --describe prints what each chart draws as JSON lines instead\n";

int trace(int argc, char** argv) {
    if (argc < 3)
        throw UserError("trace: give the output file and at least one rank trace; see " + runnable("dptrain-report") +
                        " --help");
    const std::vector<std::string> inputs(argv + 2, argv + argc);
    const long dropped = merge_traces(argv[1], inputs);
    std::printf("dptrain-report: merged %d rank traces into %s\n", argc - 2, argv[1]);
    if (dropped > 0)
        std::printf("dptrain-report: note: %ld events are not in it: the ranks' trace buffers were full (a run that long "
                    "is better traced in part: --trace with --stop-after, then --resume)\n",
                    dropped);
    return 0;
}

// A missing optional field is NaN, which the chart skips.
struct StepRow {
    double step, loss, lr, samples_per_s, tokens_per_s;
    std::vector<double> phase_ms;  // per RunMetrics::phases
};

struct EvalRow {
    double step, val_loss;
};

struct RunMetrics {
    std::vector<std::string> phases;  // in order of first appearance
    std::vector<StepRow> steps;       // increasing step (the rollback in read_metrics)
    std::vector<EvalRow> evals;       // sorted by step
};

double required_number(const Json& v, const char* key, const std::string& path, const JsonRecord& r,
                       const std::string& type) {
    const Json* x = json_member(v, key);
    if (!x || !x->is_number())
        throw UserError(strfmt("%s:%d: %s record without a numeric \"%s\"", path.c_str(), r.line, type.c_str(), key));
    return x->get<double>();
}

// null: not finite (how dptrain writes a NaN loss).
double number_or_null(const Json& v, const char* key, const std::string& path, const JsonRecord& r,
                      const std::string& type) {
    const Json* x = json_member(v, key);
    if (x && x->is_null()) return std::nan("");
    return required_number(v, key, path, r, type);
}

RunMetrics read_metrics(const std::string& path) {
    const double nan = std::nan("");
    RunMetrics m;
    for (const JsonRecord& r : read_jsonl_records(path)) {
        const Json& v = r.value;
        const std::string type = json_string_or_empty(v, "type");
        if (type == "step") {
            StepRow row;
            row.step = required_number(v, "step", path, r, type);
            row.loss = number_or_null(v, "loss", path, r, type);
            row.lr = json_number_or(v, "lr", nan);
            row.samples_per_s = json_number_or(v, "samples_per_s", nan);
            row.tokens_per_s = json_number_or(v, "tokens_per_s", nan);
            row.phase_ms.assign(m.phases.size(), nan);
            if (const Json* ph = json_member(v, "phases")) {
                if (!ph->is_object())
                    throw UserError(strfmt("%s:%d: \"phases\" is not an object", path.c_str(), r.line));
                for (const auto& p : ph->items()) {
                    size_t k = std::find(m.phases.begin(), m.phases.end(), p.key()) - m.phases.begin();
                    if (k == m.phases.size()) m.phases.push_back(p.key());
                    row.phase_ms.resize(m.phases.size(), nan);
                    row.phase_ms[k] = json_number_or(p.value(), "mean_ms", nan);
                }
            }
            // A resume repeats steps after its checkpoint; the first attempt's are a discarded
            // timeline, so the newer record wins and the line does not zigzag.
            while (!m.steps.empty() && m.steps.back().step >= row.step) m.steps.pop_back();
            while (!m.evals.empty() && m.evals.back().step >= row.step) m.evals.pop_back();
            m.steps.push_back(row);
        } else if (type == "eval") {
            m.evals.push_back({required_number(v, "step", path, r, type), number_or_null(v, "val_loss", path, r, type)});
        }
    }
    if (m.steps.empty()) throw UserError(strfmt("%s: no step records", path.c_str()));
    // In order after the rollback, unless the file was assembled by hand.
    std::stable_sort(m.evals.begin(), m.evals.end(), [](const EvalRow& a, const EvalRow& b) { return a.step < b.step; });
    for (StepRow& row : m.steps) row.phase_ms.resize(m.phases.size(), nan);
    return m;
}

struct NamedChart {
    std::string file;  // base name
    Chart chart;
};

std::vector<NamedChart> charts_of(const RunMetrics& m) {
    Series train{"train loss", {}, {}, true, false};
    Series lr{"learning rate", {}, {}, true, false};
    Series samples{"samples/s", {}, {}, true, false};
    Series tokens{"tokens/s", {}, {}, true, false};
    bool any_tokens = false;
    for (const StepRow& r : m.steps) {
        train.x.push_back(r.step), train.y.push_back(r.loss);
        lr.x.push_back(r.step), lr.y.push_back(r.lr);
        samples.x.push_back(r.step), samples.y.push_back(r.samples_per_s);
        tokens.x.push_back(r.step), tokens.y.push_back(r.tokens_per_s);
        any_tokens = any_tokens || (std::isfinite(r.tokens_per_s) && r.tokens_per_s != 0);
    }
    std::vector<NamedChart> out(4);

    out[0].file = "loss";
    out[0].chart.title = "loss";
    out[0].chart.x_title = "step";
    out[0].chart.y_title = "loss";
    out[0].chart.series.push_back(train);
    if (!m.evals.empty()) {
        Series val{"validation loss", {}, {}, true, true};
        for (const EvalRow& e : m.evals) val.x.push_back(e.step), val.y.push_back(e.val_loss);
        out[0].chart.series.push_back(val);
    }

    out[1].file = "lr";
    out[1].chart.title = "learning rate";
    out[1].chart.x_title = "step";
    out[1].chart.y_title = "learning rate";
    out[1].chart.y_from_zero = true;
    out[1].chart.series.push_back(lr);

    // tokens_per_s is 0 for the MLP.
    out[2].file = "throughput";
    out[2].chart.title = "throughput";
    out[2].chart.x_title = "step";
    out[2].chart.y_title = any_tokens ? "tokens/s" : "samples/s";
    out[2].chart.y_from_zero = true;
    out[2].chart.series.push_back(any_tokens ? tokens : samples);

    // Lines, not a stack: with --overlap the phases overlap and do not add up to the step.
    out[3].file = "phases";
    out[3].chart.title = "time per step by phase";
    out[3].chart.x_title = "step";
    out[3].chart.y_title = "mean ms per step";
    out[3].chart.y_from_zero = true;
    for (size_t k = 0; k < m.phases.size(); ++k) {
        Series s{m.phases[k], {}, {}, true, false};
        for (const StepRow& r : m.steps) s.x.push_back(r.step), s.y.push_back(r.phase_ms[k]);
        out[3].chart.series.push_back(s);
    }
    if (m.phases.empty()) out[3].chart.message = "no phase data";
    return out;
}

bool is_directory(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_dirs(const std::string& dir) {
    if (is_directory(dir)) return;
    struct stat st;
    if (stat(dir.c_str(), &st) == 0)
        throw UserError(strfmt("%s: exists and is not a directory; choose another --out", dir.c_str()));
    make_directories(dir, "--out");
}

// --describe: a JSON line per chart, for scripts and tests, as the SVG holds glyphs, not text.
void describe(const std::vector<NamedChart>& charts) {
    for (const NamedChart& c : charts) {
        Json series = Json::array();
        for (const Series& s : c.chart.series) {
            long points = 0;
            for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) points += std::isfinite(s.x[i]) && std::isfinite(s.y[i]);
            series.push_back(Json{{"name", s.name}, {"points", points}});
        }
        std::printf("%s\n", json_text(Json{{"file", c.file},
                                            {"title", c.chart.title},
                                            {"x_title", c.chart.x_title},
                                            {"y_title", c.chart.y_title},
                                            {"message", c.chart.message},
                                            {"series", series}})
                                  .c_str());
    }
}

int plot(int argc, char** argv) {
    std::string input, out;
    po::options_description desc;
    desc.add_options()("out", po::value(&out))("input", po::value(&input))("describe", po::bool_switch());
    const po::variables_map vm = parse_subcommand(argc, argv, desc, {"input"});
    if (input.empty())
        throw UserError("plot: give a run directory or a metrics.jsonl file; see " + runnable("dptrain-report") + " --help");

    std::string path = input;
    if (is_directory(input)) {
        while (input.size() > 1 && input.back() == '/') input.pop_back();
        path = input + "/metrics.jsonl";
        if (out.empty()) out = input + "/plots";
    } else if (out.empty()) {
        size_t slash = input.rfind('/');
        out = slash == std::string::npos ? "plots" : input.substr(0, slash + 1) + "plots";
    }
    while (out.size() > 1 && out.back() == '/') out.pop_back();

    RunMetrics m = read_metrics(path);
    if (vm["describe"].as<bool>()) {
        describe(charts_of(m));
        return 0;
    }
    make_dirs(out);
    for (const NamedChart& c : charts_of(m))
        for (const std::string& f : write_chart(c.chart, out + "/" + c.file))
            std::printf("dptrain-report: wrote %s\n", f.c_str());
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    return run_tool("dptrain-report", kUsage, argc, argv, [&] {
        const std::string cmd = argc > 1 ? argv[1] : "";
        if (cmd == "trace") return trace(argc - 1, argv + 1);
        if (cmd == "plot") return plot(argc - 1, argv + 1);
        throw po::error(cmd.empty() ? "no command given (trace or plot)" : "not a command (trace or plot)");
    });
}
