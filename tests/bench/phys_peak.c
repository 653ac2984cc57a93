/* The device's physical memory during a replay (phys_peak.h), read from simdev through dlsym so
 * that the benchmark still runs on a real driver. */
#include "phys_peak.h"

#include <dlfcn.h>
#include <string.h>

typedef void (*memory_bytes_fn)(size_t *live, size_t *peak);
typedef void (*peak_reset_fn)(void);

static memory_bytes_fn memory_bytes;

void phys_peak_start(struct phys_peak *p)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	peak_reset_fn reset = lib ? (peak_reset_fn)dlsym(lib, "simdev_memory_peak_reset") : NULL;

	memset(p, 0, sizeof(*p));
	memory_bytes = lib ? (memory_bytes_fn)dlsym(lib, "simdev_memory_bytes") : NULL;
	if (!memory_bytes || !reset)
		return;
	reset();
	p->known = true;
}

void phys_peak_sample(struct phys_peak *p, vmm_core *core, int dev, uint64_t native)
{
	size_t live = 0, peak = 0;
	vmm_stats s;

	if (!p->known)
		return;
	memory_bytes(&live, &peak);
	if (live <= p->sampled)
		return;
	vmm_stats_get(core, dev, NULL, &s, NULL);
	p->sampled = live;
	p->native = native;
	p->quarantined = s.quarantined_bytes;
	p->cached = s.cached_bytes;
	p->mapped = s.mapped_bytes;
	p->live_usable = s.mapped_bytes - s.cached_bytes;
}

uint64_t native_size(uint64_t n)
{
	const uint64_t mib = 1ull << 20;

	return n > mib ? (n + 2 * mib - 1) & ~(2 * mib - 1) : (n + 511) & ~511ull;
}

void phys_peak_finish(struct phys_peak *p)
{
	size_t live = 0, peak = 0;

	if (!p->known)
		return;
	memory_bytes(&live, &peak);
	p->peak = peak;
}
