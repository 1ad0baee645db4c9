// Which device decodes (generate, serve): the decoder factory, defined once per build and chosen
// at link time like make_device (src/backend/cuda/decoders.cpp with CUDA, no_cuda_decoders.cpp
// without). It needs no MPI and no Device, so an inference program links it alone.
// Not for: training's models (device.h).
#pragma once

#include "dptrain/config/options.h"
#include "dptrain/model/decoder.h"
#include "dptrain/model/gpt.h"

#include <memory>

namespace dptrain {

// --device cpu: the CPU's decoder; cuda: this host's first GPU (UserError naming why there is
// none); auto: the GPU when one is visible, else the CPU. weights bf16: the products read a bf16
// copy of the weights.
std::unique_ptr<Decoder> make_decoder(DeviceKind want, const GptConfig& cfg, Precision weights);

} // namespace dptrain
