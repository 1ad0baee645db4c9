// Hugging Face's tokenizer.json for a byte-level BPE (Llama 3's, Qwen2's, GPT-2's own): read into a
// Gpt2Bpe of the tokenizer.json form, and written back for an export. Not for: encoding (bpe.cpp).
#include "dptrain/data/bpe.h"

#include "dptrain/core/error.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dptrain {

namespace {

using Json = nlohmann::json;

std::string type_of(const Json& j) {
    const auto t = j.find("type");
    return j.is_object() && t != j.end() && t->is_string() ? t->get<std::string>() : std::string();
}

bool flag(const Json& j, const char* key, bool def) {
    const auto it = j.find(key);
    return it != j.end() && it->is_boolean() ? it->get<bool>() : def;
}

// A ByteLevel step: no prefix space; *regex: whether it splits by GPT-2's regex itself.
void byte_level(const std::string& where, const Json& j, bool* regex) {
    if (flag(j, "add_prefix_space", false))
        throw UserError(where + ": the ByteLevel pre-tokenizer adds a prefix space; dptrain's BPE encodes the text as "
                                "it is (add_prefix_space false)");
    *regex = flag(j, "use_regex", true);
}

// The pre-tokenizer's pattern: ByteLevel alone (GPT-2's), or Split(Regex, Isolated) then ByteLevel.
std::string read_pattern(const std::string& where, const Json& pre) {
    bool regex = false;
    if (type_of(pre) == "ByteLevel") {
        byte_level(where, pre, &regex);
        if (!regex) throw UserError(where + ": a ByteLevel pre-tokenizer without its regex splits nothing");
        return gpt2_pretokenizer_pattern();
    }
    const auto steps = pre.find("pretokenizers");
    if (type_of(pre) != "Sequence" || steps == pre.end() || !steps->is_array() || steps->size() != 2)
        throw UserError(strfmt("%s: pre_tokenizer %s; dptrain reads ByteLevel, or a Sequence of a Split by a regex and "
                               "a ByteLevel (Llama 3's and Qwen2's)",
                               where.c_str(), type_of(pre).empty() ? "is missing" : ("\"" + type_of(pre) + "\"").c_str()));
    const Json& split = (*steps)[0];
    const auto pat = split.find("pattern");
    if (type_of(split) != "Split" || pat == split.end() || !pat->is_object() || !pat->contains("Regex") ||
        !(*pat)["Regex"].is_string())
        throw UserError(where + ": the pre_tokenizer's first step must be a Split by a Regex pattern");
    const auto behavior = split.find("behavior");
    if (behavior == split.end() || *behavior != "Isolated" || flag(split, "invert", false))
        throw UserError(where + ": the Split must keep each match as a piece of its own (behavior \"Isolated\", "
                                "invert false)");
    if (type_of((*steps)[1]) != "ByteLevel")
        throw UserError(where + ": the pre_tokenizer's second step must be ByteLevel");
    byte_level(where, (*steps)[1], &regex);
    if (regex) throw UserError(where + ": the ByteLevel after a Split must not split again (use_regex false)");
    return (*pat)["Regex"].get<std::string>();
}

// model.merges: "a b" strings (older files) or [a, b] pairs (newer ones).
std::vector<std::string> read_merges(const std::string& where, const Json& merges) {
    std::vector<std::string> out;
    if (!merges.is_array()) throw UserError(where + ": model.merges must be a list");
    for (const Json& m : merges) {
        if (m.is_string()) out.push_back(m.get<std::string>());
        else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string() &&
                 m[0].get<std::string>().find(' ') == std::string::npos)
            out.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
        else throw UserError(strfmt("%s: merge %zu is %s; a merge is \"a b\" or [\"a\", \"b\"]", where.c_str(),
                                    out.size() + 1, m.dump().c_str()));
    }
    return out;
}

// The ids around one sequence: a post_processor's, what Hugging Face's tokenizers add to each
// encoded text.
struct Around {
    std::vector<int> before, after;
    bool templated = false;
};

// Whether a template piece is the sequence $A (UserError for another sequence).
bool is_sequence_a(const std::string& where, const Json& piece) {
    const auto seq = piece.is_object() ? piece.find("Sequence") : piece.end();
    if (!piece.is_object() || seq == piece.end()) return false;
    const auto id = seq->is_object() ? seq->find("id") : seq->end();
    if (!seq->is_object() || id == seq->end() || *id != "A")
        throw UserError(where + ": the post_processor's single template must hold the sequence $A once");
    return true;
}

// A template piece's SpecialToken name; "" where it is none.
std::string special_name(const Json& piece) {
    const auto sp = piece.is_object() ? piece.find("SpecialToken") : piece.end();
    if (!piece.is_object() || sp == piece.end() || !sp->is_object()) return "";
    const auto id = sp->find("id");
    return id != sp->end() && id->is_string() ? id->get<std::string>() : "";
}

// The ids a TemplateProcessing's special_tokens lists for `name`.
std::vector<int> special_ids(const std::string& where, const Json& pp, const std::string& name) {
    const auto specials = pp.find("special_tokens");
    const Json* entry = specials != pp.end() && specials->is_object() && specials->contains(name) ? &(*specials)[name]
                                                                                                  : nullptr;
    const auto ids = entry && entry->is_object() ? entry->find("ids") : Json::const_iterator();
    if (!entry || !entry->is_object() || ids == entry->end() || !ids->is_array())
        throw UserError(strfmt("%s: the post_processor's template names the special token %s, which its "
                               "special_tokens do not list with ids",
                               where.c_str(), Json(name).dump().c_str()));
    std::vector<int> out;
    for (const Json& id : *ids) {
        if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > INT32_MAX)
            throw UserError(strfmt("%s: the post_processor's special token %s has id %s", where.c_str(),
                                   Json(name).dump().c_str(), id.dump().c_str()));
        out.push_back(id.get<int>());
    }
    return out;
}

// A TemplateProcessing's single template: its special tokens before and after the sequence $A.
void read_template(const std::string& where, const Json& pp, Around* out) {
    if (out->templated) throw UserError(where + ": the post_processor holds two TemplateProcessing steps; dptrain reads one");
    out->templated = true;
    const auto single = pp.find("single");
    if (single == pp.end() || !single->is_array())
        throw UserError(where + ": the TemplateProcessing post_processor has no \"single\" template");
    bool seen = false;
    for (const Json& piece : *single) {
        if (is_sequence_a(where, piece)) {
            if (seen) throw UserError(where + ": the post_processor's single template must hold the sequence $A once");
            seen = true;
            continue;
        }
        const std::string name = special_name(piece);
        if (name.empty())
            throw UserError(strfmt("%s: post_processor template piece %s; dptrain reads SpecialToken and Sequence $A",
                                   where.c_str(), piece.dump().c_str()));
        const std::vector<int> ids = special_ids(where, pp, name);
        std::vector<int>& to = seen ? out->after : out->before;
        to.insert(to.end(), ids.begin(), ids.end());
    }
    if (!seen) throw UserError(where + ": the post_processor's single template must hold the sequence $A once");
}

// post_processor: null or ByteLevel (offsets only) put no ids around a sequence; TemplateProcessing
// its template's; a Sequence of these, in order. Others (Bert's, Roberta's) are refused.
void read_post_processor(const std::string& where, const Json& pp, Around* out) {
    const std::string type = type_of(pp);
    if (pp.is_null() || type == "ByteLevel") return;
    if (type == "TemplateProcessing") return read_template(where, pp, out);
    const auto steps = pp.find("processors");
    if (type == "Sequence" && steps != pp.end() && steps->is_array()) {
        for (const Json& step : *steps) read_post_processor(where, step, out);
        return;
    }
    throw UserError(strfmt("%s: post_processor %s; dptrain reads TemplateProcessing (ids around a sequence), "
                           "ByteLevel, or a Sequence of them",
                           where.c_str(), type.empty() ? pp.dump().c_str() : ("\"" + type + "\"").c_str()));
}

// The settings of a BPE model and the file that dptrain computes otherwise than Hugging Face: refused.
void check_settings(const std::string& where, const Json& j, const Json& model) {
    if (flag(model, "byte_fallback", false))
        throw UserError(where + ": model.byte_fallback is true (a SentencePiece-style BPE); dptrain reads byte-level "
                                "BPEs; for Llama 2's tokenizer give its tokenizer.model (--tokenizer sentencepiece)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const auto it = model.find(key);
        if (it != model.end() && it->is_string() && !it->get<std::string>().empty())
            throw UserError(strfmt("%s: model.%s is set; a byte-level BPE has none", where.c_str(), key));
    }
    const auto norm = j.find("normalizer");
    if (norm != j.end() && !norm->is_null())
        throw UserError(strfmt("%s: normalizer \"%s\"; dptrain's BPE encodes the text as it is (normalizer null)",
                               where.c_str(), type_of(*norm).c_str()));
}

// model.vocab: token -> id, the ids 0..n-1 each once.
std::vector<std::string> read_vocab(const std::string& where, const Json& model) {
    const auto vocab = model.find("vocab");
    if (vocab == model.end() || !vocab->is_object() || vocab->empty())
        throw UserError(where + ": model.vocab must be an object of token -> id");
    std::vector<std::string> tokens(vocab->size());
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
        const Json& v = it.value();
        if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() >= (long long)tokens.size() ||
            !tokens[v.get<size_t>()].empty() || it.key().empty())
            throw UserError(strfmt("%s: token \"%s\" has id %s; the ids must be 0..%zu, each once", where.c_str(),
                                   it.key().c_str(), v.dump().c_str(), tokens.size() - 1));
        tokens[v.get<size_t>()] = it.key();
    }
    return tokens;
}

// added_tokens: (id, content) each.
std::vector<std::pair<int, std::string>> read_added(const std::string& where, const Json& j) {
    std::vector<std::pair<int, std::string>> out;
    const auto added = j.find("added_tokens");
    if (added != j.end() && added->is_array())
        for (const Json& a : *added) {
            const auto id = a.find("id"), content = a.find("content");
            if (!a.is_object() || id == a.end() || !id->is_number_integer() || content == a.end() ||
                !content->is_string() || content->get<std::string>().empty() || id->get<long long>() < 0 ||
                id->get<long long>() > INT32_MAX)
                throw UserError(strfmt("%s: added token %s needs an id and a non-empty content", where.c_str(),
                                       a.dump().c_str()));
            out.emplace_back(id->get<int>(), content->get<std::string>());
        }
    return out;
}

} // namespace

std::shared_ptr<const Gpt2Bpe> Gpt2Bpe::parse_tokenizer_json(const std::string& text, const std::string& where) {
    Json j;
    try {
        j = Json::parse(text);
    } catch (const Json::exception& e) {
        throw UserError(strfmt("%s: not JSON (%s)", where.c_str(), e.what()));
    }
    const auto model = j.is_object() ? j.find("model") : j.end();
    if (!j.is_object() || model == j.end() || type_of(*model) != "BPE")
        throw UserError(strfmt("%s: model.type is %s; dptrain reads byte-level BPE tokenizers (\"BPE\")", where.c_str(),
                               !j.is_object() || model == j.end() ? "missing" : ("\"" + type_of(*model) + "\"").c_str()));
    check_settings(where, j, *model);
    const auto pre = j.find("pre_tokenizer");
    JsonForm form;
    form.pattern = read_pattern(where, pre == j.end() ? Json() : *pre);
    form.ignore_merges = flag(*model, "ignore_merges", false);
    form.specials = read_added(where, j);
    Around around;
    const auto post = j.find("post_processor");
    if (post != j.end()) read_post_processor(where, *post, &around);
    form.prefix = std::move(around.before);
    form.suffix = std::move(around.after);
    std::vector<std::string> tokens = read_vocab(where, *model);
    const auto merges = model->find("merges");
    return build(std::move(tokens), read_merges(where, merges == model->end() ? Json::array() : *merges), where, &form);
}

std::shared_ptr<const Gpt2Bpe> Gpt2Bpe::load_tokenizer_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream all;
    if (in) all << in.rdbuf();
    if (!in || in.bad())
        throw UserError(strfmt("--tokenizer-json %s: cannot read: %s", path.c_str(), std::strerror(errno)));
    return parse_tokenizer_json(all.str(), path);
}

// The ids around a sequence as a TemplateProcessing (null without them); a pair's second sequence
// is wrapped the same way, as Llama 3's file does.
std::string Gpt2Bpe::post_processor_json() const {
    if (json_.prefix.empty() && json_.suffix.empty()) return "null";
    Json single = Json::array(), pair = Json::array(), specials = Json::object();
    auto special = [&](int id, int type) {
        const std::string name = id < (int)tokens_.size() ? tokens_[(size_t)id] : bytes_[(size_t)id];
        specials[name] = {{"id", name}, {"ids", Json::array({id})}, {"tokens", Json::array({name})}};
        return Json{{"SpecialToken", {{"id", name}, {"type_id", type}}}};
    };
    for (int type = 0; type < 2; ++type) {
        Json& t = type == 0 ? single : pair;
        for (int seq = 0; seq <= type; ++seq) {
            for (int id : json_.prefix) t.push_back(special(id, seq));
            t.push_back({{"Sequence", {{"id", seq == 0 ? "A" : "B"}, {"type_id", seq}}}});
            for (int id : json_.suffix) t.push_back(special(id, seq));
        }
    }
    return Json{{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}}
        .dump();
}

// By hand for the vocabulary (ordered_json's lookups are quadratic in it, as encoder_json says).
std::string Gpt2Bpe::tokenizer_json() const {
    Json added = Json::array();
    for (const auto& [id, content] : json_.specials)
        added.push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                         {"rstrip", false}, {"normalized", false}, {"special", true}});
    const Json pre = {{"type", "Sequence"},
                      {"pretokenizers",
                       Json::array({{{"type", "Split"},
                                     {"pattern", {{"Regex", json_form_ ? json_.pattern : std::string(gpt2_pretokenizer_pattern())}}},
                                     {"behavior", "Isolated"},
                                     {"invert", false}},
                                    {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", true},
                                     {"use_regex", false}}})}};
    std::string out = "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":" + added.dump() +
                      ",\"normalizer\":null,\"pre_tokenizer\":" + pre.dump() +
                      ",\"post_processor\":" + post_processor_json() + ",\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,"
                      "\"trim_offsets\":true,\"use_regex\":true},\"model\":{\"type\":\"BPE\",\"dropout\":null,"
                      "\"unk_token\":null,\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,"
                      "\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":" +
                      std::string(json_.ignore_merges ? "true" : "false") + ",\"vocab\":" + encoder_json() +
                      ",\"merges\":[";
    for (size_t i = 0; i < merges_.size(); ++i) out += (i ? "," : "") + Json(merges_[i]).dump();
    return out + "]}}\n";
}

} // namespace dptrain
