/* A stand-in for libnvidia-ml.so.1 with the entry points dptrain reads (src/gpu_health.cpp), for
 * tests on machines without a GPU: FAKE_NVML_GPUS devices (default 2), each FAKE_NVML_UTIL percent
 * busy (default 20), 1 GiB of 80 GiB used, 40 C, 300 W. Loaded through DPTRAIN_NVML_LIB. */
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned int gpu, memory;
} util_t;
typedef struct {
    unsigned long long total, free, used;
} mem_t;

static int env_int(const char* name, int fallback) {
    const char* v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}
static long slots[64];

int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
const char* nvmlErrorString(int rc) { return rc ? "fake error" : "success"; }
int nvmlDeviceGetCount_v2(unsigned int* n) {
    *n = (unsigned int)env_int("FAKE_NVML_GPUS", 2);
    return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void** d) {
    if (i >= 64 || i >= (unsigned int)env_int("FAKE_NVML_GPUS", 2)) return 2; /* invalid argument */
    *d = &slots[i];
    return 0;
}
int nvmlDeviceGetName(void* d, char* name, unsigned int len) {
    (void)d;
    strncpy(name, "Fake GPU", len);
    return 0;
}
int nvmlDeviceGetUtilizationRates(void* d, util_t* u) {
    (void)d;
    u->gpu = (unsigned int)env_int("FAKE_NVML_UTIL", 20);
    u->memory = 10;
    return 0;
}
int nvmlDeviceGetMemoryInfo(void* d, mem_t* m) {
    (void)d;
    m->total = 80ull << 30;
    m->used = 1ull << 30;
    m->free = m->total - m->used;
    return 0;
}
int nvmlDeviceGetTemperature(void* d, int sensor, unsigned int* t) {
    (void)d, (void)sensor;
    *t = 40;
    return 0;
}
int nvmlDeviceGetPowerUsage(void* d, unsigned int* mw) {
    (void)d;
    *mw = 300000;
    return 0;
}
