// Language-model data: token shards (`/tokens` uint16 or uint32, 1-D, with the tokenizer that
// made them in the file's attributes) and the windows a rank trains on.
// Not for: tabular data (shards.h), the tokenizers themselves (tokenizer.h) or the model.
#pragma once

#include "dptrain/data/shards.h"
#include "dptrain/data/tokenizer.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dptrain {

// A split's training windows: each shard of n tokens gives (n - T) / T windows of T + 1 tokens at
// k*T + shift, shift drawn per epoch from the seed (0 for validation) so epochs see different cuts.
// Sample i indexes windows over all shards in order: the Sampler's world-size independence holds.
class TokenShardSet : public Dataset {
  public:
    // Checks every shard (dtype, rank, vocabulary attributes, agreement, enough tokens). `node`:
    // the node's communicator, for load_node_memory.
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
    const Tokenizer& tokenizer() const { return *tok_; }
    long num_tokens() const { return tokens_; }
    IoMode mode() const { return mode_; }
    const std::string& dir() const { return dir_; }
    const std::string& split() const { return split_; }
    // A note when windows cover under 3/4 of the tokens (each shard leaves up to two blocks
    // unread), else "".
    std::string coverage_note() const;
    // --io memory: collective over the node; loads this rank's share into the node-shared buffer.
    // As ShardSet::load_node_memory, the caller agrees before any rank reads; reopen() shares it.
    void load_node_memory();
    double memory_bytes() const override;
    size_t held_bytes() const override;  // HDF5-read shards' files and chunk caches
    // Checks ids in piece `part` of `parts` of all tokens (a node's ranks share the work, without
    // communicating); throws UserError naming shard, offset and id. False, reading nothing, over
    // max_bytes: then ids are checked as windows are read.
    bool check_ids(int part, int parts, double max_bytes);

  private:
    struct Shard {
        std::string path;
        long first = 0, windows = 0, tokens = 0;
        h5::Hid file, data;
        int fd = -1;  // >= 0: direct reads at `at`
        long at = 0;
        int width = 2;  // bytes per token
        size_t mem_at = 0;  // --io memory: offset in the node-shared buffer
    };
    TokenShardSet() = default;
    [[noreturn]] void bad_token(const Shard& sh, long start, int n, uint32_t V) const;
    void read_stored(const Shard& sh, long t0, long n, void* dst) const;
    void read_ids(const Shard& sh, long t0, long n, uint32_t* out) const;
    std::string dir_, split_;
    std::vector<Shard> shards_;
    TokenizerPtr tok_;  // shared by reopen()'s readers
    long total_ = 0, tokens_ = 0;
    int T_ = 0;
    uint64_t seed_ = 0;
    bool shift_ = true;
    IoMode mode_ = IoMode::direct;
    MPI_Comm node_ = MPI_COMM_NULL;
    std::shared_ptr<SharedWindow> node_copy_;  // --io memory, once loaded
    std::vector<unsigned char> raw_;  // one window's bytes, reused
};

} // namespace dptrain
