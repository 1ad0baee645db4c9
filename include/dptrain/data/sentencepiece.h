// SentencePiece models (libsentencepiece): trained on the user's text at a vocabulary size, or a
// user's .model file; the model's bytes travel with the shards and checkpoints. Not for: the
// other tokenizers (tokens.h holds the one interface over all of them).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace dptrain {

class SentencePieceModel {
  public:
    // From a serialized ModelProto (a .model file's bytes); `where` names it in errors.
    static std::shared_ptr<const SentencePieceModel> from_bytes(const std::string& model, const std::string& where);
    static std::shared_ptr<const SentencePieceModel> load(const std::string& path);
    // Trains on the first `train_bytes` of `text`, up to its last whole line if that is not far
    // back (the lines are the sentences; lines over 4 KiB are cut in pieces), type bpe or unigram, on `threads` threads; all of `text` must be UTF-8. Byte
    // fallback, identity normalization, whitespace kept as it is and no dummy prefix, so that
    // decoding the ids of any UTF-8 text gives the text back byte for byte.
    static std::shared_ptr<const SentencePieceModel> train(const std::string& text, size_t train_bytes, int vocab_size,
                                                           const std::string& type, int threads);
    ~SentencePieceModel();

    const std::string& bytes() const { return model_; }
    int size() const { return (int)surface_.size(); }
    // Text must be UTF-8 (UserError naming the first bad byte otherwise).
    void encode(const std::string& text, std::vector<int>* ids) const;
    // What id stands for in the text: "▁" as a space, a byte piece as its byte, control pieces
    // (<s>, </s>) and <unk> as nothing.
    const std::string& surface(int id) const { return surface_[(size_t)id]; }
    // Whether text encodes line by line to the same ids (so it may be cut after any newline).
    bool lines_alone() const { return split_lines_; }

  private:
    SentencePieceModel() = default;
    bool lines_encode_alone();
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::string model_;
    std::vector<std::string> surface_;
    std::vector<int> newline_ids_;  // the ids of "\n" alone
    bool split_lines_ = false;      // encode line by line (the same ids, faster)
};

} // namespace dptrain
