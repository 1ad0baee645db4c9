// The tokenizers behind tokenizer.h's interface, their stored names and tables. Not for: token
// shards (tokens.cpp), or GPT-2's BPE and SentencePiece themselves (bpe.cpp, sentencepiece.cpp).
#include "dptrain/data/tokenizer.h"

#include "dptrain/core/error.h"
#include "dptrain/core/utf8.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <sstream>

namespace dptrain {

namespace {

std::vector<uint32_t> code_points(const std::string& s) {
    std::vector<uint32_t> out;
    for (size_t i = 0; i < s.size();) {
        uint32_t cp;
        if (!next_code_point(s, &i, &cp, /*strict=*/true))
            throw UserError(strfmt("text is not valid UTF-8 at byte %zu: this tokenizer reads UTF-8 (for any bytes, make "
                                   "the data with dptrain-data text --tokenizer byte or gpt2)",
                                   i));
        out.push_back(cp);
    }
    return out;
}

struct KindName {
    TokenizerKind kind;
    const char* name;
};
const KindName kNames[] = {{TokenizerKind::byte, "byte"},
                           {TokenizerKind::chars, "char"},
                           {TokenizerKind::ids, "ids"},
                           {TokenizerKind::gpt2, "gpt2"},
                           {TokenizerKind::sentencepiece, "sentencepiece"},
                           {TokenizerKind::bpe, "bpe"}};

} // namespace

// ---- Kinds and their names

const char* name_of(TokenizerKind kind) {
    for (const KindName& k : kNames)
        if (k.kind == kind) return k.name;
    return "?";
}

bool parse_tokenizer_kind(const std::string& name, TokenizerKind* kind) {
    for (const KindName& k : kNames)
        if (name == k.name) {
            *kind = k.kind;
            return true;
        }
    return false;
}

TokenizerKind tokenizer_kind(const std::string& name) {
    TokenizerKind kind;
    if (!parse_tokenizer_kind(name, &kind))
        throw UserError(strfmt("tokenizer '%s' is unknown (byte, char, gpt2, bpe, sentencepiece or ids): a newer dptrain "
                               "wrote it?",
                               name.c_str()));
    return kind;
}

bool keeps_table(TokenizerKind kind) {
    return kind == TokenizerKind::chars || kind == TokenizerKind::gpt2 || kind == TokenizerKind::sentencepiece ||
           kind == TokenizerKind::bpe;
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
    std::vector<int> ids;
    encode_into(text, &ids);
    return ids;
}

const std::vector<int>& Tokenizer::sequence_prefix() const {
    static const std::vector<int> none;
    return none;
}

const std::vector<int>& Tokenizer::sequence_suffix() const { return sequence_prefix(); }  // none either

std::vector<int> Tokenizer::encode_prompt(const std::string& text) const {
    std::vector<int> ids = sequence_prefix();
    encode_into(text, &ids);
    return ids;
}

size_t Tokenizer::next_cut(const std::string& text, size_t from) const {
    size_t p = from;
    while (p < text.size() && !(p >= 2 && text[p - 1] == '\n')) ++p;
    return p;
}

// ---- byte

void ByteTokenizer::encode_into(const std::string& text, std::vector<int>* ids) const {
    for (unsigned char c : text) ids->push_back(c);
}

std::string ByteTokenizer::decode(const std::vector<int>& ids) const {
    std::string out;
    for (int id : ids) out += (char)(unsigned char)id;  // a padded vocabulary's ids wrap, as they always have
    return out;
}

bool ByteTokenizer::same_as(const Tokenizer& other) const { return other.kind() == TokenizerKind::byte; }

// ---- char

void CharTokenizer::encode_into(const std::string& text, std::vector<int>* ids) const {
    for (uint32_t cp : code_points(text)) {
        auto it = std::lower_bound(chars_.begin(), chars_.end(), cp);
        if (it == chars_.end() || *it != cp) {
            // By code: a raw newline would split the one-line message.
            std::string ch;
            append_utf8(ch, cp);
            const bool control = cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0);
            throw UserError(strfmt("character %s%s%sU+%04X%s is not in the model's vocabulary of %zu characters",
                                   control ? "" : "'", control ? "" : ch.c_str(), control ? "" : "' (", cp,
                                   control ? " (a control character)" : ")", chars_.size()));
        }
        ids->push_back((int)(it - chars_.begin()));
    }
}

std::string CharTokenizer::decode(const std::vector<int>& ids) const {
    std::string out;
    for (int id : ids)
        if (id >= 0 && id < (int)chars_.size()) append_utf8(out, chars_[(size_t)id]);
    return out;
}

int CharTokenizer::bytes_of(int id) const {
    if (id < 0 || id >= (int)chars_.size()) return 1;
    const uint32_t cp = chars_[(size_t)id];
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

std::string CharTokenizer::table() const {
    std::string out;
    for (uint32_t cp : chars_) append_utf8(out, cp);
    return out;
}

bool CharTokenizer::same_as(const Tokenizer& other) const {
    const auto* o = dynamic_cast<const CharTokenizer*>(&other);
    return o && o->chars_ == chars_;
}

// ---- ids

void IdsTokenizer::encode_into(const std::string& text, std::vector<int>* ids) const {
    std::istringstream in(text);
    std::string word;
    while (in >> word) {
        char* end = nullptr;
        errno = 0;
        const long v = std::strtol(word.c_str(), &end, 10);
        if (errno != 0 || *end != '\0' || v < 0 || v >= count_)
            throw UserError(strfmt("'%s' is not a token id in [0, %d): this model was trained on pre-tokenized "
                                   "ids, so give the prompt as ids (e.g. \"15496 11\")",
                                   word.c_str(), count_));
        ids->push_back((int)v);
    }
}

std::string IdsTokenizer::decode(const std::vector<int>& ids) const {
    std::string out;
    for (int id : ids) out += " " + std::to_string(id);
    return out;
}

bool IdsTokenizer::same_as(const Tokenizer& other) const {
    const auto* o = dynamic_cast<const IdsTokenizer*>(&other);
    return o && o->count_ == count_;
}

// ---- gpt2

std::string Gpt2Tokenizer::decode(const std::vector<int>& ids) const {
    std::string out;
    for (int id : ids)
        if (id >= 0 && id < bpe_->size()) out += bpe_->bytes_of(id);
    return out;
}

// <|endoftext|> separates documents, and the tokenizer.json form's special tokens mark them: none
// is their text.
int Gpt2Tokenizer::bytes_of(int id) const {
    return id >= 0 && id < bpe_->size() && !bpe_->is_special(id) ? (int)bpe_->bytes_of(id).size() : 0;
}

// The table is compared only when the models differ: it is about 1 MB.
bool Gpt2Tokenizer::same_as(const Tokenizer& other) const {
    const auto* o = dynamic_cast<const Gpt2Tokenizer*>(&other);
    return o && (o->bpe_ == bpe_ || o->bpe_->table() == bpe_->table());
}

// Only between visible ASCII characters does GPT-2's regex always split at a newline.
size_t Gpt2Tokenizer::next_cut(const std::string& text, size_t from) const {
    auto visible = [&](size_t i) { return text[i] > ' ' && text[i] < 0x7F; };
    size_t p = from;
    while (p < text.size() && !(p >= 2 && text[p - 1] == '\n' && visible(p - 2) && visible(p))) ++p;
    return p;
}

std::vector<TokenizerFile> Gpt2Tokenizer::hf_files() const {
    if (bpe_->json_form()) return {{"tokenizer.json", bpe_->tokenizer_json()}};
    return {{"vocab.json", bpe_->encoder_json() + "\n"}, {"merges.txt", bpe_->merges_text()}};
}

// ---- sentencepiece

std::string SentencePieceTokenizer::decode(const std::vector<int>& ids) const {
    std::string out;
    for (int id : ids)
        if (id >= 0 && id < sp_->size()) out += sp_->surface(id);
    return out;
}

int SentencePieceTokenizer::bytes_of(int id) const {
    return id >= 0 && id < sp_->size() ? (int)sp_->surface(id).size() : 0;
}

bool SentencePieceTokenizer::same_as(const Tokenizer& other) const {
    const auto* o = dynamic_cast<const SentencePieceTokenizer*>(&other);
    return o && (o->sp_ == sp_ || o->sp_->bytes() == sp_->bytes());
}

// Never cut a model that does not encode line by line.
size_t SentencePieceTokenizer::next_cut(const std::string& text, size_t from) const {
    return sp_->lines_alone() ? Tokenizer::next_cut(text, from) : text.size();
}

// ---- Makers

TokenizerPtr tokenizer_from(TokenizerKind kind, const std::string& table) {
    switch (kind) {
    case TokenizerKind::byte:
        return make_byte_tokenizer();
    case TokenizerKind::chars: {
        // Leniently: older tables may hold surrogates or overlong forms, and must still load.
        std::vector<uint32_t> chars;
        for (size_t i = 0; i < table.size();) {
            uint32_t cp;
            if (!next_code_point(table, &i, &cp, /*strict=*/false))
                throw UserError(strfmt("the stored character table is not UTF-8 at byte %zu (a damaged file?)", i));
            chars.push_back(cp);
        }
        if (!std::is_sorted(chars.begin(), chars.end()))
            throw UserError("character vocabulary table is not in code-point order");
        return std::make_shared<const CharTokenizer>(std::move(chars));
    }
    case TokenizerKind::ids: {
        char* end = nullptr;
        const long n = std::strtol(table.c_str(), &end, 10);
        if (table.empty() || *end != '\0' || n < 1 || n > INT32_MAX)
            throw UserError(strfmt("tokenizer 'ids' needs its vocabulary size, not '%s'", table.c_str()));
        return make_ids_tokenizer((int)n);
    }
    case TokenizerKind::gpt2:
    case TokenizerKind::bpe: {
        auto bpe = Gpt2Bpe::from_table(table);
        if (bpe->json_form() != (kind == TokenizerKind::bpe))
            throw UserError(strfmt("the stored %s tokenizer's table is of the other BPE form (a damaged file?)",
                                   name_of(kind)));
        return make_gpt2_tokenizer(std::move(bpe));
    }
    case TokenizerKind::sentencepiece:
        return make_sentencepiece_tokenizer(SentencePieceModel::from_bytes(table, "the stored SentencePiece model"));
    }
    throw UserError("tokenizer of no known kind");  // unreachable
}

TokenizerPtr tokenizer_from(const std::string& kind, const std::string& table) {
    return tokenizer_from(tokenizer_kind(kind), table);
}

TokenizerPtr make_byte_tokenizer() {
    static const TokenizerPtr byte = std::make_shared<const ByteTokenizer>();
    return byte;
}

std::shared_ptr<const CharTokenizer> make_char_tokenizer(const std::string& text) {
    const std::vector<uint32_t> cps = code_points(text);
    const std::set<uint32_t> seen(cps.begin(), cps.end());
    return std::make_shared<const CharTokenizer>(std::vector<uint32_t>(seen.begin(), seen.end()));
}

std::shared_ptr<const IdsTokenizer> make_ids_tokenizer(int count) { return std::make_shared<const IdsTokenizer>(count); }

std::shared_ptr<const Gpt2Tokenizer> make_gpt2_tokenizer(const std::string& encoder_path, const std::string& merges_path) {
    return make_gpt2_tokenizer(Gpt2Bpe::load(encoder_path, merges_path));
}

std::shared_ptr<const Gpt2Tokenizer> make_gpt2_tokenizer(std::shared_ptr<const Gpt2Bpe> bpe) {
    return std::make_shared<const Gpt2Tokenizer>(std::move(bpe));
}

std::shared_ptr<const SentencePieceTokenizer> make_sentencepiece_tokenizer(std::shared_ptr<const SentencePieceModel> model) {
    return std::make_shared<const SentencePieceTokenizer>(std::move(model));
}

} // namespace dptrain
