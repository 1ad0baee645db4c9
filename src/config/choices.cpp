// The spellings of the options' closed sets of values, and name_of / parse_* over them.
#include "registry.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

namespace dptrain {
namespace config {

const Choices<ModelKind>& choices(ModelKind) {
    static const Choices<ModelKind> c = {{"mlp", ModelKind::mlp}, {"gpt", ModelKind::gpt}, {"llama", ModelKind::llama}};
    return c;
}
const Choices<Activation>& choices(Activation) {
    static const Choices<Activation> c = {{"relu", Activation::relu}, {"gelu", Activation::gelu}};
    return c;
}
const Choices<Optimizer::Kind>& choices(Optimizer::Kind) {
    static const Choices<Optimizer::Kind> c = {{"adamw", Optimizer::Kind::adamw}, {"sgd", Optimizer::Kind::sgd}};
    return c;
}
const Choices<IoMode>& choices(IoMode) {
    static const Choices<IoMode> c = {
        {"direct", IoMode::direct}, {"memory", IoMode::memory}, {"collective", IoMode::collective}};
    return c;
}
const Choices<AllreduceAlgo>& choices(AllreduceAlgo) {
    static const Choices<AllreduceAlgo> c = {{"flat", AllreduceAlgo::flat},
                                             {"hierarchical", AllreduceAlgo::hierarchical},
                                             {"auto", AllreduceAlgo::automatic}};
    return c;
}
const Choices<Overlap>& choices(Overlap) {
    static const Choices<Overlap> c = {{"on", Overlap::on}, {"off", Overlap::off}, {"auto", Overlap::automatic}};
    return c;
}
const Choices<DType>& choices(DType) {
    static const Choices<DType> c = {{dtype_name(DType::f32), DType::f32}, {dtype_name(DType::bf16), DType::bf16}};
    return c;
}
const Choices<OnNonfinite>& choices(OnNonfinite) {
    static const Choices<OnNonfinite> c = {{"skip", OnNonfinite::skip}, {"stop", OnNonfinite::stop}};
    return c;
}
const Choices<MetricsFormat>& choices(MetricsFormat) {
    static const Choices<MetricsFormat> c = {{"jsonl", MetricsFormat::jsonl}, {"emf", MetricsFormat::emf}};
    return c;
}
const Choices<ProgressMode>& choices(ProgressMode) {
    static const Choices<ProgressMode> c = {
        {"auto", ProgressMode::automatic}, {"tty", ProgressMode::tty}, {"plain", ProgressMode::plain}};
    return c;
}
const Choices<GpuHealthMode>& choices(GpuHealthMode) {
    static const Choices<GpuHealthMode> c = {
        {"auto", GpuHealthMode::automatic}, {"on", GpuHealthMode::on}, {"off", GpuHealthMode::off}};
    return c;
}
const Choices<DeviceKind>& choices(DeviceKind) {
    static const Choices<DeviceKind> c = {
        {"cpu", DeviceKind::cpu}, {"cuda", DeviceKind::cuda}, {"auto", DeviceKind::automatic}};
    return c;
}
const Choices<Precision>& choices(Precision) {
    static const Choices<Precision> c = {{"fp32", Precision::fp32}, {"bf16", Precision::bf16}};
    return c;
}
const Choices<AttentionKind>& choices(AttentionKind) {
    static const Choices<AttentionKind> c = {{"matmul", AttentionKind::matmul}, {"flash", AttentionKind::flash}};
    return c;
}
const Choices<Recompute>& choices(Recompute) {
    static const Choices<Recompute> c = {
        {"none", Recompute::none}, {"attention", Recompute::attention}, {"block", Recompute::block}};
    return c;
}
const Choices<GpuState>& choices(GpuState) {
    static const Choices<GpuState> c = {
        {"auto", GpuState::automatic}, {"device", GpuState::device}, {"host", GpuState::host}};
    return c;
}

// A value of an unsigned option: digits only, within 64 bits.
unsigned long long parse_whole(const char* option, const std::string& text) {
    const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
    errno = 0;
    const unsigned long long v = digits ? std::strtoull(text.c_str(), nullptr, 10) : 0;
    if (!digits || errno == ERANGE)
        throw UserError(strfmt("--%s '%s' must be a whole number from 0 to %llu", option, text.c_str(),
                               std::numeric_limits<unsigned long long>::max()));
    return v;
}


} // namespace config

using config::parse_choice;
using config::spelling;

const char* name_of(ModelKind v) { return spelling(v); }
const char* name_of(Activation v) { return spelling(v); }
const char* name_of(Optimizer::Kind v) { return spelling(v); }
const char* name_of(IoMode v) { return spelling(v); }
const char* name_of(AllreduceAlgo v) { return spelling(v); }
const char* name_of(Overlap v) { return spelling(v); }
const char* name_of(DType v) { return spelling(v); }
const char* name_of(OnNonfinite v) { return spelling(v); }
const char* name_of(MetricsFormat v) { return spelling(v); }
const char* name_of(ProgressMode v) { return spelling(v); }
const char* name_of(GpuHealthMode v) { return spelling(v); }
const char* name_of(DeviceKind v) { return spelling(v); }
const char* name_of(Precision v) { return spelling(v); }
const char* name_of(AttentionKind v) { return spelling(v); }
const char* name_of(Recompute v) { return spelling(v); }
const char* name_of(GpuState v) { return spelling(v); }

IoMode parse_io_mode(const std::string& s) { return parse_choice<IoMode>("io", s); }
Precision parse_precision(const std::string& s) { return parse_choice<Precision>("precision", s); }
DeviceKind parse_device_kind(const std::string& s) { return parse_choice<DeviceKind>("device", s); }

} // namespace dptrain
