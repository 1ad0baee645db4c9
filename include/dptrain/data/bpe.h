// Byte-level BPE: GPT-2's from its files, with GPT-2's own regex and byte table so ids equal GPT-2's;
// and the same algorithm as a Hugging Face tokenizer.json describes it (Llama 3, Qwen2): its own
// pre-tokenizer pattern, special tokens split out of the text first, ignore_merges.
// Not for: the other tokenizers (tokenizer.h holds the one interface).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace dptrain {

class Gpt2Bpe {
  public:
    // Throws UserError naming the file and the first bad entry.
    static std::shared_ptr<const Gpt2Bpe> parse(const std::string& encoder_json, const std::string& merges,
                                                const std::string& where);
    // encoder.json or vocab.json; vocab.bpe or merges.txt.
    static std::shared_ptr<const Gpt2Bpe> load(const std::string& encoder_path, const std::string& merges_path);
    // A tokenizer.json with a BPE model over GPT-2's byte table and a ByteLevel (or Split + ByteLevel)
    // pre-tokenizer. Anything it does not compute as Hugging Face's tokenizers does (a normalizer,
    // byte fallback, a prefix space, word suffixes) is refused in one line naming the key.
    static std::shared_ptr<const Gpt2Bpe> parse_tokenizer_json(const std::string& json, const std::string& where);
    static std::shared_ptr<const Gpt2Bpe> load_tokenizer_json(const std::string& path);
    // Either form's table (table()'s first line tells them apart).
    static std::shared_ptr<const Gpt2Bpe> from_table(const std::string& table);
    ~Gpt2Bpe();

    // "gpt2-bpe 1", the count, tokens in id order, merges in rank order, one a line (tokens hold
    // no space or newline); the tokenizer.json form's settings first ("bpe-json 1", or "bpe-json 2"
    // with ids around a sequence). Stored in users' shards and checkpoints.
    std::string table() const;
    std::string encoder_json() const;
    std::string merges_text() const;
    // The tokenizer.json form: read from one (true), or GPT-2's files (false).
    bool json_form() const { return json_form_; }
    // A tokenizer.json that parse_tokenizer_json reads back to the same tokenizer.
    std::string tokenizer_json() const;
    std::string post_processor_json() const;  // its post_processor: the ids around a sequence, or null

    int size() const { return (int)bytes_.size(); }  // the vocabulary and the special tokens past it
    // A run of invalid UTF-8 is a piece of its own, so every input round-trips.
    void encode(const std::string& text, std::vector<int>* ids) const;
    const std::string& bytes_of(int id) const { return bytes_[(size_t)id]; }
    int id_of(const std::string& bytes) const;  // -1: none
    int endoftext() const { return endoftext_; }  // <|endoftext|> or <|end_of_text|>; -1: none
    bool is_special(int id) const;
    // The ids the tokenizer.json's post_processor puts before and after one sequence (a
    // TemplateProcessing's single template: Llama 3's <|begin_of_text|> before it); empty otherwise.
    const std::vector<int>& sequence_prefix() const { return json_.prefix; }
    const std::vector<int>& sequence_suffix() const { return json_.suffix; }

  private:
    Gpt2Bpe() = default;
    // The tokenizer.json form's settings (GPT-2's files: none of them).
    struct JsonForm {
        std::string pattern;  // the pre-tokenizer's regex
        bool ignore_merges = false;
        std::vector<std::pair<int, std::string>> specials;  // (id, content), matched before the regex
        std::vector<int> prefix, suffix;  // the post_processor's ids around a sequence
    };
    static std::shared_ptr<const Gpt2Bpe> build(std::vector<std::string> tokens, std::vector<std::string> merges,
                                                const std::string& where, const JsonForm* json = nullptr);
    // The tokenizer.json form's lines of a table, after its first (table()'s layout); version 2
    // also holds the ids around a sequence.
    static JsonForm read_json_form(std::istream& in, int version);
    void compile_regex(const std::string& where);
    // text's pieces between special tokens through the regex; each special's id as it is.
    void encode_text(const char* p, size_t n, std::vector<int>* ids) const;
    void encode_piece(const char* p, size_t n, std::vector<int>* ids) const;
    // Two ways to the same ids: short pieces, long pieces.
    void scan_piece(const char* p, size_t n, std::vector<int>* out) const;
    void merge_piece(const char* p, size_t n, std::vector<int>* out) const;

    std::vector<std::string> tokens_;  // id -> GPT-2's printable form
    std::vector<std::string> bytes_;
    std::vector<std::string> merges_;  // rank -> "a b"
    std::unordered_map<std::string, int> ids_;  // bytes -> id
    int byte_id_[256] = {};
    int endoftext_ = -1;
    // (left id << 32 | right id) -> (rank, merged id)
    std::unordered_map<uint64_t, std::pair<int, int>> merge_;
    void* regex_ = nullptr;  // pcre2_code*
    bool json_form_ = false;
    JsonForm json_;
    bool jit_ = false;
    // Bounded; locked, as serve encodes prompts on many threads.
    mutable std::mutex cache_mu_;
    mutable std::unordered_map<std::string, std::vector<int>> cache_;
};

// GPT-2's pre-tokenizer regex (encoder.py's, verbatim): a ByteLevel pre-tokenizer's own split too.
const char* gpt2_pretokenizer_pattern();

// GPT-2's byte-to-unicode table.
uint32_t gpt2_printable_of(unsigned char b);

} // namespace dptrain
