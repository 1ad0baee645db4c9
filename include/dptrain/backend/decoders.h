// Which device decodes: chosen at link time like make_device, with no MPI or Device, so an
// inference program links it alone. Not for: training's models (device.h).
#pragma once

#include "dptrain/config/options.h"
#include "dptrain/model/decoder.h"
#include "dptrain/model/gpt.h"

#include <memory>

namespace dptrain {

// cuda: a GPU of this host (UserError naming why none); auto: a GPU if visible, else the CPU. The
// GPU is the one training binds for host rank `host_rank` of `host_size` (one process: the first).
std::unique_ptr<Decoder> make_decoder(DeviceKind want, const GptConfig& cfg, Precision weights, int host_rank = 0,
                                      int host_size = 1);

} // namespace dptrain
