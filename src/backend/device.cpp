// The CPU device: src/model's models, the host gradient path, sgemm's measured peak. Every build
// has it; backend/cuda/device.cpp extends it. Not for: choosing the device (make_device).
#include "dptrain/backend/device.h"

#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/error.h"
#include "dptrain/model/gpt.h"

namespace dptrain {

std::string Device::describe(const GradientPath&) const {
    const int n = cpu::get_threads();
    return strfmt("backend cpu, %d thread%s per rank", n, n == 1 ? "" : "s");
}

std::unique_ptr<Model> Device::make_model(const ModelSpec& spec) const {
    std::unique_ptr<Model> m;
    if (language_model(spec.kind)) m = make_cpu_lm(spec.gpt, spec.batch);
    else m = std::make_unique<Mlp>(spec.in, spec.hidden, spec.classes, spec.activation, spec.max_rows);
    m->set_precision(spec.precision);
    return m;
}

std::unique_ptr<GradientPath> Device::make_gradients(Model& model, float* params, Optimizer& opt,
                                                     const GradientSpec& spec, const Topology& topo) const {
    return make_host_gradients(model.layout(), params, opt, spec, topo);
}

std::unique_ptr<Pinned> Device::pin(const std::vector<std::pair<void*, size_t>>&) const { return nullptr; }

double Device::peak_gflops() const { return cpu::measure_sgemm_gflops(512, 0.2); }

} // namespace dptrain
