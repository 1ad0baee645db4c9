// Language-model data: token shards (`/tokens` uint16 or uint32, 1-D, with the vocabulary in the
// file's attributes), the tokenizers that made them, and the windows a rank trains on.
// Not for: tabular data (shards.h) or the model.
#pragma once

#include "dptrain/data/bpe.h"
#include "dptrain/data/sentencepiece.h"
#include "dptrain/data/shards.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dptrain {

// Byte level (256 ids, id = byte), character level (ids for the Unicode characters of the
// training text, in code-point order), gpt2 (GPT-2's byte-level BPE from the user's encoder.json
// and vocab.bpe; bpe.h), sentencepiece (a SentencePiece model trained on the text or the user's;
// sentencepiece.h), or ids: data tokenized elsewhere with a declared vocabulary size and no text,
// so prompts and samples are written as ids.
struct Tokenizer {
    std::string kind = "byte";  // byte | char | gpt2 | sentencepiece | ids
    std::vector<uint32_t> chars;  // char: the code point of each id
    int id_count = 0;             // ids: the vocabulary size
    std::shared_ptr<const Gpt2Bpe> bpe;  // gpt2
    std::shared_ptr<const SentencePieceModel> sp;  // sentencepiece
    int vocab_size() const;
    // The id that ends a document (GPT-2's <|endoftext|>), which decoding stops at; -1: none.
    int end_of_text() const { return kind == "gpt2" && bpe ? bpe->endoftext() : -1; }
    bool same_as(const Tokenizer& o) const;
    // The bytes of text token `id` stands for (byte: 1; char: 1 to 4; gpt2: its bytes, but 0 for
    // <|endoftext|>, a separator; ids: 0, unknown): what bits per byte divides by.
    int bytes_of(int id) const;
    // Throws UserError naming a character the vocabulary lacks. ids: the text is the ids written
    // out ("15496 11 995"), each below the vocabulary size. gpt2: any bytes.
    std::vector<int> encode(const std::string& utf8) const;
    // ids: " 15496 11 995", each id after a space. gpt2: the bytes (a piece of a character may
    // end the text).
    std::string decode(const std::vector<int>& ids) const;
    // How the tokenizer is stored in shards and checkpoints, and back: char: its characters as
    // UTF-8 text; ids: the vocabulary size in decimal; gpt2: Gpt2Bpe::table() (about 1 MB, so
    // the files keep it with h5::write_text); sentencepiece: the model's bytes; byte: empty.
    std::string table() const;
    static Tokenizer from(const std::string& kind, const std::string& table);
    // A character-level vocabulary from text.
    static Tokenizer chars_of(const std::string& utf8);
    // GPT-2's BPE from its files (encoder.json or vocab.json; vocab.bpe or merges.txt).
    static Tokenizer gpt2(const std::string& encoder_path, const std::string& merges_path);
    // A SentencePiece model: a user's .model file, or one trained on `text` (SentencePieceModel::train).
    static Tokenizer sentencepiece(std::shared_ptr<const SentencePieceModel> model);
    // Whether the files keep a table for this kind (char, gpt2, sentencepiece).
    static bool has_table(const std::string& kind) { return kind == "char" || kind == "gpt2" || kind == "sentencepiece"; }
    bool has_table() const { return has_table(kind); }
};

// The training windows of one split: each shard of n tokens gives (n - T) / T windows of T + 1
// tokens starting at k*T + shift, where shift (0 <= shift < T) is drawn per epoch from the seed
// (the validation split uses shift 0), so epochs see different cuts of the text. Sample i is a
// window index over all shards in order, so the Sampler's world-size independence carries over.
class TokenShardSet : public Dataset {
  public:
    // Checks every shard (dtype, rank, vocabulary attributes, agreement, enough tokens). mode memory:
    // `node` is the node's communicator for load_node_memory (direct and memory only).
    static TokenShardSet open(const std::string& dir, const std::string& split, int block_size, uint64_t seed,
                              bool shift_per_epoch, IoMode mode = IoMode::direct, MPI_Comm node = MPI_COMM_NULL);
    TokenShardSet(TokenShardSet&&) = default;
    ~TokenShardSet() override;

    long num_samples() const override { return total_; }
    int floats_per_sample() const override { return 0; }
    int ints_per_sample() const override { return T_ + 1; }
    void read(const long* idx, int n, long epoch, float* x, int* y) override;
    int num_shards() const override { return (int)shards_.size(); }
    const std::string& shard_path(int i) const override { return shards_[i].path; }
    std::unique_ptr<Dataset> reopen() const override;
    const Tokenizer& tokenizer() const { return tok_; }
    long num_tokens() const { return tokens_; }
    IoMode mode() const { return mode_; }
    const std::string& dir() const { return dir_; }
    const std::string& split() const { return split_; }
    // A note when the windows cover under 3/4 of the split's tokens (each shard leaves up to two
    // block sizes unread: many small shards lose much of the text), else "".
    std::string coverage_note() const;
    // --io memory: allocates the node-shared buffer (collective over the node's communicator) and
    // loads this rank's share of every shard's tokens, in their stored width, one read per shard
    // piece. As ShardSet::load_node_memory: every rank of the node must have loaded its share
    // before any reads (the caller agrees across ranks afterwards), and reopen() shares the copy.
    void load_node_memory();
    double memory_bytes() const override;
    size_t held_bytes() const override;  // HDF5-read shards' files and chunk caches
    // Checks every token id against the vocabulary: part `part` of `parts` equal pieces of all the
    // shards' tokens (the ranks of a node share the work; no communication). Throws UserError
    // naming the shard, offset and id of the first bad one in the piece. Returns false, reading
    // nothing, when the split holds more than max_bytes of tokens (then ids are checked as
    // windows are read).
    bool check_ids(int part, int parts, double max_bytes);

  private:
    struct Shard {
        std::string path;
        long first = 0, windows = 0, tokens = 0;
        h5::Hid file, data;
        int fd = -1;  // >= 0: direct reads at `at`
        long at = 0;
        int width = 2;  // bytes per token
        size_t mem_at = 0;  // --io memory: where its tokens start in the node-shared buffer
    };
    TokenShardSet() = default;
    [[noreturn]] void bad_token(const Shard& sh, long start, int n, uint32_t V) const;
    void read_stored(const Shard& sh, long t0, long n, void* dst) const;
    void read_ids(const Shard& sh, long t0, long n, uint32_t* out) const;
    std::string dir_, split_;
    std::vector<Shard> shards_;
    Tokenizer tok_;
    long total_ = 0, tokens_ = 0;
    int T_ = 0;
    uint64_t seed_ = 0;
    bool shift_ = true;
    IoMode mode_ = IoMode::direct;
    MPI_Comm node_ = MPI_COMM_NULL;
    std::shared_ptr<SharedWindow> node_copy_;  // --io memory, once loaded (its segment 0)
    std::vector<unsigned char> raw_;  // one window's bytes, reused
};

} // namespace dptrain
