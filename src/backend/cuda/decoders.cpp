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
    if (cfg.block_size > cuda::kMaxDecodeContext) {  // the GPU's decoding attention holds its scores in shared memory
        if (want == DeviceKind::cuda)
            throw UserError(strfmt("--device cuda decodes contexts of up to %d tokens, and this model's is %d; use "
                                   "--device cpu",
                                   cuda::kMaxDecodeContext, cfg.block_size));
        return make_cpu_decoder(cfg, weights);
    }
    return make_cuda_decoder(cfg, cuda::bind_device(host_rank, host_size), weights);
}

} // namespace dptrain
