// What a run trains on, and the one place that knows the kind: tabular (the MLP on shards) or a
// language model (the GPT on token windows): the splits, the model, the batch, the banner's words.
// Not for: reading (data/), or the model's maths (model/).
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
    // Opens and cross-checks both splits of --data. Collective over the node (--io memory) or the
    // world (--io collective); throws UserError naming the file.
    static std::unique_ptr<Task> open(const Options& o, const Topology& topo);

    Dataset& train() const { return *train_; }
    Dataset& val() const { return *val_; }
    // Throws UserError for a vocabulary the options cannot hold.
    virtual ModelSpec model_spec(const Options& o) const = 0;
    // x: features; y: labels or token windows.
    virtual ModelBatch batch(const float* x, const int* y, int n) const = 0;
    virtual int eval_rows() const = 0;
    // "131072 training samples in 4 shards, ..."
    virtual std::string describe() const = 0;
    // "sample", or "window" of tokens.
    virtual const char* unit() const = 0;
    // 0: not a language model.
    virtual int tokens_per_sample() const = 0;
    // UTF-8 bytes the targets decode to, for bits per byte; 0 for tabular data.
    virtual double target_bytes(const int* y, int n) const {
        (void)y, (void)n;
        return 0;
    }
    // What checkpoints carry ("" for tabular data).
    virtual std::string tokenizer_kind() const { return ""; }
    virtual std::string tokenizer_table() const { return ""; }

    // --io memory, collective over the node: each rank loads a share; returns what was loaded and
    // how fast, "" in other modes.
    virtual std::string load_node_memory() = 0;
    // One per --io-threads, the first being train(); made after load_node_memory so all share it.
    std::vector<Dataset*> readers(int io_threads);

  protected:
    std::unique_ptr<Dataset> train_, val_;
    std::vector<std::unique_ptr<Dataset>> extra_;
};

} // namespace dptrain
