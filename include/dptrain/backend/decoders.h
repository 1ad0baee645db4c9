// Which device decodes: chosen at link time like make_device, with no MPI or Device, so an
// inference program links it alone. Not for: training's models (device.h).
#pragma once

#include "dptrain/config/options.h"
#include "dptrain/model/decoder.h"
#include "dptrain/model/gpt.h"

#include <memory>

namespace dptrain {

// cuda: this host's first GPU (UserError naming why none); auto: a GPU if visible, else the CPU.
std::unique_ptr<Decoder> make_decoder(DeviceKind want, const GptConfig& cfg, Precision weights);

} // namespace dptrain
