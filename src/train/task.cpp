// The two tasks: tabular shards for the MLP, token shards for the GPT.
// Not for: reading shards (data/) or the models.
#include "dptrain/train/task.h"

#include "dptrain/core/clock.h"
#include "dptrain/core/error.h"
#include "dptrain/core/files.h"
#include "dptrain/data/tokens.h"

#include <algorithm>

namespace dptrain {

namespace {

constexpr int kEvalRows = 512;  // validation rows per forward pass of the MLP

class TabularTask : public Task {
  public:
    TabularTask(const Options& o, const Topology& topo);

    ModelSpec model_spec(const Options& o) const override;
    ModelBatch batch(const float* x, const int* y, int n) const override;
    int eval_rows() const override;
    std::string describe() const override;
    const char* unit() const override;
    int tokens_per_sample() const override;
    std::string load_node_memory() override;

  private:
    ShardSet *shards_ = nullptr, *val_shards_ = nullptr;
};

TabularTask::TabularTask(const Options& o, const Topology& topo) {
    const MPI_Comm io_comm = o.io == IoMode::memory       ? topo.node
                             : o.io == IoMode::collective ? topo.world
                                                          : MPI_COMM_NULL;
    auto tr = std::make_unique<ShardSet>(ShardSet::open(o.data, "train", o.batch_size, o.io, io_comm));
    auto va = std::make_unique<ShardSet>(ShardSet::open(o.data, "val", kEvalRows));
    if (va->dim() != tr->dim() || va->num_classes() != tr->num_classes())
        throw UserError(strfmt("--data %s: validation shards have %d features / %d classes, training shards %d / "
                               "%d; regenerate them together",
                               o.data.c_str(), va->dim(), va->num_classes(), tr->dim(), tr->num_classes()));
    shards_ = tr.get();
    val_shards_ = va.get();
    train_ = std::move(tr);
    val_ = std::move(va);
}

ModelSpec TabularTask::model_spec(const Options& o) const {
    ModelSpec s;
    s.kind = ModelKind::mlp;
    s.in = shards_->dim();
    s.classes = shards_->num_classes();
    s.hidden = o.hidden_sizes;
    s.activation = o.activation;
    s.max_rows = std::max(o.batch_size, kEvalRows);
    s.precision = o.precision;
    return s;
}

ModelBatch TabularTask::batch(const float* x, const int* y, int n) const {
    ModelBatch in;
    in.B = n;
    in.x = x;
    in.labels = y;
    return in;
}

int TabularTask::eval_rows() const { return kEvalRows; }

std::string TabularTask::describe() const {
    std::string notes;
    for (const ShardSet* s : {shards_, val_shards_})
        if (!s->conversion_note().empty()) notes += "\n" + s->conversion_note();
    return strfmt("%ld training samples in %d shards, %ld validation samples, %d features, %d classes%s",
                  shards_->num_samples(), shards_->num_shards(), val_shards_->num_samples(), shards_->dim(),
                  shards_->num_classes(), notes.c_str());
}

const char* TabularTask::unit() const { return "sample"; }

int TabularTask::tokens_per_sample() const { return 0; }

std::string TabularTask::load_node_memory() {
    if (shards_->mode() != IoMode::memory) return "";
    const double t0 = now_seconds();
    shards_->load_node_memory();
    return strfmt("io memory: %.1f MiB of training rows loaded into node-shared memory in %.2f s",
                  shards_->memory_bytes() / 1048576.0, now_seconds() - t0);
}

class LanguageModelTask : public Task {
  public:
    LanguageModelTask(const Options& o, const Topology& topo);

    ModelSpec model_spec(const Options& o) const override;
    ModelBatch batch(const float*, const int* y, int n) const override;
    int eval_rows() const override;
    std::string describe() const override;
    const char* unit() const override;
    int tokens_per_sample() const override;
    double target_bytes(const int* y, int n) const override;
    std::string tokenizer_kind() const override;
    std::string tokenizer_table() const override;
    std::string load_node_memory() override;

  private:
    // Most of a split a node reads at start-up to check its ids.
    static constexpr double kIdCheckBytes = 4.0 * (1ull << 30);
    TokenShardSet *tokens_ = nullptr, *val_tokens_ = nullptr;
    int block_size_, batch_size_;
    std::vector<std::string> unchecked_;  // checked only as windows are read
};

LanguageModelTask::LanguageModelTask(const Options& o, const Topology& topo)
    : block_size_(o.block_size), batch_size_(o.batch_size) {
    auto tr = std::make_unique<TokenShardSet>(TokenShardSet::open(
        o.data, "train", o.block_size, o.seed, true, o.io, o.io == IoMode::memory ? topo.node : MPI_COMM_NULL));
    auto va = std::make_unique<TokenShardSet>(TokenShardSet::open(o.data, "val", o.block_size, o.seed, false));
    if (!va->tokenizer().same_as(tr->tokenizer())) {
        const Tokenizer &a = tr->tokenizer(), &b = va->tokenizer();
        const bool same_size = a.kind() == b.kind() && a.vocab_size() == b.vocab_size();
        throw UserError(strfmt("--data %s: the train shards hold %s tokens of %d ids, the val shards %s tokens of %d%s; "
                               "make the val split again with the train split's settings (dptrain-data text or tokens "
                               "--split val, with its --vocab-size, --encoder and --merges, or --sp-model)",
                               o.data.c_str(), a.name(), a.vocab_size(), b.name(), b.vocab_size(),
                               same_size ? " (another table of that size)" : ""));
    }
    // Once per node before training, the node's ranks each a share; too large: as windows are read.
    for (TokenShardSet* set : {tr.get(), va.get()})
        if (!set->check_ids(topo.local_rank, topo.local_size, kIdCheckBytes)) unchecked_.push_back(set->split());
    tokens_ = tr.get();
    val_tokens_ = va.get();
    train_ = std::move(tr);
    val_ = std::move(va);
}

ModelSpec LanguageModelTask::model_spec(const Options& o) const {
    const Tokenizer& tok = tokens_->tokenizer();
    ModelSpec s;
    s.kind = o.model;
    s.gpt = lm_config(o, o.vocab_size > 0 ? o.vocab_size : tok.vocab_size());
    if (s.gpt.vocab_size < tok.vocab_size())
        throw UserError(strfmt("--vocab-size %d is smaller than the data's vocabulary of %d", o.vocab_size,
                               tok.vocab_size()));
    s.batch = o.batch_size;
    s.precision = o.precision;
    return s;
}

ModelBatch LanguageModelTask::batch(const float*, const int* y, int n) const {
    ModelBatch in;
    in.B = n;
    in.tokens = y;
    in.stride = block_size_ + 1;
    return in;
}

int LanguageModelTask::eval_rows() const { return batch_size_; }  // activations are sized for the training batch

std::string LanguageModelTask::describe() const {
    const Tokenizer& tok = tokens_->tokenizer();
    return strfmt("%ld training tokens in %d shard%s (%ld windows of %d + 1), %ld validation windows, %s "
                  "vocabulary of %d",
                  tokens_->num_tokens(), tokens_->num_shards(), tokens_->num_shards() == 1 ? "" : "s",
                  tokens_->num_samples(), block_size_, val_tokens_->num_samples(), tok.name(),
                  tok.vocab_size()) +
           (tokens_->coverage_note().empty() ? "" : "\n" + tokens_->coverage_note()) +
           (unchecked_.empty()
                ? ""
                : strfmt("\nnote: the %s split holds over %.0f GiB of tokens: its ids are checked as windows are read, "
                         "not at start-up (`%s verify %s` checks every one)",
                         unchecked_[0].c_str(), kIdCheckBytes / (1ull << 30), runnable("dptrain-data").c_str(),
                         tokens_->dir().c_str()));
}

const char* LanguageModelTask::unit() const { return "window"; }

int LanguageModelTask::tokens_per_sample() const { return block_size_; }

// The model predicts tokens 1..T of each T + 1 window.
double LanguageModelTask::target_bytes(const int* y, int n) const {
    const Tokenizer& tok = tokens_->tokenizer();
    const int W = block_size_ + 1;
    double bytes = 0;
    for (int w = 0; w < n; ++w)
        for (int t = 1; t < W; ++t) bytes += tok.bytes_of(y[(size_t)w * W + t]);
    return bytes;
}

std::string LanguageModelTask::tokenizer_kind() const { return tokens_->tokenizer().name(); }

std::string LanguageModelTask::tokenizer_table() const { return tokens_->tokenizer().table(); }

std::string LanguageModelTask::load_node_memory() {
    if (tokens_->mode() != IoMode::memory) return "";
    const double t0 = now_seconds();
    tokens_->load_node_memory();
    return strfmt("io memory: %.1f MiB of training tokens loaded into node-shared memory in %.2f s",
                  tokens_->memory_bytes() / 1048576.0, now_seconds() - t0);
}

} // namespace

std::unique_ptr<Task> Task::open(const Options& o, const Topology& topo) {
    if (language_model(o.model)) return std::make_unique<LanguageModelTask>(o, topo);
    return std::make_unique<TabularTask>(o, topo);
}

std::vector<Dataset*> Task::readers(int io_threads) {
    while ((int)extra_.size() + 1 < io_threads) extra_.push_back(train_->reopen());
    std::vector<Dataset*> r{train_.get()};
    for (auto& d : extra_) r.push_back(d.get());
    return r;
}

} // namespace dptrain
