/* Block services of an arena (heap_fit.h): find, else sync, else grow; carve the block found. */
#include "heap_fit.h"

#include "heap_ahead.h"
#include "heap_blocks.h"
#include "heap_grow.h"
#include "heap_phys.h"
#include "heap_records.h"
#include "heap_refill.h"
#include "heap_release.h"
#include "heap_slab.h"
#include "log.h"
#include "mono_wait.h"

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

/* When the heap synchronizes the device (and so reclaims the whole quarantine) rather than take
 * fresh memory: growth is for good (the heap keeps what it maps) and cutting a large free range
 * scatters it, while a sync costs once. Each rule bounds what the quarantine costs by
 * QUARANTINE_MIN:
 *  - a request that finds no free block syncs when QUARANTINE_MIN waits in quarantine, even when
 *    that is less than the request (reclaimed blocks coalesce with free neighbours, and a free
 *    block is grown by the rest only); below it the heap grows from memory it has mapped
 *    already (wholly free handles moved), so that a malloc/free cycle of one tensor does not
 *    wait on the device each time, and makes new memory only while less than
 *    QUARANTINE_GROW_MAX waits (grow_reclaimed);
 *  - a request of REUSE_MIN or more that would be cut from a free block at least
 *    REUSE_SPREAD times its size syncs when QUARANTINE_MIN has been cut that way since the last
 *    sync and a quarantined block fits it within 1/16: training frees and asks again for the
 *    same shapes (the next layer's, the next step's), and reusing their blocks keeps the large
 *    free ranges whole for large requests, which otherwise need physical memory moved to them
 *    (~50 us per 2 MiB on the H200). In bench_core's NO_CACHING replay this took the memory moved
 *    from ~280 to ~15 pieces per step, for ~8 syncs per step instead of ~2.4.
 * Which blocks a sync makes reusable never depends on these rules (see heap_records.c). */
/* 256 MiB rather than 64: each sync drains the GPU's queue, and a program that keeps the GPU
 * busy from a queue of kernels loses time at each. On the H200, PyTorch's varlen benchmark
 * without its cache synced ~17 times per warm step at 64 MiB and ~7 at 256 MiB (the replay of
 * its recorded trace), and ran 0.90x expandable segments' ms/step against 1.06x (median of 4
 * interleaved pairs, one run); the misses in between move wholly free handles instead, which
 * the replays (recorded trace; bench_core --train --varlen, seeds 0-2) put at the same driver
 * time per warm step (2.6 -> 3.0, 7.8 -> 6.7, 6.4 -> 6.2 ms). 1 GiB synced less again but
 * moved more (up to 11.4 ms per step). */
#define QUARANTINE_MIN (256ull << 20)
#define REUSE_MIN (1ull << 20)
#define REUSE_SPREAD 4
#define REUSE_SCAN 64

static bool miss_syncs(struct devheap *dh)
{
	return dh->quar_total >= QUARANTINE_MIN;
}

/* Does a quarantined block (among the most recent REUSE_SCAN) fit size within 1/16? */
static bool quarantine_fits(struct arena *a, size_t size)
{
	int scanned = 0;

	for (struct alloc *r = a->quar_head; r && scanned < REUSE_SCAN; r = r->qnext, scanned++)
		if (!r->slab && r->usable >= size && r->usable - size <= size / 16)
			return true;
	return false;
}

static bool reuse_syncs(struct arena *a, const struct blk *b, size_t size)
{
	return size >= REUSE_MIN && b->size / REUSE_SPREAD >= size &&
	       a->dh->cut_since_sync >= QUARANTINE_MIN && quarantine_fits(a, size);
}

/* A free block that holds size bytes at align, or NULL. The index is searched for size first
 * (an aligned block of exactly that size fits), then for the size with room for any padding. */
static struct blk *find_fit(struct arena *a, size_t size, size_t align)
{
	struct blk *b = free_index_find(a, size);

	if (b && (align <= HEAP_ALIGN || align_up(b->addr, align) - b->addr + size <= b->size))
		return b;
	return align > HEAP_ALIGN ? free_index_find(a, size + align - HEAP_ALIGN) : NULL;
}

/* Reclaimable: free, or freed and waiting in quarantine, and next to `to` in the same arena. */
static bool joins(const struct blk *b, const struct blk *to, bool left)
{
	return b && (b->state == BLK_FREE || b->state == BLK_QUAR) && b->arena == to->arena &&
	       (left ? b->addr + b->size == to->addr : to->addr + to->size == b->addr);
}

/* Bounds on reclaim_may_fit's look: quarantined blocks, and neighbours on each side of one. */
#define RUN_SCAN 256
#define RUN_WALK 64

/* Could a sync make a free block of size bytes in a? Reclaimed blocks coalesce with their free
 * and reclaimed neighbours, so the largest block it could make is the largest run of adjacent
 * free and quarantined blocks around a quarantined one. Past the bounds: yes (the caller then
 * keeps to the old order, which is never wrong). */
static bool reclaim_may_fit(struct arena *a, size_t size)
{
	int scanned = 0;

	for (struct alloc *r = a->quar_head; r; r = r->qnext) {
		const struct blk *b = r->blk, *p;
		size_t run;
		int left = 0, right = 0;

		if (r->slab)
			continue; /* a slab's block is a granule at most */
		if (++scanned > RUN_SCAN)
			return true;
		run = b->size;
		for (p = b; joins(p->prev, p, true) && left < RUN_WALK; p = p->prev, left++)
			run += p->prev->size;
		for (p = b; joins(p->next, p, false) && right < RUN_WALK; p = p->next, right++)
			run += p->next->size;
		if (run >= size || left == RUN_WALK || right == RUN_WALK)
			return true;
	}
	return false;
}

/* A large request about to wait for a sync: give back first what its growth will give back
 * anyway (heap_grow.h, arena_give_back_early), unless the sync may make a block that fits. */
static void give_back_before_sync(struct arena *a, size_t size, size_t align)
{
	if (!heap_reclaim_free(a->dh) && !reclaim_may_fit(a, size))
		arena_give_back_early(a, size, align);
}

/* A free block for the request already there, or after one sync (see above) made all of the
 * quarantine reusable (a failed sync, e.g. during stream capture, means growth). */
static struct blk *find_or_reclaim(struct arena *a, size_t size, size_t align)
{
	struct blk *b = find_fit(a, size, align);

	/* A reclaim that needs no sync (heap_reclaim_free) is taken at any miss: it is cheaper than
	 * any growth. */
	if (!(b ? reuse_syncs(a, b, size) : miss_syncs(a->dh) || heap_reclaim_free(a->dh)))
		return b;
	if (!b) {
		give_back_before_sync(a, size, align);
		/* What the sync ahead in flight reclaims may do, without draining the GPU's queue;
		 * the growth then moves free memory, and syncs itself where that is not enough. */
		if (ahead_wait(a->dh))
			return find_fit(a, size, align);
	}
	if (heap_reclaim_capped(a->dh, a, NULL) == VMM_OK)
		b = find_fit(a, size, align);
	return b;
}

static void fail_oom(struct devheap *dh, size_t size, const vmm_error *local, vmm_error *err)
{
	vmm_fail(err, VMM_E_OOM, local->driver_code,
		 "device %d: cannot allocate %zu bytes: %llu bytes free on the device, %llu cached in "
		 "the heap, %llu the driver would not take back (%s)",
		 dh->dev, size, (unsigned long long)device_free_bytes(dh),
		 (unsigned long long)(dh->mapped_total - dh->live_total),
		 (unsigned long long)dh->parked_bytes, local->msg);
}

/* Growth from memory already mapped (wholly free handles moved here), else new memory; new
 * memory only once the quarantine has been reclaimed (a sync) when QUARANTINE_GROW_MAX or more
 * waits there: the driver's cudaFree gives memory back at once, so bytes still in quarantine
 * when the device's memory grows are bytes the program would not hold natively (bench_core
 * --train: 28 MiB of the peak; test_heap_peak's training step: 64 MiB above cudaMalloc's).
 * Below it the heap grows without waiting, so that a malloc/free pair of one tensor syncs once
 * in several (a sync in every pair cost 1 MiB pairs 80 -> 270 ns on simdev, microseconds on a
 * GPU). Once a program is warm a growth that makes memory is rare, and costs more than the
 * sync. A failed sync (stream capture) means new memory. */
#define QUARANTINE_GROW_MAX (8ull << 20)

/* Grow, making new memory only while little waits in quarantine. true when *st is the answer:
 * grown, failed otherwise than for memory, or refused with new memory allowed; false when only
 * the quarantine held it back (a sync may then give the memory). */
static bool grow_settles(struct arena *a, size_t size, size_t align, struct blk **b,
			 vmm_error *err, vmm_status *st)
{
	bool may_create = a->dh->quar_total < QUARANTINE_GROW_MAX;

	*st = arena_grow(a, size, align, may_create, b, err);
	return *st != VMM_E_OOM || may_create;
}

static vmm_status grow_reclaimed(struct arena *a, size_t size, size_t align, struct blk **b,
				 vmm_error *err)
{
	struct devheap *dh = a->dh;
	vmm_status st;

	if (grow_settles(a, size, align, b, err, &st))
		return st;
	give_back_before_sync(a, size, align);
	/* The sync ahead in flight first (heap_ahead.h): its part of the quarantine may do. */
	if (ahead_wait(dh)) {
		if ((*b = find_fit(a, size, align)))
			return VMM_OK;
		if (grow_settles(a, size, align, b, err, &st))
			return st;
	}
	if (heap_reclaim_capped(dh, a, NULL) == VMM_OK && (*b = find_fit(a, size, align)))
		return VMM_OK;
	return arena_grow(a, size, align, true, b, err);
}

/* Grow for the request and return a free block that holds it. When the driver is out, the
 * ladder: sync and reclaim the quarantine, give back empty slabs, so that wholly free handles
 * can move here; then try once more. */
static struct blk *grow_for(struct arena *a, size_t size, size_t align, vmm_error *err)
{
	struct devheap *dh = a->dh;
	struct blk *b = NULL;
	vmm_error local;
	vmm_status st = grow_reclaimed(a, size, align, &b, &local);

	if (st == VMM_E_OOM) {
		heap_reclaim_capped(dh, a, NULL);
		for (int i = 0; i < dh->narenas; i++)
			slab_release_empty(dh, dh->arenas[i]);
		b = find_fit(a, size, align);
		if (!b)
			st = arena_grow(a, size, align, true, &b, &local);
	}
	if (!b && st) {
		if (st == VMM_E_OOM)
			fail_oom(dh, size, &local, err);
		else if (err)
			*err = local;
		return NULL;
	}
	if (!b)
		vmm_fail(err, VMM_E_OOM, 0, "device %d: no block of %zu bytes after growth", dh->dev,
			 size);
	return b;
}

/* Cut the free block b down to an aligned used block of size bytes (the rest stays free). */
static struct blk *carve(struct arena *a, struct blk *b, size_t size, size_t align,
			 vmm_error *err)
{
	struct devheap *dh = a->dh;

	if (b->size / REUSE_SPREAD >= size)
		dh->cut_since_sync += size;
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

/* A handle larger than a granule at an edge of [start, start+size) that the block would share
 * with free memory (see heap_grow.c: large handles are wholly free or inside one allocation). */
static struct phandle *shared_edge(struct devheap *dh, vmm_devptr start, size_t size)
{
	vmm_devptr edge[2] = { start, start + size - 1 };

	for (int i = 0; i < 2; i++) {
		struct phandle *h = page_handle_get(dh, edge[i]);

		if (h && h->size > dh->gran && (h->va < start || h->va + h->size > start + size) &&
		    !handle_cut_needless(dh, h, start, start + size) && handle_wholly_free(dh, h))
			return h;
	}
	return NULL;
}

static bool shares_no_handle(struct arena *a, vmm_devptr start, size_t size, void *arg)
{
	(void)arg;
	return !shared_edge(a->dh, start, size);
}

/* Instead of the block found, whose large free handle the request would cut into pieces
 * (~1.5 ms of driver calls for 64 MiB, and a free block left in 32 pieces that a later large
 * request must gather one by one): another block that fits and where the request cuts nothing,
 * among the next uncut_scan fitting ones, tightest first. Cuts then fall only where no block
 * can take the request whole, and large free handles stay whole for later large requests.
 * Unlike the cut variants tried before (heap_grow.c), it makes fewer cuts in every step, the
 * small ones too. On an H100 (6 Dec, two calls of 5 interleaved pairs) the PyTorch benchmark
 * without its cache ran a mean step of 139 against 143 ms and 138 against 142 ms, at a scan of
 * 16 and 256 alike, the step after the largest (which cut that step's freed handles) 58-59
 * against 66-68 ms; the replay of its trace made 910 cuts instead of 1191. A request under a
 * granule keeps to low_fit's packing. NULL: none. */
static struct blk *uncut_block(struct arena *a, size_t size, size_t align)
{
	int scan = a->dh->core->cfg.uncut_scan;

	if (scan <= 0 || size < a->dh->gran)
		return NULL;
	return free_index_scan(a, size, align, (unsigned)scan, shares_no_handle, NULL);
}

/* A free block for size bytes at align whose large handles it would not share: the ones it
 * would share are re-created first (heap_grow.h), then the search starts again (a re-creation the
 * driver refuses halfway leaves less memory where the block was). After a refused re-creation
 * the block found is taken as it is: an allocation is worth more than the layout. */
static struct blk *unshared_block(struct arena *a, size_t size, size_t align, vmm_error *err)
{
	struct devheap *dh = a->dh;
	bool unshare = true;

	for (int tries = 0; tries < 8; tries++) {
		struct blk *b = find_or_reclaim(a, size, align);
		struct phandle *h;
		vmm_devptr start;

		if (!b)
			b = grow_for(a, size, align, err);
		if (!b)
			return NULL;
		start = blk_aligned_start(b, align);
		h = unshare ? shared_edge(dh, start, size) : NULL;
		if (h) {
			struct blk *whole = uncut_block(a, size, align);

			if (whole) {
				b = whole;
				start = blk_aligned_start(b, align);
				h = NULL;
				dh->tally.uncut++;
			}
		}
		if (!h) {
			/* Refills it lies on are made first (heap_refill.h); one that cannot be
			 * left the free memory, and the search starts again. */
			if (refill_claim(dh, start, start + size) == VMM_OK)
				return b;
			continue;
		}
		unshare = handle_shatter(dh, h, start, start + size, NULL) == VMM_OK;
	}
	vmm_fail(err, VMM_E_OOM, 0, "device %d: no block of %zu bytes", dh->dev, size);
	return NULL;
}

/* What the device's heap had done before a block request, for its log line (slow_log). */
struct fit_probe {
	double t0, sync_wait_s;
	uint64_t syncs, created, released;
	struct grow_tally tally;
};

static void probe_counts(struct devheap *dh, struct fit_probe *p)
{
	p->syncs = p->created = p->released = 0;
	for (int i = 0; i < dh->narenas; i++) {
		p->syncs += dh->arenas[i]->st.syncs;
		p->created += dh->arenas[i]->st.handles_created;
		p->released += dh->arenas[i]->st.handles_released;
	}
	p->tally = dh->tally;
	p->sync_wait_s = dh->sync_wait_s;
}

/* At VMMSHIM_LOG=debug, a block request that took the configuration's slow_log_s or longer
 * (VMMSHIM_SLOW_LOG) says what it did, so that a run on a real GPU shows which allocations cost a
 * training step its time, and why. */
static void slow_log(struct devheap *dh, const struct fit_probe *p0, size_t size,
		     const struct blk *b)
{
	double now = vmm_now_s(), ms = (now - p0->t0) * 1e3, after;
	struct fit_probe p1;

	if (ms < dh->core->cfg.slow_log_s * 1e3)
		return;
	probe_counts(dh, &p1);
	/* After its last sync the GPU had nothing queued: a GPU-bound program waited that long. */
	after = p1.syncs > p0->syncs ? (now - dh->sync_done_s) * 1e3 : 0;
	vmm_log(VMM_LOG_DEBUG,
		"device %d: a block of %zu bytes took %.2f ms%s: %llu syncs, %llu handles created, "
		"%llu released, %llu moved, %llu given back for new memory, %llu pieces given back "
		"for a large request (%llu before its sync), %llu shattered; %.2f ms in syncs, "
		"%.2f ms after the last; ended at %.4f s",
		dh->dev, size, ms, b ? "" : " (failed)",
		(unsigned long long)(p1.syncs - p0->syncs),
		(unsigned long long)(p1.created - p0->created),
		(unsigned long long)(p1.released - p0->released),
		(unsigned long long)(p1.tally.moved - p0->tally.moved),
		(unsigned long long)(p1.tally.recycled - p0->tally.recycled),
		(unsigned long long)(p1.tally.given_back - p0->tally.given_back),
		(unsigned long long)(p1.tally.given_back_early - p0->tally.given_back_early),
		(unsigned long long)(p1.tally.shattered - p0->tally.shattered),
		(p1.sync_wait_s - p0->sync_wait_s) * 1e3, after, now);
}

struct blk *arena_alloc_block(struct arena *a, size_t size, size_t align, vmm_error *err)
{
	bool timed = vmm_log_enabled(VMM_LOG_DEBUG);
	struct fit_probe p0;
	struct blk *b;

	if (timed) {
		probe_counts(a->dh, &p0);
		p0.t0 = vmm_now_s();
	}
	b = unshared_block(a, size, align, err);
	a->dh->given_back_ahead = 0;
	if (b)
		b = carve(a, b, size, align, err);
	if (timed)
		slow_log(a->dh, &p0, size, b);
	return b;
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
		/* Wherever a block fits: a slab is smaller than a granule, so it takes the lowest hole
		 * (heap_blocks.c: low_fit) and packs with the other small allocations there. */
		b = arena_alloc_block(a, s->bytes, HEAP_ALIGN, err);
		if (!b) {
			slab_free_struct(s);
			return err ? err->status : VMM_E_OOM;
		}
		slab_attach(s, b);
	}
	slab_take_slot(s, rec);
	return VMM_OK;
}
