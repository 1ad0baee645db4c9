// NVML through dlopen, its few types declared here (stable across versions), so building needs no
// NVIDIA header or library. Not for: CUDA (backend/).
#include "dptrain/io/gpu_health.h"

#include "dptrain/core/error.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

namespace dptrain {

namespace {

using nvmlReturn_t = int;  // NVML_SUCCESS = 0
using nvmlDevice_t = void*;
struct nvmlUtilization_t {
    unsigned int gpu, memory;
};
struct nvmlMemory_t {
    unsigned long long total, free, used;
};
constexpr int kNvmlTemperatureGpu = 0;

using InitFn = nvmlReturn_t (*)();
using CountFn = nvmlReturn_t (*)(unsigned int*);
using ByIndexFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using ByUuidFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
using NameFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using UtilFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);
using MemoryFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using TempFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*);
using PowerFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);
using ErrorStringFn = const char* (*)(nvmlReturn_t);

template <typename Fn>
Fn as(void* p) {
    return reinterpret_cast<Fn>(p);
}

} // namespace

bool GpuHealth::open(std::string* why) {
    const char* path = std::getenv("DPTRAIN_NVML_LIB");
    if (!path || !*path) path = "libnvidia-ml.so.1";
    lib_ = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
        const char* e = dlerror();
        if (why) *why = strfmt("%s not loaded (%s): no NVIDIA driver here", path, e ? e : "?");
        return false;
    }
    auto sym = [&](const char* a, const char* b) {
        void* p = dlsym(lib_, a);
        return p ? p : (b ? dlsym(lib_, b) : nullptr);
    };
    init_ = sym("nvmlInit_v2", "nvmlInit");
    shutdown_ = sym("nvmlShutdown", nullptr);
    get_count_ = sym("nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
    by_index_ = sym("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
    by_uuid_ = sym("nvmlDeviceGetHandleByUUID", nullptr);
    name_ = sym("nvmlDeviceGetName", nullptr);
    util_ = sym("nvmlDeviceGetUtilizationRates", nullptr);
    memory_ = sym("nvmlDeviceGetMemoryInfo", nullptr);
    temp_ = sym("nvmlDeviceGetTemperature", nullptr);
    power_ = sym("nvmlDeviceGetPowerUsage", nullptr);
    error_string_ = sym("nvmlErrorString", nullptr);
    if (!init_ || !get_count_ || !by_index_ || !util_ || !memory_) {
        if (why) *why = strfmt("%s lacks the NVML functions dptrain reads", path);
        dlclose(lib_);
        lib_ = nullptr;
        return false;
    }
    nvmlReturn_t rc = as<InitFn>(init_)();
    unsigned int n = 0;
    if (rc == 0) rc = as<CountFn>(get_count_)(&n);
    if (rc != 0) {
        if (why)
            *why = strfmt("NVML: %s", error_string_ ? as<ErrorStringFn>(error_string_)(rc) : strfmt("error %d", rc).c_str());
        dlclose(lib_);
        lib_ = nullptr;
        return false;
    }
    count_ = (int)n;
    return true;
}

GpuHealth::~GpuHealth() {
    if (!lib_) return;
    if (shutdown_) as<InitFn>(shutdown_)();
    dlclose(lib_);
}

int GpuHealth::index_for_cuda_device(int cuda_index) const {
    if (!lib_ || cuda_index < 0) return -1;
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (!visible || !*visible) return cuda_index < count_ ? cuda_index : -1;
    std::vector<std::string> ids;
    std::stringstream ss(visible);
    for (std::string id; std::getline(ss, id, ',');) ids.push_back(id);
    if (cuda_index >= (int)ids.size()) return -1;
    const std::string& id = ids[cuda_index];
    char* end = nullptr;
    long v = std::strtol(id.c_str(), &end, 10);
    if (end && *end == 0 && !id.empty()) return v >= 0 && v < count_ ? (int)v : -1;
    // A UUID: find the NVML device with it.
    if (!by_uuid_) return -1;
    nvmlDevice_t want = nullptr;
    if (as<ByUuidFn>(by_uuid_)(id.c_str(), &want) != 0) return -1;
    for (int i = 0; i < count_; ++i) {
        nvmlDevice_t d = nullptr;
        if (as<ByIndexFn>(by_index_)((unsigned)i, &d) == 0 && d == want) return i;
    }
    return -1;
}

bool GpuHealth::sample(int index, GpuSample* out, std::string* why) const {
    if (!lib_ || index < 0 || index >= count_) {
        if (why) *why = strfmt("no GPU %d", index);
        return false;
    }
    nvmlDevice_t d = nullptr;
    nvmlReturn_t rc = as<ByIndexFn>(by_index_)((unsigned)index, &d);
    nvmlUtilization_t u{};
    nvmlMemory_t m{};
    if (rc == 0) rc = as<UtilFn>(util_)(d, &u);
    if (rc == 0) rc = as<MemoryFn>(memory_)(d, &m);
    if (rc != 0) {
        if (why)
            *why = strfmt("NVML on GPU %d: %s", index,
                          error_string_ ? as<ErrorStringFn>(error_string_)(rc) : strfmt("error %d", rc).c_str());
        return false;
    }
    char name[96] = "GPU";
    if (name_) as<NameFn>(name_)(d, name, sizeof name);
    unsigned int temp = 0, milliwatts = 0;
    if (temp_) as<TempFn>(temp_)(d, kNvmlTemperatureGpu, &temp);  // optional readings: 0 when absent
    if (power_) as<PowerFn>(power_)(d, &milliwatts);
    out->name = name;
    out->util_pct = u.gpu;
    out->mem_used_mib = (double)m.used / 1048576.0;
    out->mem_total_mib = (double)m.total / 1048576.0;
    out->temp_c = temp;
    out->power_w = milliwatts / 1000.0;
    return true;
}

std::string format_gpu_sample(const GpuSample& s) {
    return strfmt("%s: %.0f%% busy, %.1f/%.1f GiB, %.0f C, %.0f W", s.name.c_str(), s.util_pct, s.mem_used_mib / 1024.0,
                  s.mem_total_mib / 1024.0, s.temp_c, s.power_w);
}

} // namespace dptrain
