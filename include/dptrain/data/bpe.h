// GPT-2's byte-level BPE from its files, with GPT-2's own regex and byte table so ids equal GPT-2's.
// Not for: the other tokenizers (tokenizer.h holds the one interface).
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
    // Throws UserError naming the file and the first bad entry.
    static std::shared_ptr<const Gpt2Bpe> parse(const std::string& encoder_json, const std::string& merges,
                                                const std::string& where);
    // encoder.json or vocab.json; vocab.bpe or merges.txt.
    static std::shared_ptr<const Gpt2Bpe> load(const std::string& encoder_path, const std::string& merges_path);
    static std::shared_ptr<const Gpt2Bpe> from_table(const std::string& table);
    ~Gpt2Bpe();

    // "gpt2-bpe 1", the count, tokens in id order, merges in rank order, one a line (tokens hold
    // no space or newline). Stored in users' shards and checkpoints.
    std::string table() const;
    std::string encoder_json() const;
    std::string merges_text() const;

    int size() const { return (int)bytes_.size(); }
    // A run of invalid UTF-8 is a piece of its own, so every input round-trips.
    void encode(const std::string& text, std::vector<int>* ids) const;
    const std::string& bytes_of(int id) const { return bytes_[(size_t)id]; }
    int id_of(const std::string& bytes) const;  // -1: none
    int endoftext() const { return endoftext_; }  // -1: none

  private:
    Gpt2Bpe() = default;
    static std::shared_ptr<const Gpt2Bpe> build(std::vector<std::string> tokens, std::vector<std::string> merges,
                                                const std::string& where);
    void compile_regex();
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
    bool jit_ = false;
    // Bounded; locked, as serve encodes prompts on many threads.
    mutable std::mutex cache_mu_;
    mutable std::unordered_map<std::string, std::vector<int>> cache_;
};

// GPT-2's byte-to-unicode table.
uint32_t gpt2_printable_of(unsigned char b);

} // namespace dptrain
