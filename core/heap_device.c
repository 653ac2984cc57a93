/* Device heaps and arenas (heap_device.h): creation at a device's first use (granularity, memory
 * size and the settings that depend on them), lookup, and teardown of everything a heap holds. */
#include "heap_device.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "heap_keep.h"
#include "heap_phys.h"
#include "heap_records.h"
#include "heap_slab.h"
#include "heap_va.h"

/* Every block of the device: each starts in exactly one page, and the blocks starting in one
 * page are address-adjacent from the page's first block on. */
static void free_all_blocks(struct devheap *dh)
{
	size_t n = atomic_load(&dh->nres);

	for (size_t k = 0; k < n; k++) {
		struct reservation *r = &dh->res[k];

		for (size_t p = 0; p < r->npages; p++) {
			struct blk *b = r->page_first[p], *nx;
			vmm_devptr page_end = r->base + (p + 1) * dh->gran;

			for (; b && b->addr < page_end; b = nx) {
				nx = b->next;
				if (b->state == BLK_SLAB)
					slab_free_struct(b->slab);
				free(b);
			}
		}
	}
}

void devheap_destroy(struct devheap *dh)
{
	/* Before the handles go: a kept descriptor would hold their memory. */
	keep_close(dh->core, keep_detach_all(dh));
	phys_teardown(dh);
	if (dh->ce && dh->ce_destroy)
		dh->ce_destroy(dh->ce);
	if (dh->backups && dh->backups_destroy)
		dh->backups_destroy(dh->backups);
	free_all_blocks(dh);
	va_release_all(dh);
	records_free_all(dh);
	for (int i = 0; i < dh->narenas; i++)
		free(dh->arenas[i]);
	for (struct blk *b = dh->blk_pool, *n; b; b = n) {
		n = b->next;
		free(b);
	}
	free(dh->shared);
	pthread_mutex_destroy(&dh->lock);
	free(dh);
}

/* Settled by the first device (other threads read the configuration without a lock: later
 * devices find nothing to change). */
static void settle_config(struct vmm_core *core, struct devheap *dh)
{
	if (!core->cfg.reserve_bytes)
		core->cfg.reserve_bytes = align_up(4 * dh->total_mem, dh->gran);
	if (core->cfg.small_max > dh->gran / 8)
		core->cfg.small_max = dh->gran / 8;
	/* Whole granules; "no limit" (SIZE_MAX) stays as it is rather than wrap round. */
	if (core->cfg.max_handle_bytes < SIZE_MAX - dh->gran &&
	    core->cfg.max_handle_bytes != align_up(core->cfg.max_handle_bytes, dh->gran))
		core->cfg.max_handle_bytes = align_up(core->cfg.max_handle_bytes, dh->gran);
	if (core->cfg.aligned_cut_max < SIZE_MAX - dh->gran)
		core->cfg.aligned_cut_max = align_up(core->cfg.aligned_cut_max, dh->gran);
}

static struct devheap *devheap_new(struct vmm_core *core, int dev, vmm_error *err)
{
	vmm_backend *be = core->be;
	struct devheap *dh = calloc(1, sizeof(*dh));
	size_t free_b;

	if (!dh || records_init(dh)) {
		free(dh);
		vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a device heap");
		return NULL;
	}
	dh->core = core;
	dh->dev = dev;
	if (be->granularity(be, dev, &dh->gran, err) ||
	    be->mem_info(be, dev, &free_b, &dh->total_mem, err)) {
		free(dh->hash);
		free(dh);
		return NULL;
	}
	settle_config(core, dh);
	/* Asleep and one granule: nothing takes it for memory to move, cut or grant. */
	dh->refill_mark.asleep = true;
	dh->refill_mark.size = dh->gran;
	pthread_mutex_init(&dh->lock, NULL);
	return dh;
}

struct devheap *heap_for(struct vmm_core *core, int dev, bool create, vmm_error *err)
{
	struct devheap *dh;

	if (dev < 0 || dev >= core->ndev) {
		vmm_fail(err, VMM_E_INVALID, 0, "no device %d (the backend has %d)", dev, core->ndev);
		return NULL;
	}
	dh = atomic_load_explicit(&core->heaps[dev], memory_order_acquire);
	if (dh || !create)
		return dh;
	pthread_mutex_lock(&core->init_lock);
	dh = core->heaps[dev];
	if (!dh) {
		dh = devheap_new(core, dev, err);
		if (dh)
			atomic_store_explicit(&core->heaps[dev], dh, memory_order_release);
	}
	pthread_mutex_unlock(&core->init_lock);
	return dh;
}

/* Reservations are append-only: no lock needed. */
struct devheap *heap_of_ptr(struct vmm_core *core, vmm_devptr ptr)
{
	for (int d = 0; d < core->ndev; d++) {
		struct devheap *dh = atomic_load_explicit(&core->heaps[d], memory_order_acquire);

		if (dh && res_of(dh, ptr))
			return dh;
	}
	return NULL;
}

struct arena *arena_find(struct devheap *dh, const char *tag, bool create, vmm_error *err)
{
	struct arena *a;

	if (!tag)
		tag = VMM_DEFAULT_TAG;
	for (int i = 0; i < dh->narenas; i++)
		if (!strcmp(dh->arenas[i]->tag, tag))
			return dh->arenas[i];
	if (!create)
		return NULL;
	if (strlen(tag) >= VMM_TAG_MAX || !tag[0]) {
		vmm_fail(err, VMM_E_INVALID, 0, "tag \"%.40s\" must have 1 to %d bytes", tag,
			 VMM_TAG_MAX - 1);
		return NULL;
	}
	if (dh->narenas == MAX_ARENAS) {
		vmm_fail(err, VMM_E_INVALID, 0, "too many tags on device %d (at most %d)", dh->dev,
			 MAX_ARENAS);
		return NULL;
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for an arena");
		return NULL;
	}
	a->dh = dh;
	strcpy(a->tag, tag);
	dh->arenas[dh->narenas++] = a;
	return a;
}
