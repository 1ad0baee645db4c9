// dptrain-ckpt: looks into checkpoints and hands them to other tools (usage below).
// Not for: writing checkpoints (io/checkpoint.cpp).
#include "dptrain/core/error.h"
#include "dptrain/io/checkpoint.h"
#include "dptrain/io/hf_import.h"
#include "dptrain/io/promotion.h"
#include "dptrain/io/hf_gpt2.h"
#include "dptrain/tools/cli.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

using namespace dptrain;
namespace po = boost::program_options;

namespace {

const char* kUsage =
    "usage: dptrain-ckpt info CKPT\n"
    "           step, data position, model, tensor sizes, checksums verified; exit 1 when a tensor holds\n"
    "           NaN or Inf\n"
    "       dptrain-ckpt diff A B [--tol X] [--params-only]\n"
    "           the largest |A - B| over parameters and optimizer state (the parameters alone with\n"
    "           --params-only); exit 0 when within X (default 0: bit-identical), 1 otherwise\n"
    "       dptrain-ckpt export CKPT --out DIR [--dtype float32|bfloat16] [--overwrite]\n"
    "           a GPT checkpoint in Hugging Face's GPT-2 layout: DIR/model.safetensors (GPT-2's tensor names,\n"
    "           Conv1D orientation) and DIR/config.json, which GPT2LMHeadModel.from_pretrained(DIR) loads,\n"
    "           with the tokenizer's files; a DIR holding files is refused unless --overwrite (which replaces\n"
    "           the model and removes tokenizer files of another tokenizer)\n"
    "       dptrain-ckpt import HF_DIR --out DIR [--overwrite]\n"
    "           GPT-2 weights in Hugging Face's layout (model.safetensors, config.json and the tokenizer's\n"
    "           files: vocab.json and merges.txt, or tokenizer.model, or an export's config.json entry) as a\n"
    "           checkpoint in DIR, for eval, serve, generate and export without training (no optimizer\n"
    "           state: fine-tune with dptrain --init-from HF_DIR); an export imported back is bit-identical\n"
    "       dptrain-ckpt promote CKPT [--reason TEXT]\n"
    "           marks a verified checkpoint as fit to serve: servers following promotions (dptrain serve\n"
    "           --follow promoted or canary) move to it; the rotation keeps it\n"
    "       dptrain-ckpt rollback RUN_DIR [--reason TEXT]\n"
    "           withdraws the newest promotion: its servers move back to the one before\n"
    "       dptrain-ckpt promotions RUN_DIR\n"
    "           the promotions in force, oldest first, and the one served\n"
    "       dptrain-ckpt logits MODEL --tokens ID,ID,... --out FILE.npy\n"
    "           the GPT's logits at each position of the tokens, (n, vocab) float32, from a checkpoint or\n"
    "           from GPT-2 weights in Hugging Face's layout (a directory with model.safetensors and\n"
    "           config.json); for comparing a model with its export in another framework\n"
    "CKPT: a checkpoint file, or a run or checkpoint directory for its newest complete checkpoint.\n"
    "Exit 2 (with one line on stderr) for a bad argument or a file that is not a valid checkpoint.\n";

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        double d = std::fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;  // NaN propagates as a difference
    }
    return m;
}

int info(int argc, char** argv) {
    std::string file;
    po::options_description desc;
    desc.add_options()("file", po::value(&file));
    parse_subcommand(argc, argv, desc, {"file"});
    if (file.empty()) throw po::error("give the checkpoint file");
    CheckpointState s = load_checkpoint_or_newest(&file, "");
    long nonfinite = 0;
    for (const auto* v : {&s.params, &s.opt_m, &s.opt_v})
        for (float x : *v) nonfinite += !std::isfinite(x);
    const std::string set = s.train_samples > 0 ? strfmt(" of %ld", s.train_samples) : "";
    // Updates below the step: steps skipped as non-finite (--on-nonfinite skip).
    const std::string updates = s.updates >= 0 && s.updates != s.step
                                    ? strfmt(" (%ld updates: %ld skipped)", s.updates, s.step - s.updates)
                                    : "";
    // world_size 0: dptrain-ckpt import wrote it, with no training run behind it.
    const std::string run = s.world_size == 0 ? std::string("imported: no optimizer state or data position")
                                              : strfmt("epoch %ld + %ld samples%s | global batch %ld | seed %llu | "
                                                       "written by %d ranks",
                                                       s.epoch, s.epoch_offset, set.c_str(), s.global_batch,
                                                       (unsigned long long)s.seed, s.world_size);
    std::printf("%s: step %ld%s | %s\nmodel %s | optimizer %s | %zu parameters | checksums verified | %ld non-finite "
                "values\n",
                file.c_str(), s.step, updates.c_str(), run.c_str(), s.model.c_str(), s.optimizer.c_str(),
                s.params.size(), nonfinite);
    return nonfinite ? 1 : 0;
}

int diff(int argc, char** argv) {
    std::string fa, fb;
    double tol = 0.0;
    bool params_only = false;
    po::options_description desc;
    desc.add_options()("a", po::value(&fa))("b", po::value(&fb))(
        "tol", po::value(&tol)->default_value(0.0), "largest |A - B| still equal; 0: bit-identical")(
        "params-only", po::bool_switch(&params_only));
    parse_subcommand(argc, argv, desc, {"a", "b"});
    if (fb.empty()) throw po::error("give the two checkpoints to compare");
    if (!(tol >= 0)) throw po::error(strfmt("--tol %g must be >= 0", tol));
    CheckpointState a = load_checkpoint_or_newest(&fa, ""), b = load_checkpoint_or_newest(&fb, "");
    if (params_only) a.opt_m = b.opt_m = a.opt_v = b.opt_v = {};
    // Two models of one size (another --n-head) hold comparable numbers that mean other things.
    if (a.model != b.model || a.params.size() != b.params.size() || a.opt_m.size() != b.opt_m.size() ||
        a.opt_v.size() != b.opt_v.size()) {
        std::printf("different models: %s vs %s\n", a.model.c_str(), b.model.c_str());
        return 1;
    }
    const bool same = std::memcmp(a.params.data(), b.params.data(), a.params.size() * 4) == 0 &&
                      std::memcmp(a.opt_m.data(), b.opt_m.data(), a.opt_m.size() * 4) == 0 &&
                      std::memcmp(a.opt_v.data(), b.opt_v.data(), a.opt_v.size() * 4) == 0;
    const double dp = max_abs_diff(a.params, b.params), dm = max_abs_diff(a.opt_m, b.opt_m),
                 dv = max_abs_diff(a.opt_v, b.opt_v);
    const std::string state = params_only ? "" : strfmt(", opt_m %.3g, opt_v %.3g", dm, dv);
    std::printf("steps %ld vs %ld | max abs diff: params %.3g%s | %s\n", a.step, b.step, dp, state.c_str(),
                same ? "bit-identical" : "not bit-identical");
    const bool ok = tol == 0.0 ? same : (dp <= tol && dm <= tol && dv <= tol);
    return ok ? 0 : 1;
}

int export_model(int argc, char** argv) {
    std::string file, out, dtype = "float32";
    bool overwrite = false;
    po::options_description desc;
    desc.add_options()("file", po::value(&file))("out", po::value(&out))("dtype", po::value(&dtype))(
        "overwrite", po::bool_switch(&overwrite));
    parse_subcommand(argc, argv, desc, {"file"});
    if (file.empty() || out.empty()) throw po::error("give the checkpoint and --out DIR");
    if (dtype != "float32" && dtype != "bfloat16")
        throw po::error("--dtype " + dtype + " is not float32 or bfloat16");
    const CheckpointState ck = load_checkpoint_or_newest(&file, "");
    const std::vector<std::string> removed =
        export_hf_gpt2(ck, out, dtype == "bfloat16" ? TensorDtype::bf16 : TensorDtype::f32, overwrite);
    for (const std::string& name : removed)
        std::printf("removed %s/%s: another tokenizer's file, left by what was there\n", out.c_str(), name.c_str());
    std::printf("%s: step %ld, %s, %zu parameters -> %s/model.safetensors (%s) and %s/config.json\n", file.c_str(),
                ck.step, ck.model.c_str(), ck.params.size(), out.c_str(), dtype.c_str(), out.c_str());
    return 0;
}

int import_model(int argc, char** argv) {
    std::string dir, out;
    bool overwrite = false;
    po::options_description desc;
    desc.add_options()("file", po::value(&dir))("out", po::value(&out))("overwrite", po::bool_switch(&overwrite));
    parse_subcommand(argc, argv, desc, {"file"});
    if (dir.empty() || out.empty()) throw po::error("give the Hugging Face directory and --out DIR");
    if (!list_checkpoints(out).empty() && !overwrite)
        throw UserError(strfmt("--out %s already holds checkpoints; choose another directory or pass --overwrite",
                               out.c_str()));
    std::string note;
    const CheckpointState s = import_hf_checkpoint(dir, &note);
    const std::string path = save_checkpoint(out, s, 0);
    std::printf("%s: %s, %zu parameters, %s tokenizer%s -> %s (step %ld, no optimizer state)\n", dir.c_str(),
                s.model.c_str(), s.params.size(), s.tokenizer.c_str(), note.empty() ? "" : (" | " + note).c_str(),
                path.c_str(), s.step);
    return 0;
}

// "2026-12-07T05:43:55Z".
std::string iso_time(double unix_seconds) {
    const std::time_t t = (std::time_t)unix_seconds;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

int promote(int argc, char** argv) {
    std::string file, reason = "by hand";
    po::options_description desc;
    desc.add_options()("file", po::value(&file))("reason", po::value(&reason));
    parse_subcommand(argc, argv, desc, {"file"});
    if (file.empty()) throw po::error("give the checkpoint to promote");
    const CheckpointState s = load_checkpoint_or_newest(&file, "");  // verifies every checksum
    const std::string dir = checkpoint_dir_of(file);
    Promotion p;
    p.step = s.step;
    p.file = file.substr(file.rfind('/') + 1);
    p.time = (double)std::time(nullptr);
    p.reason = reason;
    p.by = "dptrain-ckpt promote";
    append_promotion(dir, "promote", p);
    std::printf("promoted step %ld (%s, checksums verified) in %s/%s\n", p.step, file.c_str(), dir.c_str(),
                kPromotionLog);
    return 0;
}

int rollback(int argc, char** argv) {
    std::string path, reason = "by hand";
    po::options_description desc;
    desc.add_options()("file", po::value(&path))("reason", po::value(&reason));
    parse_subcommand(argc, argv, desc, {"file"});
    if (path.empty()) throw po::error("give the run or checkpoint directory");
    const std::string dir = checkpoint_dir_of(path);
    std::vector<Promotion> active = read_promotions(dir);
    if (active.empty()) throw UserError(strfmt("%s: no promotion in force to withdraw", dir.c_str()));
    Promotion p = active.back();
    p.time = (double)std::time(nullptr);
    p.reason = reason;
    p.by = "dptrain-ckpt rollback";
    append_promotion(dir, "withdraw", p);
    active.pop_back();
    std::printf("withdrew the promotion of step %ld; %s\n", p.step,
                active.empty() ? "no promotion is in force now"
                               : strfmt("step %ld (%s) is the promoted one now", active.back().step,
                                        active.back().file.c_str())
                                     .c_str());
    return 0;
}

int promotions(int argc, char** argv) {
    std::string path;
    po::options_description desc;
    desc.add_options()("file", po::value(&path));
    parse_subcommand(argc, argv, desc, {"file"});
    if (path.empty()) throw po::error("give the run or checkpoint directory");
    bool has_log = false;
    const std::vector<Promotion> active = read_promotions(checkpoint_dir_of(path), &has_log);
    for (const Promotion& p : active)
        std::printf("step %ld | %s | promoted %s | %s | %s\n", p.step, p.file.c_str(),
                    iso_time(p.time).c_str(), p.by.c_str(), p.reason.c_str());
    std::printf("%s\n", !has_log ? "no promotions: servers follow the newest checkpoint"
                         : active.empty() ? "no promotion in force"
                                          : strfmt("newest promotion: step %ld (canary replicas serve it; stable ones "
                                                   "once it has been promoted for --canary-seconds)",
                                                   active.back().step)
                                                .c_str());
    return 0;
}

// From a checkpoint (file or directory) or Hugging Face's layout (model.safetensors or its directory).
void load_model(std::string path, GptConfig* cfg, std::vector<float>* params) {
    struct stat st;
    const bool dir = ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    const bool hf = (dir && (::stat((path + "/model.safetensors").c_str(), &st) == 0 ||
                             (list_checkpoints(path).empty() && list_checkpoints(path + "/checkpoints").empty()))) ||
                    (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0);
    if (!hf) {
        CheckpointState ck = load_checkpoint_or_newest(&path, "");
        if (!parse_gpt_signature(ck.model, cfg))
            throw UserError(strfmt("%s holds %s; logits are for GPT checkpoints", path.c_str(), ck.model.c_str()));
        *params = std::move(ck.params);
        return;
    }
    const HfGpt2 h = find_hf_gpt2(path);
    if (h.config_file.empty())
        throw UserError(path + ": no config.json beside the weights; give the directory that holds both");
    *cfg = h.cfg;
    params->assign(lm_count_params(*cfg), 0.0f);
    std::string note;
    import_hf_gpt2(path, *cfg, params->data(), &note);
}

void write_npy(const std::string& path, const float* data, long rows, long cols) {
    std::string header = strfmt("{'descr': '<f4', 'fortran_order': False, 'shape': (%ld, %ld), }", rows, cols);
    header.append(64 - (10 + header.size() + 1) % 64, ' ');
    header += '\n';
    std::string out = std::string("\x93NUMPY\x01\x00", 8);
    out.push_back((char)(header.size() & 0xFF));
    out.push_back((char)(header.size() >> 8));
    out += header;
    out.append((const char*)data, (size_t)rows * cols * 4);
    write_file_atomically(path, out);
}

int logits(int argc, char** argv) {
    std::string file, list, out;
    po::options_description desc;
    desc.add_options()("file", po::value(&file))("tokens", po::value(&list))("out", po::value(&out));
    parse_subcommand(argc, argv, desc, {"file"});
    if (file.empty() || list.empty() || out.empty()) throw po::error("give the model, --tokens and --out");
    GptConfig cfg;
    std::vector<float> params;
    load_model(file, &cfg, &params);
    std::vector<int> ids;
    std::stringstream ss(list);
    for (std::string item; std::getline(ss, item, ',');) {
        char* end = nullptr;
        const long id = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end || id < 0 || id >= cfg.vocab_size)
            throw po::error(strfmt("--tokens: '%s' is not an id below the vocabulary size %d", item.c_str(),
                                   cfg.vocab_size));
        ids.push_back((int)id);
    }
    const int n = (int)ids.size(), T = cfg.block_size, V = cfg.vocab_size;
    if (n > T) throw po::error(strfmt("--tokens: %d ids, more than the block size %d", n, T));
    // Causal attention keeps the padding from the positions read.
    std::vector<int> window(T + 1, 0);
    std::copy(ids.begin(), ids.end(), window.begin());
    const std::unique_ptr<LanguageModel> lm = make_cpu_lm(cfg, 1);
    ModelBatch in;
    in.B = 1;
    in.tokens = window.data();
    in.stride = T + 1;
    lm->forward(params.data(), in, nullptr);
    write_npy(out, lm->logits(), n, V);
    std::printf("%s: logits of %d positions (vocabulary %d) -> %s\n", file.c_str(), n, V, out.c_str());
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    return run_tool("dptrain-ckpt", kUsage, argc, argv, [&] {
        const std::string cmd = argc > 1 ? argv[1] : "";
        if (cmd == "info") return info(argc - 1, argv + 1);
        if (cmd == "diff") return diff(argc - 1, argv + 1);
        if (cmd == "export") return export_model(argc - 1, argv + 1);
        if (cmd == "logits") return logits(argc - 1, argv + 1);
        if (cmd == "import") return import_model(argc - 1, argv + 1);
        if (cmd == "promote") return promote(argc - 1, argv + 1);
        if (cmd == "rollback") return rollback(argc - 1, argv + 1);
        if (cmd == "promotions") return promotions(argc - 1, argv + 1);
        throw po::error(cmd.empty() ? "no command given (info, diff, export, import, promote, rollback, promotions or "
                                      "logits)"
                                    : "not a command (info, diff, export, import, promote, rollback, promotions or "
                                      "logits)");
    });
}
