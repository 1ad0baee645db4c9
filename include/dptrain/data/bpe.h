// GPT-2's byte-level BPE tokenizer: built from the files every GPT-2 user has (encoder.json and
// vocab.bpe, or Hugging Face's vocab.json and merges.txt), with GPT-2's pre-tokenizer regex
// (PCRE2) and byte-to-unicode table, so ids equal GPT-2's own. Not for: the other tokenizers
// (tokens.h holds the one interface over all of them).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace dptrain {

class Gpt2Bpe {
  public:
    // From the files' contents; `where` names them in errors. Throws UserError naming the file
    // and the first bad entry (ids not 0..N-1, a merge whose parts or result are not tokens, ...).
    static std::shared_ptr<const Gpt2Bpe> parse(const std::string& encoder_json, const std::string& merges,
                                                const std::string& where);
    // From the files themselves (encoder.json or vocab.json; vocab.bpe or merges.txt).
    static std::shared_ptr<const Gpt2Bpe> load(const std::string& encoder_path, const std::string& merges_path);
    // From the table kept in shards and checkpoints (table()).
    static std::shared_ptr<const Gpt2Bpe> from_table(const std::string& table);
    ~Gpt2Bpe();

    // "gpt2-bpe 1", the token count, each token in id order (GPT-2's printable form, one a line),
    // then each merge ("a b") in rank order. Tokens hold no space or newline, so lines split it.
    std::string table() const;
    // The files back, as GPT-2 and Hugging Face read them.
    std::string encoder_json() const;
    std::string merges_text() const;

    int size() const { return (int)bytes_.size(); }
    // Any bytes: the regex splits valid UTF-8 as GPT-2 does; a run of invalid bytes is one piece
    // of its own, so every input round-trips.
    void encode(const std::string& text, std::vector<int>* ids) const;
    const std::string& bytes_of(int id) const { return bytes_[(size_t)id]; }
    // The id of a whole token's bytes (e.g. "<|endoftext|>"), or -1.
    int id_of(const std::string& bytes) const;
    // The id of "<|endoftext|>", the documents' separator, or -1 where the vocabulary lacks it.
    int endoftext() const { return endoftext_; }

  private:
    Gpt2Bpe() = default;
    // Checks the tokens (GPT-2's printable form, one per byte at least) and merges, and indexes them.
    static std::shared_ptr<const Gpt2Bpe> build(std::vector<std::string> tokens, std::vector<std::string> merges,
                                                const std::string& where);
    void compile_regex();
    void encode_piece(const char* p, size_t n, std::vector<int>* ids) const;
    // bpe() on one piece's bytes (n >= 1), its ids into *out: two ways to the same ids, one for
    // short pieces, one for long.
    void scan_piece(const char* p, size_t n, std::vector<int>* out) const;
    void merge_piece(const char* p, size_t n, std::vector<int>* out) const;

    std::vector<std::string> tokens_;  // id -> GPT-2's printable form
    std::vector<std::string> bytes_;   // id -> the bytes it stands for
    std::vector<std::string> merges_;  // rank -> "a b" (printable forms)
    std::unordered_map<std::string, int> ids_;  // bytes -> id
    int byte_id_[256] = {};
    int endoftext_ = -1;
    // (left id << 32 | right id) -> (rank, merged id)
    std::unordered_map<uint64_t, std::pair<int, int>> merge_;
    void* regex_ = nullptr;  // pcre2_code*
    bool jit_ = false;       // regex_ is JIT-compiled
    // Pieces already encoded (words repeat); bounded, shared by threads (serve encodes prompts).
    mutable std::mutex cache_mu_;
    mutable std::unordered_map<std::string, std::vector<int>> cache_;
};

// GPT-2's byte-to-unicode table: byte b is written as the code point printable_of(b).
uint32_t gpt2_printable_of(unsigned char b);

} // namespace dptrain
