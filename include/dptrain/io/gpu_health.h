// GPU health from NVML, dlopen'ed so CPU builds and driverless machines need nothing.
// Not for: choosing or computing on GPUs (cuda_backend.h).
#pragma once

#include <string>

namespace dptrain {

struct GpuSample {
    std::string name;
    double util_pct = 0;      // % of the sample period a kernel ran
    double mem_used_mib = 0, mem_total_mib = 0;
    double temp_c = 0, power_w = 0;
};

class GpuHealth {
  public:
    // DPTRAIN_NVML_LIB overrides the library. Never throws.
    bool open(std::string* why);
    bool is_open() const { return lib_ != nullptr; }
    int count() const { return count_; }
    // Through CUDA_VISIBLE_DEVICES (indices, UUIDs or MIG names); -1: none.
    int index_for_cuda_device(int cuda_index) const;
    bool sample(int index, GpuSample* out, std::string* why) const;
    ~GpuHealth();

  private:
    void* lib_ = nullptr;
    int count_ = 0;
    // Entry points (types in gpu_health.cpp).
    void* init_ = nullptr;
    void* shutdown_ = nullptr;
    void* get_count_ = nullptr;
    void* by_index_ = nullptr;
    void* by_uuid_ = nullptr;
    void* name_ = nullptr;
    void* util_ = nullptr;
    void* memory_ = nullptr;
    void* temp_ = nullptr;
    void* power_ = nullptr;
    void* error_string_ = nullptr;
};

// "NVIDIA H200: 87% busy, 61.2/139.8 GiB, 54 C, 512 W"
std::string format_gpu_sample(const GpuSample& s);

} // namespace dptrain
