// What a run trains on, and the one place that knows the kind: a tabular task (the MLP on
// /features and /labels shards) or a language-model task (the GPT on token windows). It opens the
// splits, says which model they train, how a reader's batch reaches that model, and what the
// banner and checkpoints say of the data. Not for: reading (data/), or the model's maths (model/).
#pragma once

#include "dptrain/backend/device.h"
#include "dptrain/comm/topology.h"
#include "dptrain/config/options.h"
#include "dptrain/data/shards.h"
#include "dptrain/model/model.h"

#include <memory>
#include <string>
#include <vector>

namespace dptrain {

class Task {
  public:
    virtual ~Task() = default;
    // Opens the training and validation splits of --data and checks they agree. Collective over
    // the node (--io memory) or the world (--io collective); throws UserError naming the file.
    static std::unique_ptr<Task> open(const Options& o, const Topology& topo);

    Dataset& train() const { return *train_; }
    Dataset& val() const { return *val_; }
    // The model these data train, as the options shape it; throws UserError for a vocabulary the
    // options cannot hold.
    virtual ModelSpec model_spec(const Options& o) const = 0;
    // A reader's batch of n samples (features x and integers y: labels or token windows) as the
    // model reads it.
    virtual ModelBatch batch(const float* x, const int* y, int n) const = 0;
    // Validation samples per forward pass.
    virtual int eval_rows() const = 0;
    // The banner's data line ("131072 training samples in 4 shards, ...").
    virtual std::string describe() const = 0;
    // One sample, as the banner names it: "sample", or "window" of tokens.
    virtual const char* unit() const = 0;
    // Tokens a sample trains (0: not a language model), for tokens/s.
    virtual int tokens_per_sample() const = 0;
    // The bytes of text that n samples' targets stand for (their tokens decoded to UTF-8), for bits
    // per byte; 0 for tabular data.
    virtual double target_bytes(const int* y, int n) const {
        (void)y, (void)n;
        return 0;
    }
    // The tokenizer checkpoints carry: its kind ("" for tabular data) and its table.
    virtual std::string tokenizer_kind() const { return ""; }
    virtual std::string tokenizer_table() const { return ""; }

    // --io memory: the node's ranks load the training split into node-shared memory, each a share
    // (collective over the node); returns what was loaded and how fast, "" in other modes.
    virtual std::string load_node_memory() = 0;
    // The training split's readers, one per --io-threads: the first is train(), the others read
    // the same shards through handles of their own (made after load_node_memory, so they share
    // the loaded copy).
    std::vector<Dataset*> readers(int io_threads);

  protected:
    std::unique_ptr<Dataset> train_, val_;
    std::vector<std::unique_ptr<Dataset>> extra_;
};

} // namespace dptrain
