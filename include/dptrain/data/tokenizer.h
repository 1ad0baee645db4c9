// The tokenizers (byte, char, ids, gpt2, sentencepiece) behind one interface. Not for: token
// shards (tokens.h). Free of MPI and HDF5: an inference program links it without the data layer.
#pragma once

#include "dptrain/data/bpe.h"
#include "dptrain/data/sentencepiece.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dptrain {

// chars: code points of the training text, in order; ids: data tokenized elsewhere (no text).
// bpe: a byte-level BPE from a Hugging Face tokenizer.json (Llama 3's, Qwen2's), Gpt2Tokenizer's class.
enum class TokenizerKind { byte, chars, ids, gpt2, sentencepiece, bpe };

// Stored in users' files and checksums: never change these names.
const char* name_of(TokenizerKind kind);
bool parse_tokenizer_kind(const std::string& name, TokenizerKind* kind);
// For a name read from a file: throws UserError for an unknown one.
TokenizerKind tokenizer_kind(const std::string& name);
// char, gpt2, sentencepiece; ids keep only the shards' vocab_size attribute.
bool keeps_table(TokenizerKind kind);

// A tokenizer file in Hugging Face's layout.
struct TokenizerFile {
    std::string name, bytes;
};

class Tokenizer {
  public:
    virtual ~Tokenizer() = default;
    virtual TokenizerKind kind() const = 0;
    const char* name() const { return name_of(kind()); }
    virtual int vocab_size() const = 0;
    // Where decoding stops (GPT-2's <|endoftext|>); -1: none.
    virtual int end_of_text() const { return -1; }
    // Throws UserError naming a character the vocabulary lacks. ids: "15496 11 995".
    virtual void encode_into(const std::string& text, std::vector<int>* ids) const = 0;
    std::vector<int> encode(const std::string& text) const;
    // The ids Hugging Face's post-processor puts around one sequence (a tokenizer.json's
    // TemplateProcessing: Llama 3's <|begin_of_text|> before it): dptrain-data text wraps each
    // document in them. Empty for the other kinds.
    virtual const std::vector<int>& sequence_prefix() const;
    virtual const std::vector<int>& sequence_suffix() const;
    // A prompt's ids: sequence_prefix(), then the text's (a prompt starts a sequence; the rest is
    // the model's to write, so no suffix). Chat prompts render their special tokens themselves.
    std::vector<int> encode_prompt(const std::string& text) const;
    // An id outside the vocabulary decodes to nothing (byte: id mod 256); gpt2 may end mid-character.
    virtual std::string decode(const std::vector<int>& ids) const = 0;
    // Bits per byte divides by this; 0 for <|endoftext|> and for ids (unknown).
    virtual int bytes_of(int id) const = 0;
    // Stored in shards and checkpoints; tokenizer_from reads it back. gpt2's is ~1 MB, hence
    // h5::write_text.
    virtual std::string table() const = 0;
    // Same kind and table: ids mean the same text.
    virtual bool same_as(const Tokenizer& other) const = 0;
    bool has_table() const { return keeps_table(kind()); }
    virtual bool reads_text() const { return true; }  // ids: prompts are ids written out
    // char and sentencepiece read characters, so a corpus is checked first.
    virtual bool needs_utf8() const { return false; }
    // The first p >= from where both halves encode alone to the whole's ids (or text.size()), so
    // dptrain-data can encode a corpus a piece per rank. Default: after a newline.
    virtual size_t next_cut(const std::string& text, size_t from) const;
    // What HF tokenizer classes read beside exported weights; other kinds' tables go in config.json.
    virtual std::vector<TokenizerFile> hf_files() const { return {}; }
};

using TokenizerPtr = std::shared_ptr<const Tokenizer>;

class ByteTokenizer : public Tokenizer {
  public:
    TokenizerKind kind() const override { return TokenizerKind::byte; }
    int vocab_size() const override { return 256; }
    void encode_into(const std::string& text, std::vector<int>* ids) const override;
    std::string decode(const std::vector<int>& ids) const override;
    int bytes_of(int) const override { return 1; }
    std::string table() const override { return ""; }
    bool same_as(const Tokenizer& other) const override;
};

class CharTokenizer : public Tokenizer {
  public:
    explicit CharTokenizer(std::vector<uint32_t> chars) : chars_(std::move(chars)) {}  // by id
    TokenizerKind kind() const override { return TokenizerKind::chars; }
    int vocab_size() const override { return (int)chars_.size(); }
    void encode_into(const std::string& text, std::vector<int>* ids) const override;
    std::string decode(const std::vector<int>& ids) const override;
    int bytes_of(int id) const override;
    std::string table() const override;
    bool same_as(const Tokenizer& other) const override;
    bool needs_utf8() const override { return true; }
    const std::vector<uint32_t>& chars() const { return chars_; }

  private:
    std::vector<uint32_t> chars_;
};

class IdsTokenizer : public Tokenizer {
  public:
    explicit IdsTokenizer(int count) : count_(count) {}  // count >= 1
    TokenizerKind kind() const override { return TokenizerKind::ids; }
    int vocab_size() const override { return count_; }
    void encode_into(const std::string& text, std::vector<int>* ids) const override;
    std::string decode(const std::vector<int>& ids) const override;
    int bytes_of(int) const override { return 0; }
    std::string table() const override { return std::to_string(count_); }
    bool same_as(const Tokenizer& other) const override;
    bool reads_text() const override { return false; }

  private:
    int count_;
};

class Gpt2Tokenizer : public Tokenizer {
  public:
    explicit Gpt2Tokenizer(std::shared_ptr<const Gpt2Bpe> bpe) : bpe_(std::move(bpe)) {}
    TokenizerKind kind() const override { return bpe_->json_form() ? TokenizerKind::bpe : TokenizerKind::gpt2; }
    int vocab_size() const override { return bpe_->size(); }
    int end_of_text() const override { return bpe_->endoftext(); }
    void encode_into(const std::string& text, std::vector<int>* ids) const override { bpe_->encode(text, ids); }
    const std::vector<int>& sequence_prefix() const override { return bpe_->sequence_prefix(); }
    const std::vector<int>& sequence_suffix() const override { return bpe_->sequence_suffix(); }
    std::string decode(const std::vector<int>& ids) const override;
    int bytes_of(int id) const override;
    std::string table() const override { return bpe_->table(); }
    bool same_as(const Tokenizer& other) const override;
    size_t next_cut(const std::string& text, size_t from) const override;
    std::vector<TokenizerFile> hf_files() const override;
    const Gpt2Bpe& bpe() const { return *bpe_; }

  private:
    std::shared_ptr<const Gpt2Bpe> bpe_;
};

class SentencePieceTokenizer : public Tokenizer {
  public:
    explicit SentencePieceTokenizer(std::shared_ptr<const SentencePieceModel> model) : sp_(std::move(model)) {}
    TokenizerKind kind() const override { return TokenizerKind::sentencepiece; }
    int vocab_size() const override { return sp_->size(); }
    void encode_into(const std::string& text, std::vector<int>* ids) const override { sp_->encode(text, ids); }
    std::string decode(const std::vector<int>& ids) const override;
    int bytes_of(int id) const override;
    std::string table() const override { return sp_->bytes(); }
    bool same_as(const Tokenizer& other) const override;
    bool needs_utf8() const override { return true; }
    size_t next_cut(const std::string& text, size_t from) const override;
    std::vector<TokenizerFile> hf_files() const override { return {{"tokenizer.model", sp_->bytes()}}; }
    const SentencePieceModel& model() const { return *sp_; }

  private:
    std::shared_ptr<const SentencePieceModel> sp_;
};

// Throws UserError for an unknown kind or a damaged table.
TokenizerPtr tokenizer_from(TokenizerKind kind, const std::string& table);
TokenizerPtr tokenizer_from(const std::string& kind, const std::string& table);

TokenizerPtr make_byte_tokenizer();  // one shared instance: it has no state
// UserError naming the first byte that is not UTF-8.
std::shared_ptr<const CharTokenizer> make_char_tokenizer(const std::string& text);
std::shared_ptr<const IdsTokenizer> make_ids_tokenizer(int count);  // count >= 1
// encoder.json or vocab.json; vocab.bpe or merges.txt.
std::shared_ptr<const Gpt2Tokenizer> make_gpt2_tokenizer(const std::string& encoder_path, const std::string& merges_path);
std::shared_ptr<const Gpt2Tokenizer> make_gpt2_tokenizer(std::shared_ptr<const Gpt2Bpe> bpe);
std::shared_ptr<const SentencePieceTokenizer> make_sentencepiece_tokenizer(std::shared_ptr<const SentencePieceModel> model);

} // namespace dptrain
