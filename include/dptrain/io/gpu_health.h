// GPU health from NVML (utilisation, memory, temperature, power), loaded at run time with dlopen
// so that CPU builds and machines without the NVIDIA driver need nothing. Not for: choosing or
// computing on GPUs (cuda_backend.h).
#pragma once

#include <string>

namespace dptrain {

struct GpuSample {
    std::string name;
    double util_pct = 0;      // share of the last sample period a kernel ran
    double mem_used_mib = 0, mem_total_mib = 0;
    double temp_c = 0, power_w = 0;
};

class GpuHealth {
  public:
    // Loads NVML (DPTRAIN_NVML_LIB names another library file; default libnvidia-ml.so.1) and
    // initialises it. On failure returns false with the reason in *why; never throws.
    bool open(std::string* why);
    bool is_open() const { return lib_ != nullptr; }
    int count() const { return count_; }
    // The NVML index of the GPU a process sees as CUDA device `cuda_index`, following
    // CUDA_VISIBLE_DEVICES when it lists indices (UUIDs and MIG names are matched by NVML);
    // -1 when there is none.
    int index_for_cuda_device(int cuda_index) const;
    // Reads one GPU; false with the reason in *why.
    bool sample(int index, GpuSample* out, std::string* why) const;
    ~GpuHealth();

  private:
    void* lib_ = nullptr;
    int count_ = 0;
    // Entry points, resolved at open() (types in gpu_health.cpp).
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
