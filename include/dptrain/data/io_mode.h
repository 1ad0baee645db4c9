// How ranks read the training shards (--io). Apart from the readers (shards.h, tokens.h), so that
// the option parser takes the type without HDF5 or MPI.
#pragma once

namespace dptrain {

// How a ShardSet reads rows (token shards: direct and memory, alike):
// - direct: each rank reads its own rows: one pread per run of consecutive rows for contiguous
//   shards, HDF5 hyperslab reads otherwise;
// - memory: the node's ranks load the split once into one node-shared buffer (each a share of
//   the rows, sequentially), then every read is a copy from memory;
// - collective: every rank opens the shards with MPI-IO and each read is one collective
//   H5Dread per shard (ranks with no rows in a shard take part with an empty selection), so
//   MPI-IO can merge the ranks' requests into large ones. Reads must then be issued by all ranks
//   in the same order: the Prefetcher reads in the training thread.
enum class IoMode { direct, memory, collective };

} // namespace dptrain
