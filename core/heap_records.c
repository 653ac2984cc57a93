/* Allocation records (heap_records.h): a pool of records, the hash from base address to the live
 * allocation, the quarantine and its reclaim, and the live bytes' accounting. */
#include "heap_records.h"

#include <stdlib.h>
#include <string.h>

#include "heap_blocks.h"
#include "heap_reads.h"
#include "heap_slab.h"
#include "mono_wait.h"

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

vmm_status records_init(struct devheap *dh)
{
	dh->hash = calloc(1024, sizeof(*dh->hash));
	dh->hash_mask = 1023;
	return dh->hash ? VMM_OK : VMM_E_HOST_OOM;
}

void records_free_all(struct devheap *dh)
{
	for (int i = 0; i < dh->narenas; i++) {
		for (struct alloc *r = dh->arenas[i]->quar_head, *n; r; r = n) {
			n = r->qnext;
			free(r);
		}
	}
	for (size_t i = 0; i <= dh->hash_mask && dh->hash; i++) {
		for (struct alloc *r = dh->hash[i], *n; r; r = n) {
			n = r->hnext;
			free(r);
		}
	}
	free(dh->hash);
	dh->hash = NULL;
	for (struct alloc *r = dh->alloc_pool, *n; r; r = n) {
		n = r->qnext;
		free(r);
	}
	dh->alloc_pool = NULL;
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

void record_insert(struct devheap *dh, struct alloc *r)
{
	size_t k;

	if (dh->hash_count > dh->hash_mask)
		hash_grow(dh);
	k = hash_of(dh, r->base);
	r->hnext = dh->hash[k];
	dh->hash[k] = r;
	dh->hash_count++;
}

struct alloc *record_remove(struct devheap *dh, vmm_devptr base)
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

void account_alloc(struct arena *a, struct alloc *r)
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

void account_free(struct arena *a, struct alloc *r)
{
	a->st.live_bytes -= r->size;
	a->st.live_usable -= r->usable;
	a->st.live_count--;
	a->st.free_calls++;
	a->dh->live_total -= r->usable;
	a->dh->live_req -= r->size;
}

void quarantine_put(struct alloc *r, bool on_stream, vmm_stream stream)
{
	struct arena *a = r->arena;

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
	a->dh->quar_total += r->usable;
	r->qseq = ++a->dh->quar_seq;
}

static void quarantine_unlink(struct alloc *r)
{
	struct arena *a = r->arena;

	if (r->qprev)
		r->qprev->qnext = r->qnext;
	else
		a->quar_head = r->qnext;
	if (r->qnext)
		r->qnext->qprev = r->qprev;
	a->quar_bytes -= r->usable;
	a->dh->quar_total -= r->usable;
}

void quarantine_take(struct alloc *r)
{
	quarantine_unlink(r);
	r->quarantined = false;
	r->stream_ordered = false;
	r->stream = NULL;
	if (!r->slab)
		r->blk->state = BLK_USED;
}

/* The allocation's memory becomes free for anyone (its quarantine is over). */
static void alloc_finish_free(struct devheap *dh, struct alloc *r)
{
	if (r->slab)
		slab_free_slot(dh, r);
	else
		blk_release(dh, r->blk);
	alloc_put(dh, r);
}

/* Reuse without a synchronization. Every allocation in the quarantine was freed after the last
 * reclaim, and so after the last successful synchronization here, S, began (the lock is held
 * from before S until its reclaim). Work that may touch one was submitted before its free, by a call whose
 * count (made after the driver accepted the work: shim/hooks_submit.c) happens before the free,
 * and so before this read. When the count read now equals the one read just before S began,
 * each of those counts came before that earlier read, and so did its work: S drained it. The
 * count only grows, so one submission anywhere since then means a synchronization. Release on
 * the increment, acquire on the read: the work's submission happens before the read that sees
 * its count, which is what the argument needs (and costs no more than relaxed on x86).
 * The shim's own device work (the sleep's and wake's copies, a copy into a handle of its own) is
 * not counted: each is waited for (its streams synchronized) before the heap's lock that it runs
 * under is released, and copies that could not be confirmed finished write only to memory parked
 * mapped, never to the heap's (heap_wake.c). So none is in flight when this runs. A failed
 * synchronization, or a backend that cannot count (NULL), means no skip. */
static bool idle_since_sync(struct devheap *dh, vmm_backend *be, uint64_t *now)
{
	if (!be->submitted)
		return false;
	*now = be->submitted(be);
	return dh->synced_known && *now == dh->synced_submissions;
}

bool heap_device_idle(struct devheap *dh, uint64_t *now)
{
	*now = 0;
	return idle_since_sync(dh, dh->core->be, now);
}

bool heap_reclaim_free(struct devheap *dh)
{
	uint64_t now;

	return dh->quar_total && idle_since_sync(dh, dh->core->be, &now);
}

vmm_status heap_reclaim(struct devheap *dh, struct arena *who, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	uint64_t before = 0;
	vmm_status st;
	double t0;

	if (!dh->quar_total)
		return VMM_OK;
	if (idle_since_sync(dh, be, &before)) {
		if (who)
			who->st.syncs_skipped++;
		heap_reclaim_synced(dh);
		return VMM_OK;
	}
	/* before was read ahead of the synchronization: a submission between the two moves the
	 * count past it, so it is never taken as drained. */
	dh->synced_known = false;
	t0 = vmm_now_s();
	heap_lock_wait_begin(dh, t0);
	st = be->synchronize(be, dh->dev, err);
	heap_lock_wait_end(dh);
	dh->sync_done_s = vmm_now_s();
	dh->sync_wait_s += dh->sync_done_s - t0;
	if (st)
		return st;
	if (who)
		who->st.syncs++;
	heap_synced_upto(dh, dh->quar_seq, before);
	return VMM_OK;
}

static void reclaim_upto(struct devheap *dh, uint64_t seq)
{
	for (int i = 0; i < dh->narenas; i++) {
		struct alloc *r = dh->arenas[i]->quar_head, *next;

		for (; r; r = next) {
			next = r->qnext;
			if (r->qseq <= seq) {
				quarantine_unlink(r);
				alloc_finish_free(dh, r);
			}
		}
	}
}

void heap_reclaim_synced(struct devheap *dh)
{
	reclaim_upto(dh, dh->quar_seq); /* every free so far */
	dh->cut_since_sync = 0;
}

void heap_synced_upto(struct devheap *dh, uint64_t seq, uint64_t before)
{
	reclaim_upto(dh, seq);
	if (dh->core->be->submitted && (!dh->synced_known || before > dh->synced_submissions)) {
		dh->synced_submissions = before;
		dh->synced_known = true;
	}
	dh->cut_since_sync = 0;
}
