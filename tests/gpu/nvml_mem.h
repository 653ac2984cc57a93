/* The device's used memory from NVML, for the GPU programs that read a peak (peak_meter.c,
 * trace_replay.c). NVML is loaded at run time: the toolkit here ships no nvml.h, and only the
 * driver is needed. The shim does not interpose NVML, so a program under it reads the driver's
 * own figure. */
#ifndef VMM_GPU_NVML_MEM_H
#define VMM_GPU_NVML_MEM_H

#include <dlfcn.h>
#include <stddef.h>

/* nvmlMemory_t, version 1, as NVML declares it. */
typedef struct { unsigned long long total, free, used; } nvml_memory;
typedef int (*nvml_meminfo_fn)(void *, nvml_memory *);

/* The device named by its index (bus == NULL) or by its PCI bus id, and NVML's memory query:
 * the query, or NULL when NVML cannot be loaded or has no such device. */
static inline nvml_meminfo_fn nvml_mem_open(const char *bus, unsigned index, void **device)
{
	void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	int (*init)(void);
	int (*by_index)(unsigned, void **);
	int (*by_bus)(const char *, void **);
	nvml_meminfo_fn meminfo;

	if (!lib)
		return NULL;
	init = (int (*)(void))dlsym(lib, "nvmlInit_v2");
	by_index = (int (*)(unsigned, void **))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
	by_bus = (int (*)(const char *, void **))dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
	meminfo = (nvml_meminfo_fn)dlsym(lib, "nvmlDeviceGetMemoryInfo");
	if (!init || !meminfo || init())
		return NULL;
	if (bus ? !by_bus || by_bus(bus, device) : !by_index || by_index(index, device))
		return NULL;
	return meminfo;
}

#endif
