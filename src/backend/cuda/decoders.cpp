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
    // The GPU's decoding attention holds a row's scores in shared memory, and a head's outputs in
    // eight values a lane.
    const int head = cfg.n_head > 0 ? cfg.n_embd / cfg.n_head : 0;
    if (cfg.block_size > cuda::kMaxDecodeContext || head > cuda::kMaxDecodeHead) {
        if (want == DeviceKind::cuda)
            throw UserError(strfmt("--device cuda decodes contexts of up to %d tokens and heads of up to %d values, "
                                   "and this model's are %d and %d; use --device cpu",
                                   cuda::kMaxDecodeContext, cuda::kMaxDecodeHead, cfg.block_size, head));
        return make_cpu_decoder(cfg, weights);
    }
    return make_cuda_decoder(cfg, cuda::bind_device(host_rank, host_size), weights);
}

} // namespace dptrain
