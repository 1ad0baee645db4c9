// GPT-2 in Hugging Face's layout: names, orientation, config.json, and the checks of an import.
// Not for: writing an export (hf_gpt2_export.cpp) or the safetensors format (safetensors.cpp).
#include "dptrain/io/hf_gpt2.h"

#include "dptrain/core/error.h"
#include "dptrain/core/json.h"
#include "dptrain/data/bpe.h"
#include "dptrain/data/tokenizer.h"
#include "dptrain/io/hf_llama.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

namespace dptrain {

namespace {

struct Rename {
    const char* ours;
    const char* hf;
    bool transposed;  // Conv1D: (in, out)
};
const Rename kBlock[] = {
    {"ln1.weight", "ln_1.weight", false},        {"ln1.bias", "ln_1.bias", false},
    {"attn.qkv.weight", "attn.c_attn.weight", true}, {"attn.qkv.bias", "attn.c_attn.bias", false},
    {"attn.proj.weight", "attn.c_proj.weight", true}, {"attn.proj.bias", "attn.c_proj.bias", false},
    {"ln2.weight", "ln_2.weight", false},        {"ln2.bias", "ln_2.bias", false},
    {"mlp.fc.weight", "mlp.c_fc.weight", true},  {"mlp.fc.bias", "mlp.c_fc.bias", false},
    {"mlp.proj.weight", "mlp.c_proj.weight", true}, {"mlp.proj.bias", "mlp.c_proj.bias", false},
};

bool is_dir(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0;
}

} // namespace

std::string hf_shape_text(const std::vector<int64_t>& s) {
    std::string t;
    for (int64_t d : s) t += (t.empty() ? "" : " x ") + std::to_string(d);
    return t.empty() ? "scalar" : t;
}

namespace {

std::string shape_text(const std::vector<int64_t>& s) { return hf_shape_text(s); }

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

} // namespace

int hf_config_int(const std::string& path, const Json& c, const char* key, const char* alt, bool need) {
    auto it = c.find(key);
    if (it == c.end() && alt) it = c.find(alt);
    if ((it == c.end() || it->is_null()) && !need) return 0;
    if (it == c.end() || !it->is_number_integer() || it->get<long>() <= 0 || it->get<long>() > (1L << 30))
        throw UserError(strfmt("%s: \"%s\" must be a positive integer", path.c_str(), key));
    return it->get<int>();
}

namespace {

int config_int(const std::string& path, const Json& c, const char* key, const char* alt, bool need) {
    return hf_config_int(path, c, key, alt, need);
}

std::string config_text(const Json& c, const char* key) {
    auto it = c.find(key);
    return it != c.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// At its GPT-2 value, or refused.
void config_flag(const std::string& path, const Json& c, const char* key, bool gpt2, const char* what) {
    auto it = c.find(key);
    if (it != c.end() && it->is_boolean() && it->get<bool>() != gpt2)
        throw UserError(strfmt("%s: %s is %s; dptrain's GPT %s", path.c_str(), key, gpt2 ? "false" : "true", what));
}

// Settings that change the arithmetic must be at the values dptrain's GPT computes, or refused.
void check_arithmetic(const std::string& path, const Json& c) {
    const std::string type = config_text(c, "model_type"), act = config_text(c, "activation_function");
    if (!type.empty() && type != "gpt2")
        throw UserError(strfmt("%s: model_type is \"%s\"; dptrain imports GPT-2 (\"gpt2\") models", path.c_str(),
                               type.c_str()));
    if (!act.empty() && act != "gelu_new" && act != "gelu_pytorch_tanh")
        throw UserError(strfmt("%s: activation_function \"%s\"; dptrain's GPT computes GELU's tanh form (\"gelu_new\")",
                               path.c_str(), act.c_str()));
    auto eps = c.find("layer_norm_epsilon");
    if (eps != c.end() && (!eps->is_number() || std::fabs(eps->get<double>() - 1e-5) > 1e-9))
        throw UserError(path + ": layer_norm_epsilon is not 1e-5, the epsilon of dptrain's LayerNorm");
    auto tie = c.find("tie_word_embeddings");
    if (tie != c.end() && *tie == false)
        throw UserError(path + ": tie_word_embeddings is false; dptrain's LM head is the token embedding (tied)");
    config_flag(path, c, "scale_attn_weights", true, "scales attention scores by 1/sqrt(head size), as GPT-2 does");
    config_flag(path, c, "scale_attn_by_inverse_layer_idx", false, "does not scale attention by 1/(layer + 1)");
    config_flag(path, c, "add_cross_attention", false, "has no cross-attention");
}

void read_named_tokenizer(const Json& c, TokenizerId* named) {
    auto ours = c.find("dptrain");
    if (ours == c.end() || !ours->is_object()) return;
    auto kind = ours->find("tokenizer"), vocab = ours->find("vocab");
    if (kind != ours->end() && kind->is_string()) named->kind = kind->get<std::string>();
    if (vocab != ours->end() && vocab->is_string()) named->table = vocab->get<std::string>();
}

// Anything dptrain's GPT does not compute is refused by name.
void read_config(const std::string& path, GptConfig* cfg, TokenizerId* named) {
    Json c;
    try {
        c = parse_json(read_bytes(path));
    } catch (const JsonError& e) {
        throw UserError(strfmt("%s: not valid JSON (%s)", path.c_str(), e.what()));
    }
    if (!c.is_object()) throw UserError(path + ": not a JSON object");
    read_named_tokenizer(c, named);
    if (is_hf_llama(c)) {
        *cfg = read_hf_llama_config(path, c);
        return;
    }
    check_arithmetic(path, c);
    cfg->vocab_size = config_int(path, c, "vocab_size", nullptr, true);
    cfg->block_size = config_int(path, c, "n_positions", "n_ctx", true);
    cfg->n_embd = config_int(path, c, "n_embd", nullptr, true);
    cfg->n_layer = config_int(path, c, "n_layer", nullptr, true);
    cfg->n_head = config_int(path, c, "n_head", nullptr, true);
    const int inner = config_int(path, c, "n_inner", nullptr, false);
    if (inner != 0 && inner != 4 * cfg->n_embd)
        throw UserError(strfmt("%s: n_inner %d; dptrain's MLP is 4 x n_embd = %d wide", path.c_str(), inner,
                               4 * cfg->n_embd));
}

} // namespace

void hf_gpt2_transpose(const float* src, long rows, long cols, float* dst) {
    for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

std::string hf_gpt2_name(const std::string& ours, bool* transposed) {
    *transposed = false;
    if (ours == "wte" || ours == "wpe") return ours + ".weight";
    if (ours == "lnf.weight") return "ln_f.weight";
    if (ours == "lnf.bias") return "ln_f.bias";
    const size_t dot = ours.find('.');
    if (ours.size() > 1 && ours[0] == 'h' && dot != std::string::npos) {
        const std::string rest = ours.substr(dot + 1);
        for (const Rename& r : kBlock)
            if (rest == r.ours) {
                *transposed = r.transposed;
                return "h." + ours.substr(1, dot - 1) + "." + r.hf;
            }
    }
    throw std::invalid_argument("not a GPT parameter: " + ours);
}

HfGpt2 find_hf_gpt2(const std::string& path) {
    HfGpt2 h;
    if (is_dir(path)) {
        h.dir = path;
        h.file = path + "/model.safetensors";
        if (!exists(h.file))
            throw UserError(strfmt(
                "%s: no model.safetensors in the directory%s", path.c_str(),
                exists(path + "/model.safetensors.index.json")
                    ? " (weights sharded over several files are not read: save them as one, "
                      "model.save_pretrained(NEW_DIR, max_shard_size=\"100GB\"))"
                : exists(path + "/pytorch_model.bin")
                    ? "; its pytorch_model.bin (PyTorch's pickle) is not read: save the model as safetensors in a new "
                      "directory, model.save_pretrained(NEW_DIR, safe_serialization=True)"
                    : "; give a directory that dptrain-ckpt export wrote, or a .safetensors file"));
    } else {
        if (!exists(path)) throw UserError(path + ": no such file or directory");
        h.file = path;
        const size_t slash = path.rfind('/');
        h.dir = slash == std::string::npos ? "." : path.substr(0, slash);
    }
    if (exists(h.dir + "/config.json")) {
        h.config_file = h.dir + "/config.json";
        read_config(h.config_file, &h.cfg, &h.named);
    } else {
        h.cfg = GptConfig();
        h.cfg.vocab_size = h.cfg.block_size = h.cfg.n_layer = h.cfg.n_head = h.cfg.n_embd = 0;
    }
    return h;
}

namespace {

// A directory whose files disagree (an edited config, another export's) is refused as such,
// before it is compared with a run.
void check_config(const std::string& path, const HfGpt2& h, const SafeTensor& wte, const SafeTensor& wpe, int layers) {
    if (h.config_file.empty()) return;
    const GptConfig& f = h.cfg;
    std::string odd;
    if (f.vocab_size != wte.shape[0])
        odd = strfmt("vocab_size %d, but wte.weight is %s", f.vocab_size, shape_text(wte.shape).c_str());
    else if (f.n_embd != wte.shape[1])
        odd = strfmt("n_embd %d, but wte.weight is %s", f.n_embd, shape_text(wte.shape).c_str());
    else if (f.n_layer != layers)
        odd = strfmt("n_layer %d, but the tensors hold %d layers", f.n_layer, layers);
    else if (f.block_size != wpe.shape[0])
        odd = strfmt("n_positions %d, but wpe.weight is %s", f.block_size, shape_text(wpe.shape).c_str());
    if (!odd.empty())
        throw UserError(strfmt("%s says %s (%s): the directory's files disagree; export the model again, or mend "
                               "config.json",
                               h.config_file.c_str(), odd.c_str(), path.c_str()));
}

void check_shapes(const std::string& path, const Safetensors& st, HfGpt2& h, const GptConfig& run) {
    const SafeTensor* wte = st.find(h.prefix + "wte.weight");
    const SafeTensor* wpe = st.find(h.prefix + "wpe.weight");
    if (!wte || !wpe || wte->shape.size() != 2 || wpe->shape.size() != 2)
        throw UserError(strfmt("%s: wte.weight and wpe.weight must be matrices; not a GPT-2 in Hugging Face's layout",
                               path.c_str()));
    int layers = 0;
    while (st.find(h.prefix + "h." + std::to_string(layers) + ".ln_1.weight")) ++layers;
    check_config(path, h, *wte, *wpe, layers);
    const char* where = path.c_str();
    if (wte->shape[0] != run.vocab_size)
        throw UserError(strfmt("%s: the model's vocabulary is %lld (wte %s), this run's is %d (the data's "
                               "tokenizer, or --vocab-size); fine-tune on data tokenized with the model's own "
                               "vocabulary",
                               where, (long long)wte->shape[0], shape_text(wte->shape).c_str(), run.vocab_size));
    if (wte->shape[1] != run.n_embd)
        throw UserError(strfmt("%s: the model has n_embd %lld; this run has --n-embd %d", where,
                               (long long)wte->shape[1], run.n_embd));
    if (layers != run.n_layer)
        throw UserError(strfmt("%s: the model has %d layers; this run has --n-layer %d", where, layers, run.n_layer));
    if (h.cfg.n_head != 0 && h.cfg.n_head != run.n_head)
        throw UserError(strfmt("%s: the model has n_head %d; this run has --n-head %d", where, h.cfg.n_head,
                               run.n_head));
    if (wpe->shape[0] < run.block_size)
        throw UserError(strfmt("%s: the model has %lld positions; --block-size %d needs as many; use --block-size %lld "
                               "or less",
                               where, (long long)wpe->shape[0], run.block_size, (long long)wpe->shape[0]));
}

// For a refusal: how to make data with the directory's tokenizer; "" when it has no files.
std::string remake_hint(TokenizerKind kind, const std::string& dir) {
    switch (kind) {
    case TokenizerKind::gpt2:
        return strfmt(" (dptrain-data text --tokenizer gpt2 --encoder %s/vocab.json --merges %s/merges.txt; from ids: "
                      "dptrain-data tokens with the same --encoder and --merges)",
                      dir.c_str(), dir.c_str());
    case TokenizerKind::sentencepiece:
        return strfmt(" (dptrain-data text --tokenizer sentencepiece --sp-model %s/tokenizer.model)", dir.c_str());
    case TokenizerKind::bpe:
        return strfmt(" (dptrain-data text --tokenizer bpe --tokenizer-json %s/tokenizer.json)", dir.c_str());
    case TokenizerKind::byte:
    case TokenizerKind::chars:
    case TokenizerKind::ids:
        break;
    }
    return "";
}

} // namespace

std::string check_hf_tokenizer(const std::string& path, const HfGpt2& h, const TokenizerId& run) {
    if (run.kind.empty()) return "";
    const TokenizerId theirs = tokenizer_beside(h);
    if (theirs.kind.empty() || (theirs.kind == run.kind && theirs.table == run.table)) return "";
    TokenizerKind run_kind, their_kind;
    const bool run_known = parse_tokenizer_kind(run.kind, &run_kind);
    const bool their_known = parse_tokenizer_kind(theirs.kind, &their_kind);
    if (run_known && run_kind == TokenizerKind::ids)
        return strfmt("the data's ids, which name no tokenizer, taken as the model's %s ids", theirs.kind.c_str());
    if (their_known && their_kind == TokenizerKind::ids)
        return strfmt("the model's ids, which name no tokenizer, taken as the data's %s ids", run.kind.c_str());
    const std::string how = their_known ? remake_hint(their_kind, h.dir) : std::string();
    throw UserError(strfmt("%s: the model was trained on %s tokens, the run's data holds %s tokens%s: its ids would "
                           "stand for other text; fine-tune on data tokenized with the model's own tokenizer%s",
                           path.c_str(), theirs.kind.c_str(), run.kind.c_str(),
                           theirs.kind == run.kind ? " of another table" : "", how.c_str()));
}

namespace {

// "" (GPT2Model's state) or "transformer." (GPT2LMHeadModel's).
std::string tensor_prefix(const std::string& file, const Safetensors& st) {
    if (st.find("wte.weight")) return "";
    if (st.find("transformer.wte.weight")) return "transformer.";
    throw UserError(file + ": no tensor wte.weight; not a GPT-2 in Hugging Face's layout");
}

// Transposed from Conv1D where it is one; the position table cropped to the run's block size.
// Returns the names read.
std::set<std::string> copy_tensors(const HfGpt2& h, const Safetensors& st, const Gpt& gpt, float* params) {
    std::set<std::string> used;
    std::vector<float> tmp;
    for (const ParamView& v : gpt.layout().views) {
        bool tr = false;
        const std::string name = h.prefix + hf_gpt2_name(v.name, &tr);
        const SafeTensor* t = st.find(name);
        std::vector<int64_t> want(v.shape.begin(), v.shape.end());
        if (tr) std::swap(want[0], want[1]);
        std::vector<int64_t> have = t ? t->shape : std::vector<int64_t>();
        if (v.name == "wpe" && t && have.size() == 2 && have[0] >= want[0]) have[0] = want[0];  // cropped below
        if (!t || have != want)
            throw UserError(strfmt("%s: tensor %s %s; this run's GPT needs %s", h.file.c_str(),
                                   name.c_str(), t ? ("is " + shape_text(t->shape)).c_str() : "is missing",
                                   shape_text(want).c_str()));
        tmp.resize(t->count());
        st.to_float(*t, tmp.data());
        if (tr) hf_gpt2_transpose(tmp.data(), want[0], want[1], params + v.offset);
        else std::copy(tmp.begin(), tmp.begin() + (long)v.size, params + v.offset);
        used.insert(name);
    }
    return used;
}

bool ends_with(const std::string& s, const std::string& end) {
    return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

// Tensors not read: GPT2LMHeadModel's tied head (taken when it equals wte) and older files'
// attention masks; anything else is refused.
void check_unused(const HfGpt2& h, const Safetensors& st, const std::set<std::string>& used, const float* wte,
                  int n_layer) {
    const std::string head = "lm_head.weight";  // never under "transformer."
    std::vector<float> tmp;
    for (const SafeTensor& t : st.tensors()) {
        if (used.count(t.name)) continue;
        if (ends_with(t.name, ".attn.bias") || ends_with(t.name, ".attn.masked_bias")) continue;
        if (t.name == head && t.shape == st.find(h.prefix + "wte.weight")->shape) {
            tmp.resize(t.count());
            st.to_float(t, tmp.data());
            if (std::equal(tmp.begin(), tmp.end(), wte)) continue;
            throw UserError(strfmt("%s: lm_head.weight differs from wte.weight; dptrain's LM head is the "
                                   "token embedding (tied), so an untied head cannot be imported",
                                   h.file.c_str()));
        }
        throw UserError(strfmt("%s: tensor %s is not part of a GPT-2 of %d layers", h.file.c_str(), t.name.c_str(),
                               n_layer));
    }
}

// "; "-separated: a cropped position table, a head count taken from the run, a tokenizer taken as
// the other side's.
std::string import_note(const HfGpt2& h, const Safetensors& st, const GptConfig& cfg, const std::string& taken) {
    std::string note;
    const SafeTensor* wpe = st.find(h.prefix + "wpe.weight");
    if (wpe->shape[0] > cfg.block_size)
        note = strfmt("position table cropped from %lld to --block-size %d", (long long)wpe->shape[0], cfg.block_size);
    if (h.cfg.n_head == 0)
        note += strfmt("%sno config.json beside it: --n-head %d assumed", note.empty() ? "" : "; ", cfg.n_head);
    if (!taken.empty()) note += (note.empty() ? "" : "; ") + taken;
    return note;
}

} // namespace

void import_hf_gpt2(const std::string& path, const GptConfig& cfg, float* params, std::string* note,
                    const TokenizerId& tokens) {
    HfGpt2 h = find_hf_gpt2(path);
    if (h.cfg.arch != cfg.arch) {
        const bool llama = cfg.arch == DecoderArch::llama;
        throw UserError(strfmt("%s: %s; this run is --model %s: %s", path.c_str(),
                               llama ? (h.config_file.empty() ? "no config.json beside the weights names a Llama"
                                                              : "its config.json names another model_type than llama")
                                     : "its config.json names a Llama (model_type llama)",
                               llama ? "llama" : "gpt",
                               llama ? "give the directory that holds both, or use --model gpt for GPT-2 weights"
                                     : "train it with --model llama"));
    }
    if (cfg.arch == DecoderArch::llama) return import_hf_llama(h, cfg, params, note, tokens);
    const Safetensors st = Safetensors::read_file(h.file);
    h.prefix = tensor_prefix(h.file, st);
    check_shapes(h.file, st, h, cfg);
    const std::string taken = check_hf_tokenizer(h.file, h, tokens);
    const Gpt gpt(cfg, 0);
    const std::set<std::string> used = copy_tensors(h, st, gpt, params);
    check_unused(h, st, used, params + gpt.layout().find("wte").offset, cfg.n_layer);
    *note = import_note(h, st, cfg, taken);
}

TokenizerId tokenizer_beside(const HfGpt2& h) {
    const std::string vocab = h.dir + "/vocab.json", merges = h.dir + "/merges.txt", spm = h.dir + "/tokenizer.model";
    const std::string json = h.dir + "/tokenizer.json";
    const bool bpe_files = exists(vocab) && exists(merges);
    TokenizerId t = h.named;
    if (t.kind.empty() && bpe_files) t.kind = name_of(TokenizerKind::gpt2);
    if (t.kind.empty() && exists(json)) t.kind = name_of(TokenizerKind::bpe);
    TokenizerKind kind;
    if (!parse_tokenizer_kind(t.kind, &kind)) return t;  // unknown kind: compared as written
    if (kind == TokenizerKind::gpt2) t.table = bpe_files ? Gpt2Bpe::load(vocab, merges)->table() : std::string();
    if (kind == TokenizerKind::sentencepiece) t.table = exists(spm) ? read_bytes(spm) : std::string();
    if (kind == TokenizerKind::bpe) t.table = exists(json) ? Gpt2Bpe::load_tokenizer_json(json)->table() : std::string();
    return t;
}

} // namespace dptrain
