/* The core allocator's public API (heap.h): the core, allocation and free (with quarantine and
 * stream-ordered reuse), lookup, trim, peer access and statistics. The work is done by the
 * layers listed in heap_internal.h. */
#include "heap_ahead.h"
#include "heap_internal.h"
#include "heap_keep.h"
#include "heap_reads.h"
#include "heap_refill.h"
#include "heap_share.h"
#include "heap_trim.h"
#include "vmm_share.h"

#include <stdlib.h>
#include <string.h>

#define GIB (1ull << 30)
#define DEFAULT_SMALL_MAX (64u << 10)
#define DEFAULT_WHOLE_HANDLE_MIN (32u << 20)
/* Fitting blocks a request that would cut looks at for one it can take uncut (heap_fit.c,
 * uncut_block): 16 and 256 measured alike on the GPU; the scan costs host time only when a cut
 * is due. */
#define DEFAULT_UNCUT_SCAN 16
/* 50 us, not the 1 ms it was: an edge cut takes 0.15-0.8 ms on the H200, and at 1 ms the log
 * missed the ~100 such cuts a small step of the PyTorch benchmark made (20-27 ms of its host
 * time), so that it read as if the heap's calls were not what slowed those steps
 * (docs/design.md). A request served in place makes no driver call and stays under it. */
#define DEFAULT_SLOW_LOG_S 50e-6

void vmm_config_defaults(vmm_config *cfg)
{
	cfg->cache_limit = SIZE_MAX;   /* keep freed memory, like a caching allocator; trim gives it back */
	cfg->reserve_bytes = 0;        /* 4 x device memory, decided per device */
	cfg->max_handle_bytes = SIZE_MAX; /* one handle per growth: see heap_grow.c */
	cfg->whole_handle_min = DEFAULT_WHOLE_HANDLE_MIN;
	cfg->granule_start_min = SIZE_MAX;
	cfg->edge_cut_min = SIZE_MAX;  /* never: see heap_grow.c, handle_shatter */
	cfg->aligned_cuts = false;     /* 2 MiB pieces: see heap_grow.c, handle_shatter */
	cfg->aligned_cut_max = (size_t)64 << 20; /* as large as a shared handle gets */
	cfg->give_back_late = false;   /* before the sync: see heap_grow.h, arena_give_back_early */
	cfg->uncut_scan = DEFAULT_UNCUT_SCAN; /* see heap_fit.c, uncut_block */
	cfg->refill_ahead = false;     /* a cut makes all its pieces itself (the shim sets it) */
	cfg->small_max = DEFAULT_SMALL_MAX;
	cfg->sync_ahead_min = 0;       /* the program's own thread synchronizes (the shim sets it) */
	cfg->sync_whole = false;       /* wait for the sync ahead in flight first: heap_ahead.h */
	cfg->slow_log_s = DEFAULT_SLOW_LOG_S;
}

/* The caller's configuration, whole (so that a field added later cannot be dropped here), with
 * the sizes whose 0 means "the default" given theirs (out holds the defaults). */
static void config_take(vmm_config *out, const vmm_config *cfg)
{
	vmm_config def = *out;

	*out = *cfg;
	if (!cfg->cache_limit)
		out->cache_limit = def.cache_limit;
	if (!cfg->max_handle_bytes)
		out->max_handle_bytes = def.max_handle_bytes;
	if (!cfg->whole_handle_min)
		out->whole_handle_min = def.whole_handle_min;
	if (!cfg->small_max)
		out->small_max = def.small_max;
	if (!(cfg->slow_log_s > 0))
		out->slow_log_s = def.slow_log_s;
	if (!cfg->granule_start_min)
		out->granule_start_min = def.granule_start_min;
	if (!cfg->edge_cut_min)
		out->edge_cut_min = def.edge_cut_min;
	if (!cfg->aligned_cut_max)
		out->aligned_cut_max = def.aligned_cut_max;
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
	if (cfg)
		config_take(&c->cfg, cfg);
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

void vmm_core_after_fork(vmm_core *core)
{
	if (core) {
		ahead_after_fork(core);
		refill_after_fork(core);
		trims_after_fork(core);
		/* The parent's thread that waited for a device is not in the child, nor are
		 * its threads that were viewing the heap meanwhile. */
		for (int d = 0; d < core->ndev; d++)
			if (core->heaps[d]) {
				atomic_store(&core->heaps[d]->viewers, 0);
				heap_lock_wait_end(core->heaps[d]);
			}
	}
}

vmm_backend *vmm_core_backend(vmm_core *core)
{
	return core->be;
}

/* How long the destroy waits for a trim in the driver (heap_trim.c). */
#define TRIM_STOP_WAIT_MS 5000

bool vmm_core_destroy(vmm_core *core)
{
	if (!core)
		return true;
	/* A thread still waiting for a device would then touch freed heaps. Within bounded reads
	 * (the exit's), a heap whose allocator waits for its device leaves the core as it is. */
	for (int d = 0; d < VMM_MAX_DEVICES; d++)
		if (core->heaps[d]) {
			if (!heap_lock_read(core->heaps[d]))
				return false;
			refill_settle(core->heaps[d]);
			pthread_mutex_unlock(&core->heaps[d]->lock);
		}
	if (!refill_stop(core) || !ahead_stop(core) || !trims_stop(core, TRIM_STOP_WAIT_MS))
		return false;
	for (int d = 0; d < VMM_MAX_DEVICES; d++)
		if (core->heaps[d])
			devheap_destroy(core->heaps[d]);
	pthread_mutex_destroy(&core->init_lock);
	free(core);
	return true;
}

/* Give r a block of its own (it is not a small allocation). */
static vmm_status alloc_block(struct devheap *dh, struct arena *a, size_t size, size_t align,
			      struct alloc *r, vmm_error *err)
{
	size_t usable = align_up(size ? size : 1, HEAP_ALIGN);
	struct blk *b;

	/* Any size may share its first and last granule with other allocations, large ones too:
	 * cudaMalloc rounds each allocation of over 1 MiB to 2 MiB, so packing them end to end is
	 * where the heap can need less than the driver. On the H200 PyTorch benchmark's recorded
	 * trace (bench_core --replay) large allocations owning whole granules put the peak 7 MiB
	 * above cudaMalloc's; packed, 29 MiB below it (starting them at a granule but sharing the
	 * last one: 5 MiB above, the free tails stay where nothing small enough comes). Growth
	 * keeps the last granule a piece of its own (heap_grow.c), so large handles still hold
	 * one allocation only. The setting granule_start_min gives the old layout back, for
	 * programs that retain such allocations (no handle can hold one from a base inside a
	 * granule). */
	if (size >= dh->core->cfg.granule_start_min) {
		usable = align_up(size, dh->gran);
		align = align > dh->gran ? align : dh->gran;
	} else if (size >= dh->gran && size % dh->gran == 0 && align < dh->gran) {
		/* Whole granules (PyTorch's segments are 2 MiB multiples) start a granule, so that
		 * one can be given a handle of its own when retained (vmm_share_own): a handle maps
		 * at a granule, and NCCL expects the allocation at the handle's offset 0. Other
		 * sizes are not aligned: the padding cost 4-6% of peak mapped memory on the
		 * fragmenting and training traces (bench_core) and failed test_heap_acl's fill. */
		align = dh->gran;
	}
	b = arena_alloc_block(a, usable, align, err);
	if (!b)
		return err ? err->status : VMM_E_OOM;
	b->alloc = r;
	r->blk = b;
	r->base = b->addr;
	r->usable = b->size;
	return VMM_OK;
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
	if (align <= HEAP_ALIGN && size_class(size, dh->core->cfg.small_max) >= 0)
		st = arena_alloc_small(a, size, r, err);
	else
		st = alloc_block(dh, a, size, align, r, err);
	if (st) {
		alloc_put(dh, r);
		return st;
	}
	record_insert(dh, r);
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
	share_settle(dh);
	pthread_mutex_unlock(&dh->lock);
	return st;
}

static vmm_status free_common(vmm_core *core, vmm_devptr ptr, vmm_stream stream, bool on_stream,
			      vmm_error *err)
{
	struct devheap *dh = heap_of_ptr(core, ptr);
	struct kept_export *kept = NULL;
	struct alloc *r;

	if (!dh)
		return vmm_fail(err, VMM_E_NOT_OURS, 0, "0x%llx was not allocated by vmmshim",
				(unsigned long long)ptr);
	pthread_mutex_lock(&dh->lock);
	r = record_remove(dh, ptr);
	if (!r) {
		pthread_mutex_unlock(&dh->lock);
		return vmm_fail(err, VMM_E_NOT_OURS, 0,
				"0x%llx is not the base of a live allocation (double free?)",
				(unsigned long long)ptr);
	}
	account_free(r->arena, r);
	/* Its export's kept descriptors hold the memory for the driver: closed now, outside the
	 * lock (a close takes a while). */
	if (r->share_id)
		kept = keep_detach_id(dh, r->share_id);
	/* Quarantine: reused only after a device sync that began after this free, or at once on
	 * the same stream for stream-ordered frees. */
	quarantine_put(r, on_stream, stream);
	ahead_kick(dh);
	pthread_mutex_unlock(&dh->lock);
	keep_close(core, kept);
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

/* A block freed on `stream` that fits `size` with at most a sixteenth of it unused. A looser fit
 * (up to half) put the peak of the H200's varlen PyTorch benchmark 1.8 GB over the driver's when
 * every free was stream-ordered (lone-stream ordering): each reuse keeps the rest idle. */
static struct alloc *stream_reuse(struct arena *a, size_t size, vmm_stream stream)
{
	struct devheap *dh = a->dh;
	int cls = size_class(size, dh->core->cfg.small_max);
	size_t usable = align_up(size ? size : 1, HEAP_ALIGN);
	int scanned = 0;

	for (struct alloc *r = a->quar_head; r && scanned < 64; r = r->qnext, scanned++) {
		if (!r->stream_ordered || r->stream != stream)
			continue;
		/* Memory another process maps is never handed out again (heap_share.h). */
		if (share_touches(dh, r->base, r->usable))
			continue;
		if (cls >= 0 ? (r->slab && r->slab->cls == cls) :
			       (!r->slab && r->usable >= usable && r->usable - usable <= usable / 16))
			return r;
	}
	return NULL;
}

vmm_status vmm_malloc_on_stream(vmm_core *core, int dev, size_t size, const char *tag,
				vmm_stream stream, vmm_devptr *out, vmm_error *err)
{
	return vmm_malloc_ordered(core, dev, size, tag, stream, out, NULL, err);
}

vmm_status vmm_malloc_ordered(vmm_core *core, int dev, size_t size, const char *tag,
			      vmm_stream stream, vmm_devptr *out, bool *reused, vmm_error *err)
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
	if (reused)
		*reused = r != NULL;
	if (r) {
		quarantine_take(r);
		r->size = size;
		record_insert(dh, r);
		account_alloc(a, r);
		*out = r->base;
		st = VMM_OK;
	} else {
		st = alloc_locked(dh, size, HEAP_ALIGN, tag, out, err);
	}
	/* As vmm_malloc: shared handles freed whole go back (a lone stream's program allocates
	 * only this way, and kept a freed export's memory until a trim). */
	share_settle(dh);
	pthread_mutex_unlock(&dh->lock);
	return st;
}

bool vmm_lookup(vmm_core *core, vmm_devptr ptr, vmm_alloc_info *info)
{
	struct devheap *dh = heap_of_ptr(core, ptr);
	struct alloc *r = NULL;
	enum heap_view view;
	struct blk *b;

	if (!dh)
		return false;
	/* Not behind an allocation's wait for the device: another thread's pointer query may be
	 * what that device's work waits for. */
	view = heap_view_begin(dh);
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
	heap_view_end(dh, view);
	return r != NULL;
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
	/* A refill grants the peers it was queued with: none may be left to run with the old. */
	refill_settle(dh);
	nsaved = dh->npeers;
	memcpy(saved, dh->peers, sizeof(saved));
	for (i = 0; i < dh->npeers && dh->peers[i] != peer; i++)
		;
	if (enable && i == dh->npeers) {
		dh->peers[dh->npeers++] = peer;
		st = heap_regrant_all(dh, err);
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

	/* The counters every arena keeps (VMM_HEAP_STATS, source ARENA) add up. */
#define SUM_ARENA(field) o->field += s->field;
#define SUM_OWN(field)
#define SUM(field, source, ...) SUM_##source(field)
	VMM_HEAP_STATS(SUM)
#undef SUM
#undef SUM_OWN
#undef SUM_ARENA
	if (!a->asleep)
		o->cached_bytes += s->mapped_bytes - s->live_usable;
	o->quarantined_bytes += a->quar_bytes;
}

/* dh's figures added to out (its lock held, or a view). */
static void heap_stats_add(struct devheap *dh, const char *tag, vmm_stats *out)
{
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
		out->release_pending_bytes += dh->parked_bytes;
		out->handles_moved += dh->tally.moved;
		out->handles_cut += dh->tally.shattered;
		out->cuts_avoided += dh->tally.uncut;
		out->pieces_given_back += dh->tally.given_back;
		out->pieces_given_back_early += dh->tally.given_back_early;
		out->pieces_refilled += dh->tally.refilled;
		out->pieces_refill_claimed += dh->tally.refill_claimed;
	}
	for (size_t k = 0; k < atomic_load(&dh->nres); k++)
		out->reserved_bytes += dh->res[k].size;
}

vmm_status vmm_stats_get(vmm_core *core, int dev, const char *tag, vmm_stats *out, vmm_error *err)
{
	memset(out, 0, sizeof(*out));
	if (dev >= core->ndev)
		return vmm_fail(err, VMM_E_INVALID, 0, "no device %d (the backend has %d)", dev,
				core->ndev);
	for (int d = dev < 0 ? 0 : dev; d < (dev < 0 ? core->ndev : dev + 1); d++) {
		struct devheap *dh = heap_for(core, d, false, NULL);

		if (!dh || !heap_lock_read(dh))
			continue;
		heap_stats_add(dh, tag, out);
		pthread_mutex_unlock(&dh->lock);
	}
	return VMM_OK;
}

void vmm_stats_now(vmm_core *core, int dev, vmm_stats *out)
{
	struct devheap *dh = dev >= 0 && dev < core->ndev ? heap_for(core, dev, false, NULL) : NULL;
	enum heap_view view;

	memset(out, 0, sizeof(*out));
	if (!dh)
		return;
	view = heap_view_begin(dh);
	heap_stats_add(dh, NULL, out);
	heap_view_end(dh, view);
}

int vmm_tags_list(vmm_core *core, int dev, char (*names)[VMM_TAG_MAX], int max)
{
	struct devheap *dh = heap_for(core, dev, false, NULL);
	int n = 0;

	if (!dh || !heap_lock_read(dh))
		return 0;
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

/* vmm_share.h: the shared and retired bytes are statistics, so they come from here. */
void vmm_share_bytes(vmm_core *core, int dev, uint64_t *shared, uint64_t *retired)
{
	vmm_stats st;

	/* The arenas' sum is vmm_stats_get's (VMM_HEAP_STATS); a device not there has none. */
	*shared = *retired = 0;
	if (dev < 0 || vmm_stats_get(core, dev, NULL, &st, NULL))
		return;
	*shared = st.shared_bytes;
	*retired = st.retired_bytes;
}
