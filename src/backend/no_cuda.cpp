// The Device factory of builds without CUDA: every rank computes on the CPU. --device cuda is an
// error naming the build; auto says why it took the CPU.
#include "dptrain/backend/device.h"

#include "dptrain/core/error.h"

#include <cblas.h>

namespace dptrain {

std::unique_ptr<Device> make_device(DeviceKind want, const Topology&) {
    if (want == DeviceKind::cuda)
        throw UserError("--device cuda: this build has no CUDA (build with nvcc present, or make CUDA=1)");
    return std::make_unique<Device>(want == DeviceKind::automatic ? "built without CUDA: the CPU backend trains" : "");
}

int gpu_count(std::string* why) {
    if (why) *why = "built without CUDA";
    return -1;
}

std::string nccl_version() { return ""; }

std::string build_features() { return strfmt("no CUDA | no NCCL | %s | OpenMP", openblas_get_config()); }

} // namespace dptrain
