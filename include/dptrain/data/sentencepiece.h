// SentencePiece models (libsentencepiece), trained on the user's text or from a .model file.
// Not for: the other tokenizers (tokenizer.h holds the one interface).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace dptrain {

class SentencePieceModel {
  public:
    // A .model file's bytes.
    static std::shared_ptr<const SentencePieceModel> from_bytes(const std::string& model, const std::string& where);
    static std::shared_ptr<const SentencePieceModel> load(const std::string& path);
    // On about the first `train_bytes`, cut at a line. Byte fallback, identity normalization,
    // whitespace kept and no dummy prefix, so any UTF-8 text round-trips byte for byte.
    static std::shared_ptr<const SentencePieceModel> train(const std::string& text, size_t train_bytes, int vocab_size,
                                                           const std::string& type, int threads);
    ~SentencePieceModel();

    const std::string& bytes() const { return model_; }
    int size() const { return (int)surface_.size(); }
    // UTF-8 only: UserError naming the first bad byte.
    void encode(const std::string& text, std::vector<int>* ids) const;
    // "▁" as a space, byte pieces as their byte; control pieces and <unk> as nothing.
    const std::string& surface(int id) const { return surface_[(size_t)id]; }
    // Encodes line by line to the same ids, so it may be cut after any newline.
    bool lines_alone() const { return split_lines_; }

  private:
    SentencePieceModel() = default;
    bool lines_encode_alone();
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::string model_;
    std::vector<std::string> surface_;
    std::vector<int> newline_ids_;  // of "\n" alone
    bool split_lines_ = false;      // encode line by line: same ids, faster
};

} // namespace dptrain
