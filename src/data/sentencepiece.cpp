// SentencePiece through libsentencepiece: training, loading, encoding, and each piece's bytes.
// Not for: choosing a tokenizer (tokenizer.cpp).
#include "dptrain/data/sentencepiece.h"

#include "dptrain/core/error.h"
#include "dptrain/core/utf8.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace dptrain {

struct SentencePieceModel::Impl {
    sentencepiece::SentencePieceProcessor sp;
};

namespace {

// The trainer drops sentences over max_sentence_length, so a text of one long line left nothing.
constexpr size_t kSentenceMax = 4096;

size_t char_start(const std::string& s, size_t at) {
    while (at > 0 && at < s.size() && ((unsigned char)s[at] & 0xC0) == 0x80) --at;
    return at;
}

// The trainer reads sentences: a long line is cut after a space in its second half, else at a
// character's start.
class Lines : public sentencepiece::SentenceIterator {
  public:
    explicit Lines(const std::string& text) : text_(text) { Next(); }
    bool done() const override { return done_; }
    void Next() override {
        if (at_ >= text_.size()) {
            done_ = true;
            return;
        }
        size_t end = text_.find('\n', at_), next;
        if (end == std::string::npos) end = text_.size();
        if (end - at_ <= kSentenceMax) {
            next = end + 1;
        } else {
            const size_t space = text_.rfind(' ', at_ + kSentenceMax - 1);
            end = next = space != std::string::npos && space >= at_ + kSentenceMax / 2
                             ? space + 1
                             : char_start(text_, at_ + kSentenceMax);
        }
        line_.assign(text_, at_, end - at_);
        at_ = next;
    }
    const std::string& value() const override { return line_; }
    sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

  private:
    const std::string& text_;
    size_t at_ = 0;
    bool done_ = false;
    std::string line_;
};

size_t bad_utf8(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
        uint32_t cp;
        if (!next_code_point(s, &i, &cp)) return i;
    }
    return std::string::npos;
}

} // namespace

SentencePieceModel::~SentencePieceModel() = default;

std::shared_ptr<const SentencePieceModel> SentencePieceModel::from_bytes(const std::string& model,
                                                                         const std::string& where) {
    std::shared_ptr<SentencePieceModel> m(new SentencePieceModel());
    m->impl_ = std::make_unique<Impl>();
    std::string bad;
    try {
        const auto st = m->impl_->sp.LoadFromSerializedProto(model);
        if (!st.ok()) bad = st.ToString();
    } catch (const std::exception& e) {  // the library's checks throw (e.g. an empty piece)
        bad = e.what();
    }
    if (!bad.empty())
        throw UserError(strfmt("%s: not a SentencePiece model (%s); give a .model file that spm_train wrote",
                               where.c_str(), bad.c_str()));
    m->model_ = model;
    const auto& sp = m->impl_->sp;
    const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's mark for a space
    m->surface_.resize((size_t)sp.GetPieceSize());
    for (int id = 0; id < sp.GetPieceSize(); ++id) {
        std::string& s = m->surface_[(size_t)id];
        const std::string& piece = sp.IdToPiece(id);
        if (sp.IsByte(id)) {  // "<0x0A>"
            s = std::string(1, (char)std::stoi(piece.substr(3, 2), nullptr, 16));
        } else if (!sp.IsControl(id) && !sp.IsUnknown(id)) {
            for (size_t at = 0; at < piece.size();) {
                if (piece.compare(at, kSpace.size(), kSpace) == 0) s += ' ', at += kSpace.size();
                else s += piece[at++];
            }
        }
    }
    m->split_lines_ = m->lines_encode_alone();
    return m;
}

// Line by line is several times faster and gives the same ids when no piece holds a newline and
// there is no dummy prefix, as for every model dptrain trains; a model that splits these probes
// differently is encoded whole. Measured: docs/BENCHMARKS.md, "Tokenizers: encoding speed
// against their peers".
bool SentencePieceModel::lines_encode_alone() {
    auto ids = [&](const std::string& s) {
        std::vector<int> v;
        return impl_->sp.Encode(s, &v).ok() ? v : std::vector<int>{-1};
    };
    newline_ids_ = ids("\n");
    if (newline_ids_.size() != 1 || surface_[(size_t)std::max(0, newline_ids_[0])] != "\n") return false;
    for (int id = 0; id < size(); ++id)
        if (id != newline_ids_[0] && surface_[(size_t)id].find('\n') != std::string::npos) return false;
    for (const std::string probe : {"a\nb", " a \n b c", "\n\nx y\n", "x\n\n  \nz"}) {
        std::vector<int> split;
        for (size_t at = 0; at <= probe.size();) {
            const size_t nl = std::min(probe.find('\n', at), probe.size());
            const std::vector<int> line = nl > at ? ids(probe.substr(at, nl - at)) : std::vector<int>{};
            split.insert(split.end(), line.begin(), line.end());
            if (nl < probe.size()) split.push_back(newline_ids_[0]);
            at = nl + 1;
        }
        if (split != ids(probe)) return false;
    }
    return true;
}

std::shared_ptr<const SentencePieceModel> SentencePieceModel::load(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream all;
    if (in) all << in.rdbuf();
    if (!in) throw UserError(strfmt("--sp-model %s: cannot read", path.c_str()));
    return from_bytes(all.str(), "--sp-model " + path);
}

std::shared_ptr<const SentencePieceModel> SentencePieceModel::train(const std::string& text, size_t train_bytes,
                                                                    int vocab_size, const std::string& type,
                                                                    int threads) {
    const size_t bad = bad_utf8(text);
    if (bad != std::string::npos)
        throw UserError(strfmt("text is not valid UTF-8 at byte %zu; SentencePiece reads UTF-8 (--tokenizer byte or "
                               "gpt2 take any bytes)",
                               bad));
    const std::unordered_map<std::string, std::string> args = {
        {"model_type", type},
        {"vocab_size", std::to_string(vocab_size)},
        {"character_coverage", "1.0"},
        {"byte_fallback", "true"},
        {"normalization_rule_name", "identity"},
        {"remove_extra_whitespaces", "false"},
        {"add_dummy_prefix", "false"},
        {"allow_whitespace_only_pieces", "true"},
        {"split_digits", "true"},
        {"num_threads", std::to_string(threads)},
        {"minloglevel", "2"},  // training chatter off; errors come back as the status
    };
    // Cut at a line's end in its second half, else at a character's start.
    size_t end = train_bytes >= text.size() ? text.size() : text.rfind('\n', train_bytes);
    end = end == std::string::npos || end < train_bytes / 2 ? char_start(text, train_bytes)
                                                            : std::min(text.size(), end + 1);
    const std::string part = text.substr(0, end);
    Lines lines(part);
    std::string model;
    const auto st = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
    if (!st.ok())
        throw UserError(strfmt("SentencePiece training failed: %s (a smaller --vocab-size, or more text?)",
                               st.ToString().c_str()));
    return from_bytes(model, "the trained SentencePiece model");
}

void SentencePieceModel::encode(const std::string& text, std::vector<int>* ids) const {
    const size_t bad = bad_utf8(text);
    if (bad != std::string::npos)
        throw UserError(strfmt("text is not valid UTF-8 at byte %zu; the SentencePiece tokenizer reads UTF-8", bad));
    std::vector<int> out;
    auto piece = [&](const char* p, size_t n) {
        const auto st = impl_->sp.Encode(std::string(p, n), &out);
        if (!st.ok()) throw UserError(strfmt("SentencePiece could not encode the text: %s", st.ToString().c_str()));
        ids->insert(ids->end(), out.begin(), out.end());
    };
    if (!split_lines_) return piece(text.data(), text.size());
    for (size_t at = 0; at <= text.size();) {
        const size_t nl = std::min(text.find('\n', at), text.size());
        if (nl > at) piece(text.data() + at, nl - at);
        if (nl < text.size()) ids->push_back(newline_ids_[0]);
        at = nl + 1;
    }
}

} // namespace dptrain
