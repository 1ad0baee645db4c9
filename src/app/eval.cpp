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
#include "dptrain/infer/inference_model.h"
#include "dptrain/io/hf_import.h"
#include "dptrain/io/reliability.h"
#include "dptrain/train/choice_task.h"
#include "dptrain/train/evaluator.h"
#include "dptrain/train/task.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

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

// Every rank reads and checks every item and makes its decoder (a GPU that fails), so a bad one
// ends them all before the sums; rank 0 prints the three accuracies and writes each item's scores.
int run_task(const InferenceModel& m, const EvalOptions& o, const Topology& topo, MpiCommunicator& world,
             std::FILE* out) {
    std::vector<ChoiceItem> items;
    std::unique_ptr<ChoiceScorer> scorer;
    if (!all_ok(topo.world, [&] {
            items = read_choice_items(o.task, "--task");
            std::string why;
            const bool own_gpu = gpu_count(&why) >= topo.host_size;  // else all share the first
            scorer = std::make_unique<ChoiceScorer>(
                m.cfg, m.tok,
                make_decoder(o.device, m.cfg, o.precision, own_gpu ? topo.host_rank : 0, own_gpu ? topo.host_size : 1));
            scorer->check(items, "--task " + o.task);
        }))
        return kExitUser;
    ChoiceScores s;
    if (const int sig = scorer->score(items, m.params.data(), world, &s); sig != 0) {
        if (world.rank() == 0)
            std::printf("eval: --task %s cut short by %s; no scores\n", o.task.c_str(), strsignal(sig));
        return kExitPreempted;
    }
    for (size_t i = 0; out && i < items.size(); ++i) {
        const size_t k = items[i].endings.size();
        Json r = {{"type", "item"}, {"index", (long)i}, {"label", items[i].label}, {"pred", s.pred[i][0]},
                  {"pred_norm", s.pred[i][1]}, {"pred_tokens", s.pred[i][2]}};
        r["loglikelihood"] = std::vector<double>(s.ll.begin() + (long)s.at[i], s.ll.begin() + (long)(s.at[i] + k));
        r["tokens"] = std::vector<double>(s.tokens.begin() + (long)s.at[i], s.tokens.begin() + (long)(s.at[i] + k));
        std::fprintf(out, "%s\n", json_text(r).c_str());
    }
    if (world.rank() == 0)
        std::printf("eval: %s: %zu items | acc %.4f | acc_norm %.4f (log-likelihood per character, as "
                    "lm-evaluation-harness) | acc_tokens %.4f (per token, as llm.c's HellaSwag)\n",
                    o.task.c_str(), items.size(), s.acc, s.acc_norm, s.acc_tokens);
    if (out)
        std::fprintf(out, "%s\n",
                     json_text(Json{{"type", "task"}, {"task", o.task}, {"items", (long)items.size()},
                                    {"acc", s.acc}, {"acc_norm", s.acc_norm}, {"acc_tokens", s.acc_tokens}})
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
            device = make_device(o.device, topo);  // eval's line names the device where it runs
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
