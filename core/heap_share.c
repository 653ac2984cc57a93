/* Shared handles (heap_share.h) and the exported allocations over them (vmm_share.h). An
 * allocation another process maps pins the handles under its granules: they stay mapped here
 * through sleep and trim, and nothing in them is handed out again, so that the other process never
 * sees this heap put new data where it expects the old. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "heap_internal.h"
#include "heap_keep.h"
#include "heap_reads.h"
#include "heap_share.h"
#include "vmm_share.h"

/* The granules r lies on. */
static void granules_of(struct devheap *dh, const struct alloc *r, vmm_devptr *lo,
			vmm_devptr *hi)
{
	*lo = r->base & ~(vmm_devptr)(dh->gran - 1);
	*hi = align_up(r->base + (r->usable ? r->usable : 1), dh->gran);
}

/* What other processes map of r: its granules widened to the whole handles they lie in. The
 * driver maps whole handles only (tests/gpu/PROBE.md (k)), so an allocation in a handle it
 * shares with others (a joint handle made at a wake) is handed over with that handle, as a
 * native IPC handle of a cached segment hands over the segment. */
static void span_of(struct devheap *dh, const struct alloc *r, vmm_devptr *lo, vmm_devptr *hi)
{
	struct phandle *first, *last;

	granules_of(dh, r, lo, hi);
	first = page_handle_get(dh, *lo);
	last = page_handle_get(dh, *hi - 1);
	if (first)
		*lo = first->va;
	if (last)
		*hi = last->va + last->size;
}

static bool add_shared(struct devheap *dh, struct phandle *h)
{
	if (dh->nshared == dh->cap_shared) {
		size_t cap = dh->cap_shared ? 2 * dh->cap_shared : 16;
		struct phandle **n = realloc(dh->shared, cap * sizeof(*n));

		if (!n)
			return false;
		dh->shared = n;
		dh->cap_shared = cap;
	}
	dh->shared[dh->nshared++] = h;
	h->shared = true;
	h->arena->st.shared_bytes += h->size;
	return true;
}

/* h just became shared: its free memory is retired, its slabs hand out no slot again. */
static void pin_contents(struct devheap *dh, struct phandle *h)
{
	vmm_devptr end = h->va + h->size;
	struct blk *list[64];
	size_t n;

	/* Collect first: releasing a block changes its neighbours' links. Repeat until no free
	 * block or unfrozen slab is left in h (each pass takes up to 64). */
	do {
		n = 0;
		for (struct blk *b = blk_containing(dh, h->va); b && b->addr < end && n < 64;
		     b = b->next)
			if (b->state == BLK_FREE || (b->state == BLK_SLAB && !b->slab->frozen))
				list[n++] = b;
		for (size_t i = 0; i < n; i++) {
			struct blk *b = list[i];

			if (b->state == BLK_SLAB) {
				slab_freeze(dh, b->slab);
			} else {
				free_index_remove(b->arena, b);
				blk_release(dh, b);
			}
		}
	} while (n == 64);
}

vmm_status share_mark(struct devheap *dh, struct alloc *r, vmm_error *err)
{
	vmm_devptr lo, hi, va;

	span_of(dh, r, &lo, &hi);
	for (va = lo; va < hi;) {
		struct phandle *h = page_handle_get(dh, va);

		if (!h)
			return vmm_fail(err, VMM_E_INVALID, 0, "0x%llx has no physical memory",
					(unsigned long long)va);
		if (!h->shared) {
			if (!add_shared(dh, h))
				return vmm_fail(err, VMM_E_HOST_OOM, 0,
						"no host memory to record a shared handle");
			pin_contents(dh, h);
		}
		va = h->va + h->size;
	}
	return VMM_OK;
}

bool share_touches(struct devheap *dh, vmm_devptr va, size_t size)
{
	vmm_devptr end = va + (size ? size : 1);

	while (dh->nshared && va < end) {
		struct phandle *h = page_handle_get(dh, va);

		if (!h)
			return false;
		if (h->shared)
			return true;
		va = h->va + h->size;
	}
	return false;
}

static bool all_retired(struct devheap *dh, struct phandle *h)
{
	vmm_devptr end = h->va + h->size;

	struct blk *b = blk_containing(dh, h->va);

	/* Retired blocks stay inside one handle; one that does not (a split that found no host
	 * memory) keeps its handles until the end. */
	if (!b)
		return false;
	for (; b && b->addr < end; b = b->next)
		if (b->state != BLK_RETIRED || b->addr < h->va || b->addr + b->size > end)
			return false;
	return true;
}

/* Unmap and release h, all retired: the blocks over it go, the address space is unclaimed. A
 * handle that will not unmap is parked mapped, its address space claimed until it does. */
static void release_retired(struct devheap *dh, struct phandle *h)
{
	vmm_devptr end = h->va + h->size;
	struct arena *a = h->arena;
	struct blk *b = blk_containing(dh, h->va), *next;

	/* A descriptor kept for it would hold the memory for the driver (none should be left:
	 * the allocations over it were freed, which closes them). */
	keep_close(dh->core, keep_detach_range(dh, h->va, h->size));
	/* Retired blocks never cross a handle's edge (retire_shared splits at them). */
	for (; b && b->addr < end; b = next) {
		next = b->next;
		a->st.retired_bytes -= b->size;
		blk_unlink(dh, b);
	}
	page_handle_set(dh, h->va, h->size, NULL);
	stats_mapped(a, -(int64_t)h->size);
	a->st.shared_bytes -= h->size;
	handle_unlink(dh, h);
	if (phys_unmap_release(dh, h->h, h->va, h->size, true, "a freed export"))
		va_free(dh, h->va, h->size);
	handle_forget(dh, h, a);
}

void share_settle(struct devheap *dh)
{
	/* An export running without the lock uses the handles: the last one settles. */
	if (!dh->share_check || dh->exports_running)
		return;
	dh->share_check = false;
	for (size_t i = 0; i < dh->nshared;) {
		struct phandle *h = dh->shared[i];

		if (h->asleep || !all_retired(dh, h)) {
			i++;
			continue;
		}
		dh->shared[i] = dh->shared[--dh->nshared];
		release_retired(dh, h);
	}
}

/* The live allocation containing ptr (caller holds the lock). */
static struct alloc *alloc_at(struct devheap *dh, vmm_devptr ptr)
{
	struct blk *b = blk_containing(dh, ptr);
	struct alloc *r = NULL;

	if (b && b->state == BLK_USED) {
		r = b->alloc;
	} else if (b && b->state == BLK_SLAB) {
		size_t slot = (ptr - b->addr) / b->slab->slot_size;

		r = slot < b->slab->nslots ? b->slab->slots[slot] : NULL;
	}
	if (r && (r->quarantined || ptr - r->base >= r->usable))
		r = NULL;
	return r;
}

static void fill_info(struct devheap *dh, const struct alloc *r, vmm_share_info *out)
{
	vmm_devptr lo, hi, glo, ghi;
	struct phandle *h;

	span_of(dh, r, &lo, &hi);
	granules_of(dh, r, &glo, &ghi);
	h = page_handle_get(dh, lo);
	out->own_handle = h && h->va == r->base && h->va + h->size == ghi;
	out->device = dh->dev;
	out->base = r->base;
	out->size = r->size;
	out->id = r->share_id;
	out->span = lo;
	out->span_size = (size_t)(hi - lo);
}

static size_t count_pieces(struct devheap *dh, const struct alloc *r)
{
	vmm_devptr lo, hi, va;
	size_t n = 0;

	span_of(dh, r, &lo, &hi);
	for (va = lo; va < hi; n++) {
		struct phandle *h = page_handle_get(dh, va);

		if (!h)
			return SIZE_MAX;
		va = h->va + h->size;
	}
	return n;
}

/* ptr's device heap in *out, or VMM_E_NOT_OURS when ptr is not the core's. */
static vmm_status ours_heap(vmm_core *core, vmm_devptr ptr, struct devheap **out,
			    vmm_error *err)
{
	*out = heap_of_ptr(core, ptr);
	return *out ? VMM_OK : vmm_fail(err, VMM_E_NOT_OURS, 0, "0x%llx was not allocated by "
					"vmmshim", (unsigned long long)ptr);
}

/* The live, awake allocation containing ptr in *out, or why not (caller holds the lock). */
static vmm_status awake_alloc_at(struct devheap *dh, vmm_devptr ptr, struct alloc **out,
				 vmm_error *err)
{
	struct alloc *r = alloc_at(dh, ptr);

	*out = r;
	if (!r)
		return vmm_fail(err, VMM_E_NOT_OURS, 0, "0x%llx is in no live allocation",
				(unsigned long long)ptr);
	if (r->arena->asleep)
		return vmm_fail(err, VMM_E_BUSY, 0, "the allocation at 0x%llx is asleep",
				(unsigned long long)r->base);
	return VMM_OK;
}

vmm_status vmm_share_export(vmm_core *core, vmm_devptr ptr, vmm_share_info *out, vmm_error *err)
{
	struct devheap *dh;
	vmm_backend *be = core->be;
	struct alloc *r;
	vmm_status st = VMM_OK;

	if ((st = ours_heap(core, ptr, &dh, err)))
		return st;
	if (!be->export_fd || !be->shareable || !be->shareable(be, dh->dev))
		return vmm_fail(err, VMM_E_UNSUPPORTED, 0, "device %d's memory cannot be exported "
				"as file descriptors", dh->dev);
	pthread_mutex_lock(&dh->lock);
	st = awake_alloc_at(dh, ptr, &r, err);
	if (!st && !r->share_id) {
		if (count_pieces(dh, r) > VMM_SHARE_MAX_PIECES)
			st = vmm_fail(err, VMM_E_UNSUPPORTED, 0, "the allocation at 0x%llx lies in "
				      "more than %d physical handles", (unsigned long long)r->base,
				      VMM_SHARE_MAX_PIECES);
		else
			st = share_mark(dh, r, err);
		if (!st)
			r->share_id = atomic_fetch_add(&core->last_share_id, 1) + 1;
	}
	if (!st)
		fill_info(dh, r, out);
	pthread_mutex_unlock(&dh->lock);
	return st;
}

/* The program holds r's handle by value: it may never be released and re-created. */
static void mark_retained(struct devheap *dh, const struct alloc *r)
{
	vmm_devptr lo, hi, va;

	span_of(dh, r, &lo, &hi);
	for (va = lo; va < hi;) {
		struct phandle *h = page_handle_get(dh, va);

		if (!h)
			return;
		h->retained = true;
		h->release_ok = false;
		va = h->va + h->size;
	}
}

void vmm_share_release_allow(vmm_core *core, bool allow)
{
	for (int d = 0; d < core->ndev; d++) {
		struct devheap *dh = heap_for(core, d, false, NULL);
		struct kept_export *gone = NULL;

		if (!dh)
			continue;
		pthread_mutex_lock(&dh->lock);
		/* A sleep may release the shared handles from here on: not under an export that
		 * runs without the lock (vmm_share_keep, about a millisecond per GiB). */
		while (allow && dh->exports_running) {
			pthread_mutex_unlock(&dh->lock);
			nanosleep(&(struct timespec){ 0, 200000 }, NULL);
			pthread_mutex_lock(&dh->lock);
		}
		for (size_t i = 0; i < dh->nshared; i++)
			dh->shared[i]->release_ok = allow && !dh->shared[i]->retained;
		/* A kept descriptor would keep the driver from taking the memory back. */
		if (allow)
			gone = keep_detach_all(dh);
		pthread_mutex_unlock(&dh->lock);
		keep_close(core, gone);
	}
}

uint64_t vmm_share_asleep_bytes(vmm_core *core, int dev)
{
	struct devheap *dh = dev >= 0 && dev < core->ndev ? heap_for(core, dev, false, NULL) : NULL;
	uint64_t bytes = 0;

	if (!dh || !heap_lock_read(dh))
		return 0;
	for (size_t i = 0; i < dh->nshared; i++)
		if (dh->shared[i]->asleep)
			bytes += dh->shared[i]->size;
	pthread_mutex_unlock(&dh->lock);
	return bytes;
}

vmm_status vmm_share_own_plan(vmm_core *core, vmm_devptr ptr, bool *move, vmm_error *err)
{
	struct devheap *dh;
	struct alloc *r;
	vmm_status st;

	*move = false;
	if ((st = ours_heap(core, ptr, &dh, err)))
		return st;
	pthread_mutex_lock(&dh->lock);
	st = awake_alloc_at(dh, ptr, &r, err);
	if (!st && !(r->share_id && own_has(dh, r)))
		st = own_check(dh, r, move, err);
	pthread_mutex_unlock(&dh->lock);
	return st;
}

vmm_status vmm_share_own(vmm_core *core, vmm_devptr ptr, vmm_share_info *out, vmm_error *err)
{
	struct devheap *dh;
	struct alloc *r;
	vmm_status st;
	bool move;

	if ((st = ours_heap(core, ptr, &dh, err)))
		return st;
	pthread_mutex_lock(&dh->lock);
	st = awake_alloc_at(dh, ptr, &r, err);
	if (!st && (!r->share_id || !own_has(dh, r))) {
		/* Checked again: the heap may have changed since the plan. */
		st = own_check(dh, r, &move, err);
		if (!st && move)
			st = own_move(dh, r, err);
		if (!st && !r->share_id && !(st = share_mark(dh, r, err)))
			r->share_id = atomic_fetch_add(&core->last_share_id, 1) + 1;
	}
	if (!st) {
		mark_retained(dh, r);
		fill_info(dh, r, out);
	}
	pthread_mutex_unlock(&dh->lock);
	return st;
}

static void close_pieces(vmm_share_piece *pieces, size_t n)
{
	for (size_t i = 0; i < n; i++)
		close(pieces[i].fd);
}

/* The live export at base with that id (caller holds the lock), or why not. */
static vmm_status export_at(struct devheap *dh, vmm_devptr base, uint64_t id, struct alloc **out,
			    vmm_error *err)
{
	struct alloc *r = alloc_at(dh, base);

	*out = r;
	if (!r || r->base != base || !id || r->share_id != id)
		return vmm_fail(err, VMM_E_NOT_OURS, 0, "no live export %llu at 0x%llx (freed?)",
				(unsigned long long)id, (unsigned long long)base);
	return VMM_OK;
}

/* Walk r's span handle by handle (caller holds the lock): VMM_E_BUSY when one is asleep;
 * *release_ok when a group sleep may release one (nothing may be kept then). With pieces, each
 * piece's place goes into pieces[0..*n) and its handle into hv (when given), and with export each
 * is exported as a new descriptor. */
static vmm_status span_pieces(struct devheap *dh, const struct alloc *r, vmm_share_piece *pieces,
			      vmm_phys *hv, size_t max, bool export, size_t *n, bool *release_ok,
			      vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	vmm_devptr lo, hi, va;
	vmm_status st = VMM_OK;
	size_t k = 0;

	*release_ok = false;
	span_of(dh, r, &lo, &hi);
	for (va = lo; va < hi && !st;) {
		struct phandle *h = page_handle_get(dh, va);
		vmm_devptr end = h->va + h->size < hi ? h->va + h->size : hi;

		if (h->asleep) {
			st = vmm_fail(err, VMM_E_BUSY, 0, "export %llu is asleep with its process's "
				      "group (wake the exporter first)",
				      (unsigned long long)r->share_id);
			break;
		}
		*release_ok |= h->release_ok;
		if (pieces && k == max) {
			st = vmm_fail(err, VMM_E_UNSUPPORTED, 0, "more than %zu pieces", max);
			break;
		}
		if (pieces && export) {
			st = be->export_fd(be, dh->dev, h->h, &pieces[k].fd, err);
			if (st)
				break;
		}
		if (pieces) {
			pieces[k].offset = (size_t)(va - lo);
			pieces[k].size = (size_t)(end - va);
			pieces[k].handle_offset = (size_t)(va - h->va);
		}
		if (hv)
			hv[k] = h->h;
		k++;
		va = end;
	}
	if (st && pieces && export)
		close_pieces(pieces, k);
	*n = st ? 0 : k;
	return st;
}

/* Keep what was exported into pieces[0..n) for r and hand the caller duplicates: false when it
 * is not kept (budget, host memory, a group sleep may release it), the pieces the caller's. */
static bool keep_and_dup(struct devheap *dh, const struct alloc *r, vmm_share_piece *pieces,
			 size_t n)
{
	struct kept_export *k;
	vmm_devptr lo, hi;
	vmm_error e;

	span_of(dh, r, &lo, &hi);
	/* The record copies the pieces; the caller's get duplicates in their place. */
	if (!keep_store(dh, r->share_id, lo, (size_t)(hi - lo), pieces, n))
		return false;
	k = keep_find(dh, r->share_id);
	if (!keep_dup(k, pieces, n, &e))
		return true;
	/* No descriptor to spare: the caller gets the originals back, nothing is kept. */
	k = keep_detach_id(dh, r->share_id);
	memcpy(pieces, k->pieces, n * sizeof(*pieces));
	k->n = 0;
	atomic_fetch_sub(&dh->core->kept_fds, n);
	keep_close(dh->core, k);
	return false;
}

vmm_status vmm_share_fds(vmm_core *core, vmm_devptr base, uint64_t id, vmm_share_info *info,
			 vmm_share_piece *pieces, size_t max, size_t *n, bool *exported,
			 vmm_error *err)
{
	struct devheap *dh = heap_of_ptr(core, base);
	vmm_backend *be = core->be;
	struct kept_export *k;
	struct alloc *r;
	vmm_status st;
	bool release_ok, fresh = false;

	*n = 0;
	if (!dh || !be->export_fd)
		return vmm_fail(err, VMM_E_NOT_OURS, 0, "no export at 0x%llx",
				(unsigned long long)base);
	/* Within bounded reads (the control server's), an allocator waiting for its device does
	 * not hold the request past them. */
	if (!heap_lock_read(dh))
		return vmm_fail(err, VMM_E_BUSY, 0, "the allocator of device %d is waiting for the "
				"device", dh->dev);
	st = export_at(dh, base, id, &r, err);
	if (!st && !pieces)
		st = vmm_fail(err, VMM_E_INVALID, 0, "no room for the pieces");
	if (!st) {
		fill_info(dh, r, info);
		k = keep_find(dh, id);
		if (k) {
			st = keep_dup(k, pieces, max, err);
			*n = st ? 0 : k->n;
		} else if (!(st = span_pieces(dh, r, pieces, NULL, max, true, n, &release_ok,
					       err))) {
			fresh = true;
			if (!release_ok)
				keep_and_dup(dh, r, pieces, *n);
		}
	}
	pthread_mutex_unlock(&dh->lock);
	if (exported)
		*exported = fresh;
	return st;
}

vmm_status vmm_share_fds_now(vmm_core *core, vmm_devptr base, uint64_t id,
			     vmm_share_info *info, vmm_share_piece *pieces, size_t max, size_t *n,
			     vmm_error *err)
{
	struct devheap *dh = heap_of_ptr(core, base);
	struct kept_export *k;
	struct alloc *r;
	vmm_status st;

	*n = 0;
	if (!dh || !core->be->export_fd)
		return vmm_fail(err, VMM_E_NOT_OURS, 0, "no export at 0x%llx",
				(unsigned long long)base);
	if (!pieces)
		return vmm_fail(err, VMM_E_INVALID, 0, "no room for the pieces");
	if (pthread_mutex_trylock(&dh->lock))
		return vmm_fail(err, VMM_E_BUSY, 0, "the heap is in use");
	st = export_at(dh, base, id, &r, err);
	k = st ? NULL : keep_find(dh, id);
	if (!st && !k)
		st = vmm_fail(err, VMM_E_BUSY, 0, "export %llu is not kept",
			      (unsigned long long)id);
	if (!st) {
		fill_info(dh, r, info);
		st = keep_dup(k, pieces, max, err);
		*n = st ? 0 : k->n;
	}
	pthread_mutex_unlock(&dh->lock);
	return st;
}

/* Export hv[0..n) into pieces' descriptors, without the heap's lock (the caller counts itself in
 * exports_running, which keeps the handles). On failure nothing is left open. */
static vmm_status export_unlocked(vmm_backend *be, int dev, const vmm_phys *hv,
				  vmm_share_piece *pieces, size_t n, vmm_error *err)
{
	vmm_status st = VMM_OK;
	size_t k;

	for (k = 0; k < n && !st; k++)
		st = be->export_fd(be, dev, hv[k], &pieces[k].fd, err);
	if (st)
		close_pieces(pieces, k - 1);
	return st;
}

/* After an export without the lock (caller holds it again): is base still export id, awake, not
 * to be released by a group sleep, over the same handles hv[0..n)? now: room for
 * VMM_SHARE_MAX_PIECES handles. */
static vmm_status still_exported(struct devheap *dh, vmm_devptr base, uint64_t id,
				 const vmm_phys *hv, size_t n, vmm_phys *now, struct alloc **r,
				 vmm_error *err)
{
	size_t k = 0;
	bool release_ok;
	vmm_status st = export_at(dh, base, id, r, err);

	if (!st)
		st = span_pieces(dh, *r, NULL, now, VMM_SHARE_MAX_PIECES, false, &k, &release_ok,
				 err);
	if (!st && (release_ok || k != n || memcmp(now, hv, n * sizeof(*hv))))
		st = vmm_fail(err, VMM_E_BUSY, 0, "export %llu changed while it was exported ahead "
			      "(a group sleep, or its memory moved)", (unsigned long long)id);
	return st;
}

vmm_status vmm_share_keep(vmm_core *core, vmm_devptr base, uint64_t id, bool *kept,
			  vmm_error *err)
{
	struct devheap *dh = heap_of_ptr(core, base);
	vmm_share_piece *pieces;
	vmm_phys *hv;
	vmm_devptr lo, hi;
	struct alloc *r;
	vmm_status st;
	size_t n = 0;
	bool release_ok, planned = false;

	*kept = false;
	if (!dh || !core->be->export_fd)
		return vmm_fail(err, VMM_E_NOT_OURS, 0, "no export at 0x%llx",
				(unsigned long long)base);
	pieces = malloc(VMM_SHARE_MAX_PIECES * sizeof(*pieces));
	hv = malloc(2 * VMM_SHARE_MAX_PIECES * sizeof(*hv));   /* then, and after the export */
	if (!pieces || !hv) {
		free(pieces);
		free(hv);
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory to export");
	}
	pthread_mutex_lock(&dh->lock);
	st = export_at(dh, base, id, &r, err);
	if (!st && keep_find(dh, id)) {
		*kept = true;
	} else if (!st && !(st = span_pieces(dh, r, NULL, NULL, 0, false, &n, &release_ok, err)) &&
		   !release_ok && atomic_load(&core->kept_fds) + n <= keep_budget()) {
		/* Counted first: beyond the budget nothing is exported for nothing. */
		st = span_pieces(dh, r, pieces, hv, VMM_SHARE_MAX_PIECES, false, &n, &release_ok,
				 err);
		planned = !st;
	}
	if (planned) {
		/* The driver's export takes about a millisecond per GiB: the program's allocations
		 * and frees go on meanwhile. A free of this allocation retires its blocks but the
		 * handles stay (share_settle), and no group sleep releases them (release_allow)
		 * until the export is done; what changed is checked after. */
		dh->exports_running++;
		pthread_mutex_unlock(&dh->lock);
		st = export_unlocked(core->be, dh->dev, hv, pieces, n, err);
		pthread_mutex_lock(&dh->lock);
		dh->exports_running--;
		if (!st && (st = still_exported(dh, base, id, hv, n, hv + VMM_SHARE_MAX_PIECES, &r,
						err)))
			close_pieces(pieces, n);
		if (!st && keep_find(dh, id)) {   /* an open exported and kept it meanwhile */
			close_pieces(pieces, n);
			*kept = true;
		} else if (!st) {
			span_of(dh, r, &lo, &hi);
			if (!(*kept = keep_store(dh, id, lo, (size_t)(hi - lo), pieces, n)))
				close_pieces(pieces, n);
		}
		share_settle(dh); /* what a free left to release meanwhile */
	}
	pthread_mutex_unlock(&dh->lock);
	free(pieces);
	free(hv);
	return st;
}

size_t vmm_share_kept_fds(vmm_core *core)
{
	return atomic_load(&core->kept_fds);
}

void vmm_share_keep_after_fork(vmm_core *core)
{
	for (int d = 0; d < core->ndev; d++) {
		struct devheap *dh = heap_for(core, d, false, NULL);

		if (dh)
			keep_after_fork(dh);
	}
}

size_t vmm_share_list(vmm_core *core, vmm_share_info *out, size_t max)
{
	size_t n = 0;

	for (int d = 0; d < core->ndev; d++) {
		struct devheap *dh = heap_for(core, d, false, NULL);

		if (!dh || !heap_lock_read(dh))
			continue;
		for (size_t i = 0; dh->hash && i <= dh->hash_mask; i++)
			for (struct alloc *r = dh->hash[i]; r; r = r->hnext)
				if (r->share_id && n++ < max)
					fill_info(dh, r, &out[n - 1]);
		pthread_mutex_unlock(&dh->lock);
	}
	return n;
}
