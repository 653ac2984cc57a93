/* Block services of an arena (heap_fit.h): find, else sync, else grow; carve the block found. */
#include "heap_fit.h"

#include "heap_blocks.h"
#include "heap_grow.h"
#include "heap_phys.h"
#include "heap_records.h"
#include "heap_slab.h"

static uint64_t device_free_bytes(struct devheap *dh)
{
	vmm_backend *be = dh->core->be;
	size_t f = 0, t = 0;

	if (be->mem_info(be, dh->dev, &f, &t, NULL))
		return 0;
	return f;
}

vmm_status heap_reclaim_capped(struct devheap *dh, struct arena *who, vmm_error *err)
{
	vmm_status st = heap_reclaim(dh, who, err);

	if (!st && dh->core->cfg.cache_limit != SIZE_MAX)
		heap_release_free_handles(dh, dh->core->cfg.cache_limit);
	return st;
}

/* Does a miss synchronize (and so reclaim the whole quarantine) rather than grow? Growth is for
 * good (the heap keeps what it maps), a sync costs once: so a miss syncs as soon as
 * QUARANTINE_MIN waits in quarantine, even when that is less than the request (reclaimed blocks
 * coalesce with free neighbours, and the arena's free tail is extended by the rest only). Below
 * it the heap grows, so that a malloc/free cycle of one tensor does not wait on the device each
 * time. The older threshold, max(64 MiB, mapped/8), let the peak grow by up to 1/8 of it. */
#define QUARANTINE_MIN (64ull << 20)
static bool miss_syncs(struct devheap *dh)
{
	return dh->quar_total >= QUARANTINE_MIN;
}

/* A free block of need bytes already there, or after one sync made all of the quarantine
 * reusable (a failed sync, e.g. during stream capture, means growth). */
static struct blk *find_or_reclaim(struct arena *a, size_t need)
{
	struct blk *b = free_index_find(a, need);

	if (!b && miss_syncs(a->dh) && heap_reclaim_capped(a->dh, a, NULL) == VMM_OK)
		b = free_index_find(a, need);
	return b;
}

static void fail_oom(struct devheap *dh, size_t size, const vmm_error *local, vmm_error *err)
{
	vmm_fail(err, VMM_E_OOM, local->driver_code,
		 "device %d: cannot allocate %zu bytes: %llu bytes free on the device, %llu cached in "
		 "the heap (%s)",
		 dh->dev, size, (unsigned long long)device_free_bytes(dh),
		 (unsigned long long)(dh->mapped_total - dh->live_total), local->msg);
}

/* Grow for need bytes and return a free block that holds them. When the driver is out, the
 * ladder: sync and reclaim the quarantine, give back empty slabs, so that wholly free handles
 * can move here; then try once more. */
static struct blk *grow_for(struct arena *a, size_t need, size_t size, vmm_error *err)
{
	struct devheap *dh = a->dh;
	struct blk *b = NULL;
	vmm_error local;
	vmm_status st = arena_grow(a, need, &local);

	if (st == VMM_E_OOM) {
		heap_reclaim_capped(dh, a, NULL);
		for (int i = 0; i < dh->narenas; i++)
			slab_release_empty(dh, dh->arenas[i]);
		b = free_index_find(a, need);
		if (!b)
			st = arena_grow(a, need, &local);
	}
	if (!b && st) {
		if (st == VMM_E_OOM)
			fail_oom(dh, size, &local, err);
		else if (err)
			*err = local;
		return NULL;
	}
	if (!b)
		b = free_index_find(a, need);
	if (!b)
		vmm_fail(err, VMM_E_OOM, 0, "device %d: no block of %zu bytes after growth", dh->dev,
			 need);
	return b;
}

/* Cut the free block b down to an aligned used block of size bytes (the rest stays free). */
static struct blk *carve(struct arena *a, struct blk *b, size_t size, size_t align,
			 vmm_error *err)
{
	struct devheap *dh = a->dh;

	free_index_remove(a, b);
	if (align > HEAP_ALIGN && (b->addr & (align - 1))) {
		size_t pad = align_up(b->addr, align) - b->addr;
		struct blk *t = blk_split(dh, b, pad);

		free_index_insert(a, b);
		if (!t) {
			vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a block");
			return NULL;
		}
		free_index_remove(a, t);
		b = t;
	}
	blk_split(dh, b, size);
	b->state = BLK_USED;
	return b;
}

struct blk *arena_alloc_block(struct arena *a, size_t size, size_t align, vmm_error *err)
{
	size_t need = size + (align > HEAP_ALIGN ? align - HEAP_ALIGN : 0);
	struct blk *b = find_or_reclaim(a, need);

	if (!b)
		b = grow_for(a, need, size, err);
	return b ? carve(a, b, size, align, err) : NULL;
}

vmm_status arena_alloc_small(struct arena *a, size_t size, struct alloc *rec, vmm_error *err)
{
	int cls = size_class(size, a->dh->core->cfg.small_max);
	struct slab *s = a->partial[cls];

	if (!s) {
		struct blk *b;

		s = slab_new(a, cls, err);
		if (!s)
			return err ? err->status : VMM_E_OOM;
		b = arena_alloc_block(a, a->dh->gran, HEAP_ALIGN, err);
		if (!b) {
			slab_free_struct(s);
			return err ? err->status : VMM_E_OOM;
		}
		slab_attach(s, b);
	}
	slab_take_slot(s, rec);
	return VMM_OK;
}
