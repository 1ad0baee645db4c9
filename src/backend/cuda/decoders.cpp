// The decoder factory of builds with CUDA (backend/decoders.h): a GPU's decoder where --device
// asks for one and the host has it, the CPU's otherwise.
#include "dptrain/backend/decoders.h"

#include "dptrain/backend/cuda/decoder.h"
#include "dptrain/core/error.h"

namespace dptrain {

std::unique_ptr<Decoder> make_decoder(DeviceKind want, const GptConfig& cfg, Precision weights, int host_rank,
                                      int host_size) {
    if (want == DeviceKind::cpu) return make_cpu_decoder(cfg, weights);
    std::string why;
    if (cuda::device_count(&why) == 0) {
        if (want == DeviceKind::cuda) throw UserError(strfmt("--device cuda: no GPU (%s); use --device cpu", why.c_str()));
        return make_cpu_decoder(cfg, weights);
    }
    return make_cuda_decoder(cfg, cuda::bind_device(host_rank, host_size), weights);
}

} // namespace dptrain
