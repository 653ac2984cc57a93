/* A reset of a device's primary context (heap.h, vmm_device_reset): what the core made in that
 * context goes with it, and, as natively, so do the program's allocations and their memory. */
#include <stdlib.h>

#include "heap_device.h"
#include "heap_internal.h"
#include "log.h"

/* The bases of the live allocations of dh (not those waiting in quarantine: already freed).
 * NULL with *n == 0 when there are none or no host memory for the list. */
static vmm_devptr *live_bases(struct devheap *dh, size_t *n)
{
	vmm_devptr *v = NULL;
	size_t cap;

	*n = 0;
	pthread_mutex_lock(&dh->lock);
	cap = dh->hash_count;
	v = cap ? malloc(cap * sizeof(*v)) : NULL;
	for (size_t b = 0; v && b <= dh->hash_mask; b++)
		for (struct alloc *r = dh->hash[b]; r && *n < cap; r = r->hnext)
			if (!r->quarantined)
				v[(*n)++] = r->base;
	pthread_mutex_unlock(&dh->lock);
	return v;
}

int vmm_device_reset(vmm_core *core, int dev, bool free_all, int (*reset)(void *arg), void *arg,
		     void (*freed)(vmm_devptr base))
{
	struct devheap *dh = heap_for(core, dev, false, NULL);
	vmm_copy_engine *ce = NULL;
	vmm_devptr *bases;
	size_t n, nfreed = 0, nlost;
	int rc;

	if (!dh)
		return reset(arg);
	pthread_mutex_lock(&dh->lock);
	ce = dh->ce;
	pthread_mutex_unlock(&dh->lock);
	rc = ce ? vmm_copy_engine_reset(ce, reset, arg) : reset(arg);
	if (rc != 0)
		return rc;
	/* The host backups' registrations went with the context: pinned again at their next use,
	 * else copies into them run at pageable speed (a fifth of pinned on the H100). */
	nlost = vmm_host_buf_pins_lost(core->be);
	if (nlost)
		vmm_log(VMM_LOG_DEBUG, "device %d: the reset ended the registration of %zu host "
			"backup segments: they are pinned again at their next use", dev, nlost);
	if (!free_all)
		return rc;
	/* As the driver frees the context's allocations. A free the program made meanwhile on
	 * another thread finds the record gone and is refused, as natively after a reset. */
	bases = live_bases(dh, &n);
	for (size_t i = 0; i < n; i++) {
		if (vmm_free(core, bases[i], NULL) != VMM_OK)
			continue;
		nfreed++;
		if (freed)
			freed(bases[i]);
	}
	free(bases);
	/* The reset ended the context's work: what waits in quarantine (freed before it, or just
	 * now) is used by nothing, and a synchronization now would name the reset context. */
	pthread_mutex_lock(&dh->lock);
	heap_reclaim_synced(dh);
	pthread_mutex_unlock(&dh->lock);
	/* And the memory goes back to the device, where the program (or another process) expects
	 * to find it after a reset. */
	if (vmm_trim(core, dev, NULL) != VMM_OK)
		vmm_log(VMM_LOG_WARN, "device %d: after a reset of its primary context the heap's "
			"free memory could not all be given back", dev);
	vmm_log(VMM_LOG_INFO, "device %d: the primary context ended (a reset or its last release): "
		"%zu allocations freed and their memory given back, as the driver does", dev, nfreed);
	return rc;
}
