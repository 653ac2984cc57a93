/* The core allocator's public API (heap.h): per-device heaps created at first use, per-tag
 * arenas, allocation and free with quarantine, lookup, trim, peer access and statistics. */
#include "heap_internal.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

#define GIB (1ull << 30)
#define DEFAULT_SMALL_MAX (64u << 10)

void vmm_config_defaults(vmm_config *cfg)
{
	cfg->cache_limit = SIZE_MAX;   /* keep freed memory, like a caching allocator; trim gives it back */
	cfg->reserve_bytes = 0;        /* 4 x device memory, decided per device */
	cfg->max_handle_bytes = GIB;
	cfg->small_max = DEFAULT_SMALL_MAX;
}

vmm_status vmm_core_create(vmm_backend *be, const vmm_config *cfg, vmm_core **out, vmm_error *err)
{
	struct vmm_core *c;
	vmm_status st;

	*out = NULL;
	if (!be)
		return vmm_fail(err, VMM_E_INVALID, 0, "no backend");
	c = calloc(1, sizeof(*c));
	if (!c)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for the core");
	vmm_config_defaults(&c->cfg);
	if (cfg) {
		if (cfg->cache_limit)
			c->cfg.cache_limit = cfg->cache_limit;
		c->cfg.reserve_bytes = cfg->reserve_bytes;
		if (cfg->max_handle_bytes)
			c->cfg.max_handle_bytes = cfg->max_handle_bytes;
		if (cfg->small_max)
			c->cfg.small_max = cfg->small_max;
	}
	st = be->device_count(be, &c->ndev, err);
	if (st) {
		free(c);
		return st;
	}
	if (c->ndev > VMM_MAX_DEVICES)
		c->ndev = VMM_MAX_DEVICES;
	c->be = be;
	pthread_mutex_init(&c->init_lock, NULL);
	*out = c;
	return VMM_OK;
}

vmm_backend *vmm_core_backend(vmm_core *core)
{
	return core->be;
}

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
				if (b->state == BLK_SLAB) {
					free(b->slab->free_stack);
					free(b->slab->slots);
					free(b->slab);
				}
				free(b);
			}
		}
	}
}

static void devheap_destroy(struct devheap *dh)
{
	vmm_backend *be = dh->core->be;

	for (struct phandle *h = dh->handles, *n; h; h = n) {
		n = h->next;
		if (h->va && !h->asleep)
			phys_unmap(be, h->va, h->size);
		if (!h->asleep)
			phys_release(be, h->h);
		if (h->backup.ptr && dh->backup_free)
			dh->backup_free(be, &h->backup);
		free(h);
	}
	if (dh->ce && dh->ce_destroy)
		dh->ce_destroy(dh->ce);
	free_all_blocks(dh);
	va_release_all(dh);
	for (int i = 0; i < dh->narenas; i++) {
		struct arena *a = dh->arenas[i];

		for (struct alloc *r = a->quar_head, *n; r; r = n) {
			n = r->qnext;
			free(r);
		}
		free(a);
	}
	for (size_t i = 0; i <= dh->hash_mask && dh->hash; i++) {
		for (struct alloc *r = dh->hash[i], *n; r; r = n) {
			n = r->hnext;
			free(r);
		}
	}
	free(dh->hash);
	for (struct blk *b = dh->blk_pool, *n; b; b = n) {
		n = b->next;
		free(b);
	}
	for (struct alloc *r = dh->alloc_pool, *n; r; r = n) {
		n = r->qnext;
		free(r);
	}
	pthread_mutex_destroy(&dh->lock);
	free(dh);
}

void vmm_core_destroy(vmm_core *core)
{
	if (!core)
		return;
	for (int d = 0; d < VMM_MAX_DEVICES; d++)
		if (core->heaps[d])
			devheap_destroy(core->heaps[d]);
	pthread_mutex_destroy(&core->init_lock);
	free(core);
}

static vmm_status hash_init(struct devheap *dh)
{
	dh->hash = calloc(1024, sizeof(*dh->hash));
	dh->hash_mask = 1023;
	return dh->hash ? VMM_OK : VMM_E_HOST_OOM;
}

static size_t hash_of(struct devheap *dh, vmm_devptr p)
{
	return (size_t)(((p >> 8) * 0x9E3779B97F4A7C15ull) >> 20) & dh->hash_mask;
}

static void hash_grow(struct devheap *dh)
{
	size_t old = dh->hash_mask + 1, n = old * 2;
	struct alloc **t = calloc(n, sizeof(*t)), **o = dh->hash;

	if (!t)
		return; /* longer chains, still correct */
	dh->hash = t;
	dh->hash_mask = n - 1;
	for (size_t i = 0; i < old; i++) {
		for (struct alloc *r = o[i], *nx; r; r = nx) {
			size_t k = hash_of(dh, r->base);

			nx = r->hnext;
			r->hnext = t[k];
			t[k] = r;
		}
	}
	free(o);
}

static void hash_insert(struct devheap *dh, struct alloc *r)
{
	size_t k;

	if (dh->hash_count > dh->hash_mask)
		hash_grow(dh);
	k = hash_of(dh, r->base);
	r->hnext = dh->hash[k];
	dh->hash[k] = r;
	dh->hash_count++;
}

static struct alloc *hash_remove(struct devheap *dh, vmm_devptr base)
{
	struct alloc **pp = &dh->hash[hash_of(dh, base)];

	for (; *pp; pp = &(*pp)->hnext) {
		if ((*pp)->base == base) {
			struct alloc *r = *pp;

			*pp = r->hnext;
			dh->hash_count--;
			return r;
		}
	}
	return NULL;
}

struct alloc *alloc_new(struct devheap *dh)
{
	struct alloc *r = dh->alloc_pool;

	if (r)
		dh->alloc_pool = r->qnext;
	else
		r = malloc(sizeof(*r));
	if (r)
		memset(r, 0, sizeof(*r));
	return r;
}

void alloc_put(struct devheap *dh, struct alloc *r)
{
	r->qnext = dh->alloc_pool;
	dh->alloc_pool = r;
}

/* The allocation's memory becomes free for anyone (its quarantine is over). */
void alloc_finish_free(struct devheap *dh, struct alloc *r)
{
	if (r->slab)
		slab_free_slot(dh, r);
	else
		blk_release(dh, r->blk);
	alloc_put(dh, r);
}

struct devheap *heap_for(struct vmm_core *core, int dev, bool create, vmm_error *err)
{
	struct devheap *dh;
	size_t free_b, total_b;
	vmm_backend *be = core->be;

	if (dev < 0 || dev >= core->ndev) {
		vmm_fail(err, VMM_E_INVALID, 0, "no device %d (the backend has %d)", dev, core->ndev);
		return NULL;
	}
	dh = atomic_load_explicit(&core->heaps[dev], memory_order_acquire);
	if (dh || !create)
		return dh;
	pthread_mutex_lock(&core->init_lock);
	dh = core->heaps[dev];
	if (dh)
		goto out;
	dh = calloc(1, sizeof(*dh));
	if (!dh || hash_init(dh)) {
		free(dh);
		dh = NULL;
		vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a device heap");
		goto out;
	}
	dh->core = core;
	dh->dev = dev;
	if (be->granularity(be, dev, &dh->gran, err) ||
	    be->mem_info(be, dev, &free_b, &total_b, err)) {
		free(dh->hash);
		free(dh);
		dh = NULL;
		goto out;
	}
	dh->total_mem = total_b;
	/* Settled by the first device (other threads read the configuration without a lock:
	 * later devices find nothing to change). */
	if (!core->cfg.reserve_bytes)
		core->cfg.reserve_bytes = align_up(4 * total_b, dh->gran);
	if (core->cfg.small_max > dh->gran / 8)
		core->cfg.small_max = dh->gran / 8;
	if (core->cfg.max_handle_bytes != align_up(core->cfg.max_handle_bytes, dh->gran))
		core->cfg.max_handle_bytes = align_up(core->cfg.max_handle_bytes, dh->gran);
	pthread_mutex_init(&dh->lock, NULL);
	atomic_store_explicit(&core->heaps[dev], dh, memory_order_release);
out:
	pthread_mutex_unlock(&core->init_lock);
	return dh;
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

static uint64_t device_free_bytes(struct devheap *dh)
{
	vmm_backend *be = dh->core->be;
	size_t f = 0, t = 0;

	if (be->mem_info(be, dh->dev, &f, &t, NULL))
		return 0;
	return f;
}

/* Memory after a device sync: everything quarantined becomes free; beyond the cache limit
 * wholly free handles go back to the driver. */
static vmm_status reclaim(struct devheap *dh, struct arena *who, vmm_error *err)
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

struct blk *large_alloc_block(struct arena *a, size_t size, size_t align, vmm_error *err)
{
	struct devheap *dh = a->dh;
	size_t need = size + (align > HEAP_ALIGN ? align - HEAP_ALIGN : 0);
	vmm_error local;
	vmm_status st;
	struct blk *b, *t;

	b = free_index_find(a, need);
	if (!b && miss_syncs(dh)) {
		/* One sync makes all of the quarantine reusable. A failed sync (stream capture)
		 * means growth. */
		if (reclaim(dh, a, NULL) == VMM_OK)
			b = free_index_find(a, need);
	}
	if (!b) {
		st = arena_grow(a, need, &local);
		if (st == VMM_E_OOM) {
			/* The ladder: sync and reclaim the quarantine, give back empty slabs, so
			 * that wholly free handles can move here; then try once more. */
			reclaim(dh, a, NULL);
			for (int i = 0; i < dh->narenas; i++)
				slab_release_empty(dh, dh->arenas[i]);
			b = free_index_find(a, need);
			if (!b)
				st = arena_grow(a, need, &local);
		}
		if (!b && st) {
			if (st == VMM_E_OOM)
				vmm_fail(err, VMM_E_OOM, local.driver_code,
					 "device %d: cannot allocate %zu bytes: %llu bytes free on the "
					 "device, %llu cached in the heap (%s)",
					 dh->dev, size, (unsigned long long)device_free_bytes(dh),
					 (unsigned long long)(dh->mapped_total - dh->live_total),
					 local.msg);
			else if (err)
				*err = local;
			return NULL;
		}
		if (!b)
			b = free_index_find(a, need);
		if (!b) {
			vmm_fail(err, VMM_E_OOM, 0, "device %d: no block of %zu bytes after growth",
				 dh->dev, need);
			return NULL;
		}
	}
	free_index_remove(a, b);
	if (align > HEAP_ALIGN && (b->addr & (align - 1))) {
		size_t pad = align_up(b->addr, align) - b->addr;

		t = blk_split(dh, b, pad);
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

static void account_alloc(struct arena *a, struct alloc *r)
{
	struct devheap *dh = a->dh;

	a->st.live_bytes += r->size;
	a->st.live_usable += r->usable;
	a->st.live_count++;
	a->st.alloc_calls++;
	if (a->st.live_bytes > a->st.peak_live_bytes)
		a->st.peak_live_bytes = a->st.live_bytes;
	dh->live_total += r->usable;
	dh->live_req += r->size;
	if (dh->live_req > dh->peak_live)
		dh->peak_live = dh->live_req;
}

static void account_free(struct arena *a, struct alloc *r)
{
	a->st.live_bytes -= r->size;
	a->st.live_usable -= r->usable;
	a->st.live_count--;
	a->st.free_calls++;
	a->dh->live_total -= r->usable;
	a->dh->live_req -= r->size;
}

static vmm_status alloc_locked(struct devheap *dh, size_t size, size_t align, const char *tag,
			       vmm_devptr *out, vmm_error *err)
{
	struct arena *a = arena_find(dh, tag, true, err);
	struct alloc *r;
	vmm_status st;

	if (!a)
		return err ? err->status : VMM_E_INVALID;
	if (a->asleep)
		return vmm_fail(err, VMM_E_BUSY, 0, "tag \"%s\" on device %d is asleep", a->tag,
				dh->dev);
	r = alloc_new(dh);
	if (!r)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for an allocation record");
	r->size = size;
	r->arena = a;
	if (align <= HEAP_ALIGN && size_class(size, dh->core->cfg.small_max) >= 0) {
		st = slab_alloc(a, size, r, err);
		if (st) {
			alloc_put(dh, r);
			return st;
		}
	} else {
		size_t usable = align_up(size ? size : 1, HEAP_ALIGN);
		struct blk *b = large_alloc_block(a, usable, align, err);

		if (!b) {
			alloc_put(dh, r);
			return err ? err->status : VMM_E_OOM;
		}
		b->alloc = r;
		r->blk = b;
		r->base = b->addr;
		r->usable = b->size;
	}
	hash_insert(dh, r);
	account_alloc(a, r);
	*out = r->base;
	return VMM_OK;
}

vmm_status vmm_malloc(vmm_core *core, int dev, size_t size, size_t align, const char *tag,
		      vmm_devptr *out, vmm_error *err)
{
	struct devheap *dh;
	vmm_status st;

	if (!out)
		return vmm_fail(err, VMM_E_INVALID, 0, "no output pointer");
	if (align & (align - 1))
		return vmm_fail(err, VMM_E_INVALID, 0, "alignment %zu is not a power of two", align);
	if (size > (1ull << 48))
		return vmm_fail(err, VMM_E_OOM, 0, "cannot allocate %zu bytes", size);
	dh = heap_for(core, dev, true, err);
	if (!dh)
		return err ? err->status : VMM_E_INVALID;
	if (align > dh->gran)
		return vmm_fail(err, VMM_E_INVALID, 0, "alignment %zu exceeds the granularity %zu",
				align, dh->gran);
	pthread_mutex_lock(&dh->lock);
	st = alloc_locked(dh, size, align, tag, out, err);
	pthread_mutex_unlock(&dh->lock);
	return st;
}

/* The heap whose address space holds ptr (reservations are append-only: no lock needed). */
static struct devheap *heap_of_ptr(struct vmm_core *core, vmm_devptr ptr)
{
	for (int d = 0; d < core->ndev; d++) {
		struct devheap *dh = atomic_load_explicit(&core->heaps[d], memory_order_acquire);

		if (dh && res_of(dh, ptr))
			return dh;
	}
	return NULL;
}

static vmm_status free_common(vmm_core *core, vmm_devptr ptr, vmm_stream stream, bool on_stream,
			      vmm_error *err)
{
	struct devheap *dh = heap_of_ptr(core, ptr);
	struct alloc *r;
	struct arena *a;

	if (!dh)
		return vmm_fail(err, VMM_E_NOT_OURS, 0, "0x%llx was not allocated by vmmshim",
				(unsigned long long)ptr);
	pthread_mutex_lock(&dh->lock);
	r = hash_remove(dh, ptr);
	if (!r) {
		pthread_mutex_unlock(&dh->lock);
		return vmm_fail(err, VMM_E_NOT_OURS, 0,
				"0x%llx is not the base of a live allocation (double free?)",
				(unsigned long long)ptr);
	}
	a = r->arena;
	account_free(a, r);
	/* Quarantine: reused only after a device sync that began after this free, or at once on
	 * the same stream for stream-ordered frees. */
	r->quarantined = true;
	r->stream_ordered = on_stream;
	r->stream = on_stream ? stream : NULL;
	if (!r->slab)
		r->blk->state = BLK_QUAR;
	r->qprev = NULL;
	r->qnext = a->quar_head;
	if (r->qnext)
		r->qnext->qprev = r;
	a->quar_head = r;
	a->quar_bytes += r->usable;
	dh->quar_total += r->usable;
	pthread_mutex_unlock(&dh->lock);
	return VMM_OK;
}

vmm_status vmm_free(vmm_core *core, vmm_devptr ptr, vmm_error *err)
{
	return free_common(core, ptr, NULL, false, err);
}

vmm_status vmm_free_on_stream(vmm_core *core, vmm_devptr ptr, vmm_stream stream, vmm_error *err)
{
	return free_common(core, ptr, stream, true, err);
}

/* A block freed on `stream` that fits `size` without wasting more than half of it. */
static struct alloc *stream_reuse(struct arena *a, size_t size, vmm_stream stream)
{
	struct devheap *dh = a->dh;
	int cls = size_class(size, dh->core->cfg.small_max);
	size_t usable = align_up(size ? size : 1, HEAP_ALIGN);
	int scanned = 0;

	for (struct alloc *r = a->quar_head; r && scanned < 64; r = r->qnext, scanned++) {
		if (!r->stream_ordered || r->stream != stream)
			continue;
		if (cls >= 0 ? (r->slab && r->slab->cls == cls) :
			       (!r->slab && r->usable >= usable && r->usable / 2 <= usable))
			return r;
	}
	return NULL;
}

vmm_status vmm_malloc_on_stream(vmm_core *core, int dev, size_t size, const char *tag,
				vmm_stream stream, vmm_devptr *out, vmm_error *err)
{
	struct devheap *dh;
	struct arena *a;
	struct alloc *r;
	vmm_status st;

	if (!out)
		return vmm_fail(err, VMM_E_INVALID, 0, "no output pointer");
	dh = heap_for(core, dev, true, err);
	if (!dh)
		return err ? err->status : VMM_E_INVALID;
	pthread_mutex_lock(&dh->lock);
	a = arena_find(dh, tag, true, err);
	r = a && !a->asleep ? stream_reuse(a, size, stream) : NULL;
	if (r) {
		if (r->qprev)
			r->qprev->qnext = r->qnext;
		else
			a->quar_head = r->qnext;
		if (r->qnext)
			r->qnext->qprev = r->qprev;
		a->quar_bytes -= r->usable;
		dh->quar_total -= r->usable;
		r->quarantined = false;
		r->stream_ordered = false;
		r->stream = NULL;
		r->size = size;
		if (!r->slab)
			r->blk->state = BLK_USED;
		hash_insert(dh, r);
		account_alloc(a, r);
		*out = r->base;
		st = VMM_OK;
	} else {
		st = alloc_locked(dh, size, HEAP_ALIGN, tag, out, err);
	}
	pthread_mutex_unlock(&dh->lock);
	return st;
}

bool vmm_lookup(vmm_core *core, vmm_devptr ptr, vmm_alloc_info *info)
{
	struct devheap *dh = heap_of_ptr(core, ptr);
	struct alloc *r = NULL;
	struct blk *b;

	if (!dh)
		return false;
	pthread_mutex_lock(&dh->lock);
	b = blk_containing(dh, ptr);
	if (b && b->state == BLK_USED)
		r = b->alloc;
	else if (b && b->state == BLK_SLAB)
		r = b->slab->slots[(ptr - b->addr) / b->slab->slot_size < b->slab->nslots ?
					   (ptr - b->addr) / b->slab->slot_size : 0];
	if (r && (r->quarantined || ptr - r->base >= r->usable))
		r = NULL;
	if (r && info) {
		info->base = r->base;
		info->size = r->size;
		info->usable = r->usable;
		info->device = dh->dev;
		memcpy(info->tag, r->arena->tag, VMM_TAG_MAX);
	}
	pthread_mutex_unlock(&dh->lock);
	return r != NULL;
}

vmm_status vmm_trim(vmm_core *core, int dev, vmm_error *err)
{
	vmm_status st = VMM_OK;

	if (dev >= core->ndev)
		return vmm_fail(err, VMM_E_INVALID, 0, "no device %d", dev);
	for (int d = dev < 0 ? 0 : dev; d < (dev < 0 ? core->ndev : dev + 1); d++) {
		struct devheap *dh = heap_for(core, d, false, NULL);
		vmm_status s;

		if (!dh)
			continue;
		pthread_mutex_lock(&dh->lock);
		/* A failed sync leaves the quarantine alone; what is free still goes back. */
		s = heap_reclaim(dh, NULL, err);
		for (int i = 0; i < dh->narenas; i++)
			slab_release_empty(dh, dh->arenas[i]);
		heap_release_free_handles(dh, 0);
		pthread_mutex_unlock(&dh->lock);
		if (s && !st)
			st = s;
	}
	return st;
}

/* Re-grant access on every mapped run of the device (contiguous handles in one call). */
static vmm_status regrant_all(struct devheap *dh, vmm_error *err)
{
	size_t n = atomic_load(&dh->nres);

	for (size_t k = 0; k < n; k++) {
		struct reservation *r = &dh->res[k];

		for (size_t p = 0; p < r->npages;) {
			struct phandle *h = r->page_handle[p];
			vmm_devptr start;
			size_t len = 0;
			vmm_status st;

			if (!h || h->asleep) {
				p++;
				continue;
			}
			start = r->base + p * dh->gran;
			while (p < r->npages && r->page_handle[p] && !r->page_handle[p]->asleep) {
				len += dh->gran;
				p++;
			}
			st = heap_grant_access(dh, start, len, err);
			if (st)
				return st;
		}
	}
	return VMM_OK;
}

vmm_status vmm_set_peer_access(vmm_core *core, int dev, int peer, bool enable, vmm_error *err)
{
	struct devheap *dh;
	int saved[VMM_MAX_DEVICES], nsaved;
	vmm_status st = VMM_OK;
	int i;

	if (peer < 0 || peer >= core->ndev || peer == dev)
		return vmm_fail(err, VMM_E_INVALID, 0, "device %d cannot be a peer of device %d", peer,
				dev);
	dh = heap_for(core, dev, true, err);
	if (!dh)
		return err ? err->status : VMM_E_INVALID;
	pthread_mutex_lock(&dh->lock);
	nsaved = dh->npeers;
	memcpy(saved, dh->peers, sizeof(saved));
	for (i = 0; i < dh->npeers && dh->peers[i] != peer; i++)
		;
	if (enable && i == dh->npeers) {
		dh->peers[dh->npeers++] = peer;
		st = regrant_all(dh, err);
		if (st) {
			dh->npeers = nsaved;
			memcpy(dh->peers, saved, sizeof(saved));
		}
	} else if (!enable && i < dh->npeers) {
		/* Revocation applies to new mappings and to mappings re-created at wake. */
		dh->peers[i] = dh->peers[--dh->npeers];
	}
	pthread_mutex_unlock(&dh->lock);
	return st;
}

static void stats_add(vmm_stats *o, const struct arena *a)
{
	const struct arena_stats *s = &a->st;

	o->live_bytes += s->live_bytes;
	o->live_count += s->live_count;
	o->mapped_bytes += s->mapped_bytes;
	if (!a->asleep)
		o->cached_bytes += s->mapped_bytes - s->live_usable;
	o->asleep_bytes += s->asleep_bytes;
	o->host_backup_bytes += s->host_backup_bytes;
	o->alloc_calls += s->alloc_calls;
	o->free_calls += s->free_calls;
	o->handles_created += s->handles_created;
	o->handles_released += s->handles_released;
	o->syncs += s->syncs;
}

vmm_status vmm_stats_get(vmm_core *core, int dev, const char *tag, vmm_stats *out, vmm_error *err)
{
	memset(out, 0, sizeof(*out));
	if (dev >= core->ndev)
		return vmm_fail(err, VMM_E_INVALID, 0, "no device %d (the backend has %d)", dev,
				core->ndev);
	for (int d = dev < 0 ? 0 : dev; d < (dev < 0 ? core->ndev : dev + 1); d++) {
		struct devheap *dh = heap_for(core, d, false, NULL);

		if (!dh)
			continue;
		pthread_mutex_lock(&dh->lock);
		for (int i = 0; i < dh->narenas; i++) {
			struct arena *a = dh->arenas[i];

			if (tag && strcmp(tag, a->tag))
				continue;
			stats_add(out, a);
			if (tag) {
				out->peak_live_bytes += a->st.peak_live_bytes;
				out->peak_mapped_bytes += a->st.peak_mapped_bytes;
			}
		}
		if (!tag) {
			out->peak_live_bytes += dh->peak_live;
			out->peak_mapped_bytes += dh->peak_mapped;
		}
		for (size_t k = 0; k < atomic_load(&dh->nres); k++)
			out->reserved_bytes += dh->res[k].size;
		pthread_mutex_unlock(&dh->lock);
	}
	return VMM_OK;
}

int vmm_tags_list(vmm_core *core, int dev, char (*names)[VMM_TAG_MAX], int max)
{
	struct devheap *dh = heap_for(core, dev, false, NULL);
	int n = 0;

	if (!dh)
		return 0;
	pthread_mutex_lock(&dh->lock);
	for (int i = 0; i < dh->narenas && n < max; i++)
		memcpy(names[n++], dh->arenas[i]->tag, VMM_TAG_MAX);
	pthread_mutex_unlock(&dh->lock);
	return n;
}

uint32_t vmm_devices_used(vmm_core *core)
{
	uint32_t m = 0;

	for (int d = 0; d < core->ndev; d++)
		if (atomic_load(&core->heaps[d]))
			m |= 1u << d;
	return m;
}
