// The decoder factory of builds without CUDA (backend/decoders.h): the CPU decodes; --device cuda
// is an error naming the build.
#include "dptrain/backend/decoders.h"

#include "dptrain/core/error.h"

namespace dptrain {

std::unique_ptr<Decoder> make_decoder(DeviceKind want, const GptConfig& cfg, Precision weights, int, int) {
    if (want == DeviceKind::cuda)
        throw UserError("--device cuda: this build has no CUDA (build with nvcc present, or make CUDA=1)");
    return make_cpu_decoder(cfg, weights);
}

} // namespace dptrain
