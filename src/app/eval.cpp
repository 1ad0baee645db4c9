// dptrain eval (eval.h): the model loaded on every rank, then --data through the training
// evaluator and --task through the decoder, items spread over the ranks and their scores summed.
#include "dptrain/app/eval.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/decoders.h"
#include "dptrain/backend/device.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/config/infer_options.h"
#include "dptrain/core/error.h"
#include "dptrain/core/json.h"
#include "dptrain/infer/completions.h"
#include "dptrain/infer/inference_model.h"
#include "dptrain/io/hf_import.h"
#include "dptrain/io/reliability.h"
#include "dptrain/train/evaluator.h"
#include "dptrain/train/task.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <tuple>

namespace dptrain {

namespace {

bool is_hf_dir(const std::string& path) {
    struct stat st;
    return ::stat((path + "/model.safetensors").c_str(), &st) == 0;
}

// A checkpoint (file, run or checkpoint directory) or a Hugging Face directory.
CheckpointState load_model_state(std::string* path) {
    if (!is_hf_dir(*path)) return load_checkpoint_or_newest(path, "--checkpoint");
    std::string note;
    return import_hf_checkpoint(*path, &note);
}

struct Item {
    std::string context;
    std::vector<std::string> endings;  // as scored: HellaSwag's with their leading space
    int label = 0;
};

// A label as HellaSwag writes it (a number, or a string of one); -1 when it is neither.
long label_of(const Json& l) {
    if (l.is_number_integer()) return l.get<long>();
    if (!l.is_string() || l.get<std::string>().empty()) return -1;
    char* end = nullptr;
    const long v = std::strtol(l.get<std::string>().c_str(), &end, 10);
    return *end == '\0' ? v : -1;  // "B" is no index
}

// One line: HellaSwag's released form (ctx, endings, label) or {context, choices, answer}. Throws
// the refusal with `where` (FILE:LINE) before it.
Item parse_item(const std::string& line, const std::string& where) {
    const auto bad = [&](const std::string& what) { return UserError(where + ": " + what); };
    Json j;
    try {
        j = parse_json(line);
    } catch (const JsonError& e) {
        throw bad(std::string("not JSON (") + e.what() + ")");
    }
    const bool hs = j.is_object() && j.contains("ctx");
    const char *ctx = hs ? "ctx" : "context", *ends = hs ? "endings" : "choices", *lab = hs ? "label" : "answer";
    if (!j.is_object() || !j.contains(ctx) || !j[ctx].is_string() || !j.contains(ends) || !j[ends].is_array() ||
        j[ends].size() < 2 || !j.contains(lab))
        throw bad("want {\"ctx\", \"endings\", \"label\"} (HellaSwag) or {\"context\", \"choices\", \"answer\"}");
    Item it;
    it.context = j[ctx].get<std::string>();
    if (it.context.empty()) throw bad(std::string(ctx) + " is empty");
    for (const Json& e : j[ends]) {
        if (!e.is_string() || e.get<std::string>().empty()) throw bad(std::string(ends) + ": non-empty strings");
        it.endings.push_back((hs ? " " : "") + e.get<std::string>());
    }
    const long label = label_of(j[lab]);
    if (label < 0 || label >= (long)it.endings.size())
        throw bad(strfmt("%s must be an index into %s (0..%zu)", lab, ends, it.endings.size() - 1));
    it.label = (int)label;
    return it;
}

std::vector<Item> read_items(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw UserError(strfmt("--task %s: cannot read it", path.c_str()));
    std::vector<Item> items;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
        if (line.find_first_not_of(" \t\r") != std::string::npos)
            items.push_back(parse_item(line, strfmt("--task %s:%d", path.c_str(), n)));
    if (items.empty()) throw UserError(strfmt("--task %s: no items", path.c_str()));
    return items;
}

// Scores a continuation by the decoder: the sum of its tokens' log-probabilities given the
// context (cut from the left where both exceed the block size), and its token count.
class Scorer {
  public:
    Scorer(const InferenceModel& m, const EvalOptions& o) : m_(m), dec_(make_decoder(o.device, m.cfg, o.precision)) {
        dec_->reserve(1, m.cfg.block_size);
        dec_->set_params(m_.params.data());
        logits_.resize((size_t)m.cfg.block_size * m.cfg.vocab_size);
    }
    // Throws UserError naming the item when it cannot be scored (before any rank scores).
    static void check(const InferenceModel& m, const Item& it, const std::string& where) {
        if (m.tok->encode(it.context).empty()) throw UserError(where + ": the context encodes to no tokens");
        for (const std::string& e : it.endings)
            if (const size_t n = m.tok->encode(e).size(); n == 0 || (int)n >= m.cfg.block_size)
                throw UserError(strfmt("%s: an ending of %zu tokens; it must fit the block size %d with a token of "
                                       "context",
                                       where.c_str(), n, m.cfg.block_size));
    }
    std::pair<double, int> operator()(const std::string& context, const std::string& ending) {
        const int T = m_.cfg.block_size, V = m_.cfg.vocab_size;
        std::vector<int> ctx = m_.tok->encode(context), cont = m_.tok->encode(ending);
        const size_t keep = std::min(ctx.size(), (size_t)(T - cont.size()));
        std::vector<int> ids(ctx.end() - (long)keep, ctx.end());
        const int first = (int)ids.size();
        ids.insert(ids.end(), cont.begin(), cont.end());
        const int n = (int)ids.size(), outs = (int)cont.size();
        std::vector<int> slot(n, 0), pos(n), rows(outs);
        for (int i = 0; i < n; ++i) pos[i] = i;
        for (int k = 0; k < outs; ++k) rows[k] = first - 1 + k;
        dec_->decode(ids.data(), slot.data(), pos.data(), n, logits_.data(), rows.data(), outs);
        double ll = 0;
        for (int k = 0; k < outs; ++k)
            ll += token_logprob(logits_.data() + (size_t)k * V, V, V, ids[first + k], 0).logprob;
        return {ll, outs};
    }

  private:
    const InferenceModel& m_;
    std::unique_ptr<Decoder> dec_;
    std::vector<float> logits_;
};

// Code points, as lm-evaluation-harness's len() of the continuation.
long chars_of(const std::string& s) {
    return (long)std::count_if(s.begin(), s.end(), [](char c) { return ((unsigned char)c & 0xC0) != 0x80; });
}

// Each rank scores items r, r + W, ...; rank 0 gets every score (each summed from one rank and
// zeros, so the same bits on any number of ranks) and prints the three accuracies.
int run_task(const InferenceModel& m, const EvalOptions& o, const Topology& topo, MpiCommunicator& world,
             std::FILE* out) {
    std::vector<Item> items;
    std::unique_ptr<Scorer> score;
    // Every rank reads and checks every item, and makes its decoder (a GPU that fails), so a bad
    // one ends them all before the sums.
    if (!all_ok(topo.world, [&] {
            items = read_items(o.task);
            for (size_t i = 0; i < items.size(); ++i)
                Scorer::check(m, items[i], strfmt("--task %s, item %zu", o.task.c_str(), i + 1));
            score = std::make_unique<Scorer>(m, o);
        }))
        return kExitUser;
    size_t total = 0;
    std::vector<size_t> at;
    for (const Item& it : items) at.push_back(total), total += it.endings.size();
    std::vector<double> ll(total, 0.0), ntok(total, 0.0);
    for (size_t i = (size_t)world.rank(); i < items.size(); i += (size_t)world.size())
        for (size_t e = 0; e < items[i].endings.size(); ++e)
            std::tie(ll[at[i] + e], ntok[at[i] + e]) = (*score)(items[i].context, items[i].endings[e]);
    world.allreduce_sum(ll.data(), total);
    world.allreduce_sum(ntok.data(), total);
    double right[3] = {0, 0, 0};  // acc, acc_norm (per character), per token
    for (size_t i = 0; i < items.size(); ++i) {
        int best[3] = {0, 0, 0};
        for (int e = 1; e < (int)items[i].endings.size(); ++e) {
            const size_t k = at[i] + e, b0 = at[i] + best[0], b1 = at[i] + best[1], b2 = at[i] + best[2];
            if (ll[k] > ll[b0]) best[0] = e;
            if (ll[k] / chars_of(items[i].endings[e]) > ll[b1] / chars_of(items[i].endings[best[1]])) best[1] = e;
            if (ll[k] / ntok[k] > ll[b2] / ntok[b2]) best[2] = e;
        }
        for (int k = 0; k < 3; ++k) right[k] += best[k] == items[i].label;
        if (out) {
            Json r = {{"type", "item"}, {"index", (long)i}, {"label", items[i].label}, {"pred", best[0]},
                      {"pred_norm", best[1]}, {"pred_tokens", best[2]}};
            r["loglikelihood"] = std::vector<double>(ll.begin() + (long)at[i], ll.begin() + (long)(at[i] + items[i].endings.size()));
            r["tokens"] = std::vector<double>(ntok.begin() + (long)at[i], ntok.begin() + (long)(at[i] + items[i].endings.size()));
            std::fprintf(out, "%s\n", json_text(r).c_str());
        }
    }
    const double n = (double)items.size();
    if (world.rank() == 0)
        std::printf("eval: %s: %zu items | acc %.4f | acc_norm %.4f (log-likelihood per character, as "
                    "lm-evaluation-harness) | acc_tokens %.4f (per token, as llm.c's HellaSwag)\n",
                    o.task.c_str(), items.size(), right[0] / n, right[1] / n, right[2] / n);
    if (out)
        std::fprintf(out, "%s\n",
                     json_text(Json{{"type", "task"}, {"task", o.task}, {"items", (long)items.size()},
                                    {"acc", right[0] / n}, {"acc_norm", right[1] / n}, {"acc_tokens", right[2] / n}})
                         .c_str());
    return 0;
}

// The training evaluator over --data with the checkpoint's own options (the data, batch and
// device from eval's).
int run_data(const CheckpointState& ck, const std::vector<float>& params, const EvalOptions& eo, const Topology& topo,
             MpiCommunicator& world, std::FILE* out) {
    Options o = options_from_ini(ck.options);
    o.data = eo.data;
    o.batch_size = eo.batch_size;
    o.device = eo.device;
    o.io = IoMode::direct;
    o.stage_dir.clear();
    std::unique_ptr<Task> task;
    std::unique_ptr<Device> device;
    std::unique_ptr<Model> model;
    if (!all_ok(topo.world, [&] {
            task = Task::open(o, topo);
            if (task->tokenizer_kind() != ck.tokenizer || task->tokenizer_table() != ck.vocab)
                throw UserError(strfmt("--data %s holds %s tokens of another table than the model's (%s): its ids "
                                       "would stand for other text; tokenize it with the model's tokenizer",
                                       o.data.c_str(), task->tokenizer_kind().c_str(), ck.tokenizer.c_str()));
            device = make_device(o.device, topo);
            model = device->make_model(task->model_spec(o));
            if (model->signature() != ck.model || model->num_params() != params.size())
                throw UserError(strfmt("--data %s makes a %s, but the model is a %s", o.data.c_str(),
                                       model->signature().c_str(), ck.model.c_str()));
        }))
        return kExitUser;
    Evaluator ev(*task, *model, world, eo.eval_max, eo.split == "train");
    const std::optional<EvalStats> e = ev.run(ck.step, params.data());
    if (!e) return kExitPreempted;
    const std::string bpb = e->bits_per_byte >= 0 ? strfmt(" | bits per byte %.4f", e->bits_per_byte) : "";
    if (world.rank() == 0)
        std::printf("eval: %s (%s): %ld windows of %d tokens | loss %.4f | perplexity %.3f%s | accuracy %.2f%%\n",
                    o.data.c_str(), eo.split.c_str(), e->samples, task->tokens_per_sample(), e->loss, std::exp(e->loss),
                    bpb.c_str(), 100.0 * e->accuracy);
    if (out)
        std::fprintf(out, "%s\n",
                     json_text(Json{{"type", "data"}, {"data", o.data}, {"split", eo.split}, {"windows", e->samples},
                                    {"loss", e->loss}, {"perplexity", std::exp(e->loss)},
                                    {"bits_per_byte", e->bits_per_byte}, {"accuracy", e->accuracy}})
                         .c_str());
    return 0;
}

} // namespace

int run_eval(int argc, char** argv, const Topology& topo) {
    MpiCommunicator world(topo.world);
    InferenceParse<EvalOptions> parsed;
    CheckpointState ck;
    InferenceModel m;
    std::string path;
    if (!all_ok(topo.world, [&] {
            parsed = parse_eval_options(argc, argv, "dptrain eval");
            if (!parsed.help_text.empty()) return;
            path = parsed.opts.checkpoint;
            CheckpointState full = load_model_state(&path);
            full.opt_m.clear(), full.opt_v.clear();
            std::vector<float> params = std::move(full.params);
            ck = full;  // the rest; the parameters are m's
            full.params = std::move(params);
            m = inference_model_from(std::move(full), path);
        }))
        return kExitUser;
    if (!parsed.help_text.empty()) {
        if (world.rank() == 0) std::fputs(parsed.help_text.c_str(), stdout);
        return 0;
    }
    const EvalOptions& o = parsed.opts;
    install_preemption_handlers();
    cpu::set_threads(o.threads);
    std::FILE* out = nullptr;
    if (!all_ok(topo.world, [&] {
            if (world.rank() == 0 && !o.out.empty() && !(out = std::fopen(o.out.c_str(), "w")))
                throw UserError(strfmt("--out %s: cannot open for writing: %s", o.out.c_str(), std::strerror(errno)));
        }))
        return kExitUser;
    if (world.rank() == 0)
        std::printf("eval: %s | step %ld | %s | %d rank%s\n", path.c_str(), ck.step, ck.model.c_str(), world.size(),
                    world.size() == 1 ? "" : "s");
    int code = 0;
    if (!o.data.empty()) code = run_data(ck, m.params, o, topo, world, out);
    if (code == 0 && !o.task.empty()) code = run_task(m, o, topo, world, out);
    if (out) std::fclose(out);
    return code;
}

} // namespace dptrain
