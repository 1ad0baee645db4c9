// --io's type, apart from the readers (shards.h, tokens.h) so the option parser needs no HDF5 or MPI.
#pragma once

namespace dptrain {

// direct: each rank reads its rows. memory: the node loads the split once into shared memory.
// collective: one collective MPI-IO H5Dread per shard, empty selections included, so MPI-IO can
// merge requests; every rank must read in the same order, so reads run in the training thread.
enum class IoMode { direct, memory, collective };

} // namespace dptrain
