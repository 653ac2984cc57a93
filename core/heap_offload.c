/* Sleep and wake of the core's own heaps (heap_offload.h). Sleep, per device: drain, reclaim the
 * quarantine, give wholly free handles back without copying, copy the live ranges of the other
 * handles into host buffers (kept per handle and reused across cycles), unmap and release them;
 * the addresses stay reserved. Wake: check the driver's free memory, re-create every handle, map
 * it at its old address, grant access to the owner and peers, copy back: in batches, each copy
 * running while the next batch is set up. Any failure rolls back;
 * a rollback that fails leaves the partial state (offload/transfer.h), never lost contents. */
#include "heap_offload.h"

#include <stdlib.h>
#include <string.h>

#include "heap_coalesce.h"
#include "heap_internal.h"
#include "log.h"
#include "offload/backup_pool.h"
#include "offload/drain.h"

/* Which arenas an operation acts on: a tag's (NULL: every tag), or, for an undo, exactly those
 * that the last operation changed (marked). */
struct filter {
	const char *tag;
	bool changed_only;
	bool discard;
};

static bool selected(const struct arena *a, const struct filter *f)
{
	if (f->changed_only)
		return a->marked;
	return !f->tag || !strcmp(f->tag, a->tag);
}

/* An arena a sleep acts on: selected, and with memory resident (awake, or asleep in part). */
static bool sleeps(const struct arena *a, const struct filter *f)
{
	return selected(a, f) && (!a->asleep || a->asleep_in_part);
}

/* The devices an operation covers, locked in ascending order. */
struct sel {
	struct devheap *dh[VMM_MAX_DEVICES];
	int n;
};

static vmm_status select_devices(vmm_core *core, const vmm_sleep_opts *o, struct sel *s,
				 vmm_error *err)
{
	int dev = o ? o->device : -1;

	s->n = 0;
	if (dev >= core->ndev || dev < -1)
		return vmm_fail(err, VMM_E_INVALID, 0, "no device %d", dev);
	if (o && o->tag && (!o->tag[0] || strlen(o->tag) >= VMM_TAG_MAX))
		return vmm_fail(err, VMM_E_INVALID, 0, "invalid tag");
	for (int d = dev < 0 ? 0 : dev; d < (dev < 0 ? core->ndev : dev + 1); d++) {
		struct devheap *dh = heap_for(core, d, false, NULL);

		if (dh) {
			pthread_mutex_lock(&dh->lock);
			s->dh[s->n++] = dh;
		}
	}
	return VMM_OK;
}

static void unlock_all(struct sel *s)
{
	for (int i = s->n - 1; i >= 0; i--)
		pthread_mutex_unlock(&s->dh[i]->lock);
}

static struct filter filter_of(const vmm_sleep_opts *o)
{
	return (struct filter){ .tag = o ? o->tag : NULL, .discard = o && o->discard };
}

/* A shared handle stays mapped through a sleep, unless a group sleep allowed its release. */
static bool stays(const struct phandle *h, const struct filter *f)
{
	return h->shared && (!h->release_ok || f->discard);
}

/* The ranges of h that hold live data (used blocks and slabs; in a shared handle also retired
 * blocks, which an importer may still map), merged, appended to *r. */
static vmm_status live_ranges(struct devheap *dh, struct phandle *h, vmm_copy_range **r,
			      size_t *n, size_t *cap, vmm_error *err)
{
	vmm_devptr end = h->va + h->size;
	size_t first = *n;

	for (struct blk *b = blk_containing(dh, h->va); b && b->addr < end; b = b->next) {
		vmm_devptr lo, hi;

		if (b->state != BLK_USED && b->state != BLK_SLAB &&
		    !(h->shared && b->state == BLK_RETIRED))
			continue;
		lo = b->addr > h->va ? b->addr : h->va;
		hi = b->addr + b->size < end ? b->addr + b->size : end;
		if (*n > first && (*r)[*n - 1].dev + (*r)[*n - 1].size == lo) {
			(*r)[*n - 1].size += hi - lo;
			continue;
		}
		if (*n == *cap) {
			size_t c = *cap ? *cap * 2 : 64;
			vmm_copy_range *nr = realloc(*r, c * sizeof(*nr));

			if (!nr)
				return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for ranges");
			*r = nr;
			*cap = c;
		}
		(*r)[*n].dev = lo;
		(*r)[*n].host = (char *)h->backup.ptr + (lo - h->va);
		(*r)[(*n)++].size = hi - lo;
	}
	return VMM_OK;
}

/* A host backup of size bytes from the device's pool (the pool made at the first). */
static vmm_status backup_get(struct devheap *dh, size_t size, int provision_now, vmm_host_buf *out,
			     vmm_error *err)
{
	if (!dh->backups) {
		dh->backups = vmm_backup_pool_create(dh->core->be);
		if (!dh->backups)
			return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a backup pool");
		dh->backup_put = vmm_backup_put;
		dh->backups_destroy = vmm_backup_pool_destroy;
	}
	return vmm_backup_get(dh->backups, size, provision_now, out, err);
}

static vmm_status backup_for(struct devheap *dh, struct phandle *h, int provision_now,
			     vmm_error *err)
{
	return backup_get(dh, h->size, provision_now, &h->backup, err);
}

/* Each run that will become one handle after the sleep (heap_coalesce.h) is backed by one piece,
 * its handles by slices of it in address order. The old pieces go back after the new one is had
 * (a pool chunk emptied first would be mapped and pinned again); where the host cannot hold
 * both, they go back first. */
static vmm_status run_backups(struct devheap *dh, struct phandle **hs,
			      const struct handle_run *runs, size_t nruns, int provision_now,
			      vmm_error *err)
{
	for (size_t i = 0; i < nruns; i++) {
		const struct handle_run *r = &runs[i];
		vmm_host_buf piece;
		bool put = false;
		vmm_status st;

		if (run_backup_contiguous(hs, r))
			continue;
		st = backup_get(dh, r->bytes, provision_now, &piece, err);
		if (st == VMM_E_HOST_OOM) {
			for (size_t k = r->first; k < r->first + r->n; k++)
				heap_backup_put(dh, &hs[k]->backup);
			put = true;
			st = backup_get(dh, r->bytes, provision_now, &piece, err);
		}
		if (st)
			return st;
		for (size_t k = r->first; k < r->first + r->n; k++) {
			if (!put)
				heap_backup_put(dh, &hs[k]->backup);
			hs[k]->backup = (vmm_host_buf){
				.ptr = (char *)piece.ptr + (hs[k]->va - hs[r->first]->va),
				.size = hs[k]->size,
			};
		}
	}
	return VMM_OK;
}

static vmm_status engine_of(struct devheap *dh, vmm_error *err)
{
	vmm_status st;

	if (dh->ce)
		return VMM_OK;
	st = vmm_copy_engine_create(dh->core->be, dh->dev, &dh->ce, err);
	if (!st)
		dh->ce_destroy = vmm_copy_engine_destroy;
	return st;
}

static vmm_status grant_runs(struct devheap *dh, struct phandle **hs, size_t n, vmm_error *err)
{
	for (size_t i = 0; i < n;) {
		vmm_devptr start = hs[i]->va;
		size_t len = hs[i]->size;
		vmm_status st;

		for (i++; i < n && hs[i]->va == start + len; i++)
			len += hs[i]->size;
		st = heap_grant_access(dh, start, len, err);
		if (st)
			return st;
	}
	return VMM_OK;
}

static int by_va(const void *a, const void *b)
{
	const struct phandle *x = *(struct phandle *const *)a, *y = *(struct phandle *const *)b;

	return x->va < y->va ? -1 : x->va > y->va;
}

/* Handles are brought back in batches so that the copy of one overlaps the creation, mapping and
 * access grant of the next (the driver's cost per byte there is a few percent of the copy's). The
 * first batch is small, so that the copy starts early; later ones grow up to the cap. */
#define WAKE_BATCH_FIRST ((uint64_t)64 << 20)
#define WAKE_BATCH_MAX ((uint64_t)1 << 30)

/* Where a restore stands, for its unwinding: hs[0..created) exist, hs[0..mapped) are mapped. */
struct restore {
	struct devheap *dh;
	struct phandle **hs;
	size_t created, mapped;
	bool copying;           /* the engine was begun: vmm_copy_end is due */
	vmm_copy_range *r;
	size_t cap;
};

/* Create, map and grant hs[i..j) (address order), then issue the copy of their backups. */
static vmm_status restore_batch(struct restore *rs, size_t i, size_t j, bool no_copy,
				vmm_error *err)
{
	struct devheap *dh = rs->dh;
	vmm_backend *be = dh->core->be;
	struct phandle **hs = rs->hs;
	size_t nr = 0;
	vmm_status st = VMM_OK;

	for (; rs->created < j; rs->created++)
		if ((st = be->create(be, dh->dev, hs[rs->created]->size, &hs[rs->created]->h, err)))
			return st;
	for (; rs->mapped < j; rs->mapped++)
		if ((st = be->map(be, hs[rs->mapped]->va, hs[rs->mapped]->size, hs[rs->mapped]->h,
				  err)))
			return st;
	st = grant_runs(dh, hs + i, j - i, err);
	for (size_t k = i; k < j && !st && !no_copy; k++)
		if (hs[k]->has_backup)
			st = live_ranges(dh, hs[k], &rs->r, &nr, &rs->cap, err);
	if (st || !nr)
		return st;
	if (!rs->copying) {
		st = engine_of(dh, err);
		if (!st)
			st = vmm_copy_begin(dh->ce, 1, err);
		if (st)
			return st;
		rs->copying = true;
	}
	return vmm_copy_add(dh->ce, rs->r, nr, err);
}

/* Re-create, map, grant and (unless `no_copy`) fill the handles hs[0..n) that are released, in
 * batches whose copies overlap the next batch's setup. On failure every copy issued is waited
 * for, the handles are released again and stay asleep; the host copies are untouched. */
static vmm_status restore_handles(struct devheap *dh, struct phandle **hs, size_t n, bool no_copy,
				  uint64_t *copied, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	struct restore rs = { .dh = dh, .hs = hs };
	uint64_t batch = UINT64_MAX;
	vmm_copy_stats cs;
	vmm_status st = VMM_OK, cst;

	qsort(hs, n, sizeof(*hs), by_va);
	/* Batches only pay where there is a copy to hide the setup under; otherwise one batch
	 * keeps the fewest access grants. */
	for (size_t i = 0; i < n && !no_copy; i++)
		if (hs[i]->has_backup)
			batch = WAKE_BATCH_FIRST;
	for (size_t i = 0; i < n && !st;) {
		uint64_t bytes = 0;
		size_t j = i;

		while (j < n && (j == i || bytes + hs[j]->size <= batch))
			bytes += hs[j++]->size;
		st = restore_batch(&rs, i, j, no_copy, err);
		i = j;
		if (batch < WAKE_BATCH_MAX)
			batch = batch * 2 < WAKE_BATCH_MAX ? batch * 2 : WAKE_BATCH_MAX;
	}
	if (rs.copying) {
		cst = vmm_copy_end(dh->ce, &cs, st ? NULL : err);
		if (!st && !cst)
			*copied += cs.bytes;
		st = st ? st : cst;
	}
	free(rs.r);
	if (!st)
		return VMM_OK;
	for (size_t i = 0; i < rs.mapped; i++)
		phys_unmap(be, hs[i]->va, hs[i]->size);
	for (size_t i = 0; i < rs.created; i++)
		phys_release(be, hs[i]->h);
	return st;
}

/* A sleep of one device, step by step. */
struct sleep_plan {
	struct phandle **live;   /* handles with live data: copied out, unmapped, released */
	size_t nlive;
	struct phandle **idle;   /* wholly free handles: given back without a copy */
	size_t nidle;
	uint64_t host_need;      /* host backup still to allocate */
	size_t released;         /* on failure: live[0..released) are released, to bring back */
};

static void plan_free(struct sleep_plan *p)
{
	free(p->live);
	free(p->idle);
}

/* Plan: which handles go, and how much host memory their backup still needs. */
static vmm_status plan_sleep(struct devheap *dh, const struct filter *f, struct sleep_plan *p,
			     vmm_error *err)
{
	size_t n = 0;

	memset(p, 0, sizeof(*p));
	for (struct phandle *h = dh->handles; h; h = h->next)
		if (sleeps(h->arena, f) && h->va && !h->asleep && !stays(h, f))
			n++;
	p->live = calloc(n ? n : 1, sizeof(*p->live));
	p->idle = calloc(n ? n : 1, sizeof(*p->idle));
	if (!p->live || !p->idle) {
		plan_free(p);
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for the sleep plan");
	}
	for (struct phandle *h = dh->handles; h; h = h->next) {
		/* Shared handles stay: another process maps them (heap_share.h). */
		if (!sleeps(h->arena, f) || !h->va || h->asleep || stays(h, f))
			continue;
		if (handle_wholly_free(dh, h)) {
			p->idle[p->nidle++] = h;
			continue;
		}
		p->live[p->nlive++] = h;
		if (!f->discard && !h->backup.ptr)
			p->host_need += h->size;
	}
	return VMM_OK;
}

/* Host memory is checked before anything is touched. */
static vmm_status check_host(struct devheap *dh, const struct sleep_plan *p, vmm_error *err)
{
	uint64_t avail;

	if (!p->host_need)
		return VMM_OK;
	avail = vmm_host_available_bytes();
	if (p->host_need <= avail)
		return VMM_OK;
	return vmm_fail(err, VMM_E_HOST_OOM, 0,
			"device %d: sleeping needs %llu bytes of host memory, %llu available",
			dh->dev, (unsigned long long)p->host_need, (unsigned long long)avail);
}

/* Map h back at its address with its access, after a failed unmap or release. Where that fails,
 * h is released too: its contents are on the host (or were to be discarded), so it then goes
 * asleep with the released ones rather than stay created but unreachable. false: released. */
static bool remap_or_release(struct devheap *dh, struct phandle *h)
{
	vmm_backend *be = dh->core->be;

	if (!be->map(be, h->va, h->size, h->h, NULL) &&
	    !heap_grant_access(dh, h->va, h->size, NULL))
		return true;
	phys_unmap(be, h->va, h->size);
	phys_release(be, h->h);
	return false;
}

/* Move hs[i] to the front part hs[0..*k) (order of the rest kept as it comes). */
static void to_front(struct phandle **hs, size_t i, size_t *k)
{
	struct phandle *h = hs[i];

	hs[i] = hs[*k];
	hs[(*k)++] = h;
}

/* Unmap the live handles: one call per run of address-adjacent handles (the backend's unmap
 * covers several whole mappings). On failure the runs unmapped are mapped again (those that
 * cannot be come first in hs, *released of them, released), and the run that failed is left as
 * the driver left it (still mapped: a map of it again refuses, harmlessly). */
static vmm_status unmap_live(struct devheap *dh, struct phandle **hs, size_t n, size_t *released,
			     vmm_error *err)
{
	vmm_backend *be = dh->core->be;

	*released = 0;
	qsort(hs, n, sizeof(*hs), by_va);
	for (size_t i = 0; i < n;) {
		size_t j = i + 1, len = hs[i]->size;
		vmm_status st;

		while (j < n && hs[j]->va == hs[i]->va + len)
			len += hs[j++]->size;
		st = be->unmap(be, hs[i]->va, len, err);
		if (st) {
			for (size_t k = i; k < j; k++) {
				be->map(be, hs[k]->va, hs[k]->size, hs[k]->h, NULL);
				heap_grant_access(dh, hs[k]->va, hs[k]->size, NULL);
			}
			for (size_t k = 0; k < i; k++)
				if (!remap_or_release(dh, hs[k]))
					to_front(hs, k, released);
			return st;
		}
		i = j;
	}
	return VMM_OK;
}

/* Release the unmapped live handles side by side. On failure the released ones come first in hs
 * (*released of them) and the others are mapped again, contents intact. */
static vmm_status release_live(struct devheap *dh, struct phandle **hs, size_t n, size_t *released,
			       vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	vmm_phys *ph = calloc(n ? n : 1, sizeof(*ph));
	bool *ok = calloc(n ? n : 1, sizeof(*ok));
	vmm_status st;

	*released = 0;
	if (!ph || !ok) {
		free(ph);
		free(ok);
		for (size_t i = 0; i < n; i++)
			if (!remap_or_release(dh, hs[i]))
				to_front(hs, i, released);
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory to release handles");
	}
	for (size_t i = 0; i < n; i++)
		ph[i] = hs[i]->h;
	st = phys_release_many(be, ph, n, ok, err);
	for (size_t i = 0; i < n; i++)
		if (ok[i] || !remap_or_release(dh, hs[i]))
			to_front(hs, i, released);
	free(ph);
	free(ok);
	return st;
}

/* Every live handle gets its host backup (from the pool, on first use; kept across cycles). */
static vmm_status backups_for_live(struct devheap *dh, struct sleep_plan *p, vmm_error *err)
{
	for (size_t i = 0; i < p->nlive; i++) {
		struct phandle *h = p->live[i];
		vmm_status st;

		if (!h->backup.ptr && (st = backup_for(dh, h, 0, err)))
			return st;
	}
	return VMM_OK;
}

/* Unmap and release live[released..upto) (their contents are on the host, or discarded). What
 * went is counted in p->released also on failure; the released ones come first (unmap_live). */
static vmm_status release_upto(struct devheap *dh, struct sleep_plan *p, size_t upto,
			       const vmm_limits *lim, vmm_error *err)
{
	struct phandle **hs = p->live + p->released;
	size_t n = upto - p->released, went = 0;
	vmm_status st = vmm_limits_check(lim, "releasing device memory", err);

	if (!st)
		st = unmap_live(dh, hs, n, &went, err);
	if (!st)
		st = release_live(dh, hs, n, &went, err);
	p->released += went;
	return st;
}

/* Copy batch live[i..j) out: issued, not waited for (*copying: vmm_copy_end is due). */
static vmm_status issue_copy_out(struct devheap *dh, struct sleep_plan *p, size_t i, size_t j,
				 vmm_copy_range **r, size_t *cap, bool *copying, vmm_error *err)
{
	size_t nr = 0;
	vmm_status st = VMM_OK;

	for (size_t k = i; k < j && !st; k++)
		st = live_ranges(dh, p->live[k], r, &nr, cap, err);
	if (st || !nr)
		return st;
	st = engine_of(dh, err);
	if (!st)
		st = vmm_copy_begin(dh->ce, 0, err);
	if (st)
		return st;
	*copying = true;
	return vmm_copy_add(dh->ce, *r, nr, err);
}

/* Copy the live handles out and release them (address order, p->live sorted), in batches that
 * grow like the wake's: the copy of batch k runs while batch k-1, which the host holds now, is
 * unmapped and released (on the H200 a small handle costs the driver ~25 us to release, whatever
 * its size). A failure leaves live[0..p->released) released with their host copy, the rest
 * mapped with their contents; nothing is in flight. */
static vmm_status copy_out_and_release(struct devheap *dh, struct sleep_plan *p, bool discard,
				       const vmm_limits *lim, vmm_transfer_result *res,
				       vmm_error *err)
{
	uint64_t batch = WAKE_BATCH_FIRST;
	vmm_copy_range *r = NULL;
	size_t cap = 0, done = 0;
	vmm_status st;

	p->released = 0;
	if (discard)
		return release_upto(dh, p, p->nlive, lim, err);
	st = backups_for_live(dh, p, err);
	for (size_t i = 0; !st && i < p->nlive;) {
		size_t j = i;
		uint64_t bytes = 0;
		bool copying = false;
		vmm_copy_stats cs;
		vmm_status cst;

		while (j < p->nlive && (j == i || bytes + p->live[j]->size <= batch))
			bytes += p->live[j++]->size;
		st = issue_copy_out(dh, p, i, j, &r, &cap, &copying, err);
		if (!st && done > p->released)
			st = release_upto(dh, p, done, lim, err);
		if (copying) {
			cst = vmm_copy_end(dh->ce, &cs, st ? NULL : err);
			if (!st && !cst)
				res->bytes_copied += cs.bytes;
			st = st ? st : cst;
		}
		/* From here on the host holds the batch: a failure later keeps it. */
		for (size_t k = i; k < j && !st; k++)
			p->live[k]->has_backup = true;
		done = st ? done : j;
		i = j;
		batch = batch * 2 < WAKE_BATCH_MAX ? batch * 2 : WAKE_BATCH_MAX;
	}
	if (!st && done > p->released)
		st = release_upto(dh, p, done, lim, err);
	free(r);
	return st;
}

/* hs[0..n) are released: they are asleep, with their host copy unless discarded. */
static void commit_asleep(struct phandle **hs, size_t n, bool discard, vmm_transfer_result *res)
{
	for (size_t i = 0; i < n; i++) {
		struct phandle *h = hs[i];
		struct arena *a = h->arena;

		h->asleep = true;
		h->has_backup = !discard;
		stats_mapped(a, -(int64_t)h->size);
		a->st.asleep_bytes += h->size;
		a->st.handles_released++;
		if (!discard)
			a->st.host_backup_bytes += h->size;
		res->bytes_released += h->size;
	}
}

static bool arena_has_resident(struct devheap *dh, const struct arena *a)
{
	for (struct phandle *h = dh->handles; h; h = h->next)
		if (h->arena == a && h->va && !h->asleep)
			return true;
	return false;
}

/* A failed sleep after p->released handles went: bring them back. Where that fails too they
 * stay asleep with their host copy (the partial state), their arenas asleep in part: refused to
 * allocation, completed by a wake or by the next sleep. Returns the bytes left asleep. */
static uint64_t undo_release(struct devheap *dh, struct sleep_plan *p, const struct filter *f)
{
	vmm_transfer_result kept = { 0 };
	uint64_t ignored = 0;
	vmm_error e;

	if (!p->released)
		return 0;
	vmm_error_clear(&e);
	if (!restore_handles(dh, p->live, p->released, f->discard, &ignored, &e))
		return 0;
	commit_asleep(p->live, p->released, f->discard, &kept);
	for (size_t i = 0; i < p->released; i++) {
		struct arena *a = p->live[i]->arena;

		a->asleep = a->marked = true;
		a->discarded = f->discard;
		a->asleep_in_part = arena_has_resident(dh, a);
	}
	vmm_log(VMM_LOG_ERROR, "device %d: a failed sleep could not bring back %zu handle(s) (%s): "
		"%llu bytes stay asleep with their host copy; a wake brings them back", dh->dev,
		p->released, e.msg, (unsigned long long)kept.bytes_released);
	return kept.bytes_released;
}

/* Everything planned went: the arenas acted on are asleep. */
static void mark_asleep(struct devheap *dh, const struct filter *f)
{
	for (int i = 0; i < dh->narenas; i++) {
		struct arena *a = dh->arenas[i];

		if (sleeps(a, f)) {
			a->asleep = a->marked = true;
			a->asleep_in_part = false;
			a->discarded = f->discard;
		}
	}
}

/* Give the wholly free handles back, without a copy. One whose unmap fails stays mapped and free
 * in its arena (heap_drop_handles): it gets one more try, and where it stays the sleep fails here,
 * before anything live is touched. Going on would mark its arena asleep with the handle still
 * mapped, and every later sleep passes over an asleep arena (sleeps()): device memory held while
 * the program reads as asleep. */
static vmm_status drop_idle(struct devheap *dh, const struct filter *f, struct sleep_plan *p,
			    vmm_transfer_result *res, vmm_error *err)
{
	if (!p->nidle)
		return VMM_OK;
	res->bytes_released += heap_drop_handles(dh, p->idle, p->nidle);
	for (struct phandle *h = dh->handles, *next; h; h = next) {
		size_t size = h->size;
		vmm_status st;

		next = h->next;
		if (!sleeps(h->arena, f) || stays(h, f) || !handle_wholly_free(dh, h))
			continue;
		st = handle_drop(dh, h, err);
		if (st)
			return st;
		res->bytes_released += size;
	}
	return VMM_OK;
}

/* Sleep the selected arenas of one device (its lock held). */
static vmm_status sleep_device(struct devheap *dh, const struct filter *f, const vmm_limits *lim,
			       vmm_transfer_result *res, vmm_error *err)
{
	struct handle_run *runs = NULL;
	struct sleep_plan p;
	size_t nruns;
	vmm_status st;

	st = vmm_drain(dh->core->be, dh->dev, lim, err);
	if (st)
		return st;
	/* That drain began after every free in the quarantine (the lock is held): no second one. */
	heap_reclaim_synced(dh);
	for (int i = 0; i < dh->narenas; i++)
		if (sleeps(dh->arenas[i], f))
			slab_release_empty(dh, dh->arenas[i]);
	st = plan_sleep(dh, f, &p, err);
	if (st)
		return st;
	qsort(p.live, p.nlive, sizeof(*p.live), by_va);
	nruns = coalesce_runs(dh, p.live, p.nlive, &runs);
	st = check_host(dh, &p, err);
	if (!st) {
		st = drop_idle(dh, f, &p, res, err);
		if (!st && !f->discard)
			st = run_backups(dh, p.live, runs, nruns, 0, err);
		if (!st)
			st = copy_out_and_release(dh, &p, f->discard, lim, res, err);
	}
	if (st) {
		res->partial_bytes += undo_release(dh, &p, f);
		for (size_t i = 0; i < p.nlive; i++)
			if (!p.live[i]->asleep)
				p.live[i]->has_backup = false;
		plan_free(&p);
		free(runs);
		return st;
	}
	commit_asleep(p.live, p.nlive, f->discard, res);
	for (size_t i = 0; i < nruns; i++)
		coalesce_asleep(dh, p.live, &runs[i]);
	mark_asleep(dh, f);
	plan_free(&p);
	free(runs);
	return VMM_OK;
}

/* Does the device have the memory to wake what is selected? */
static vmm_status wake_fits(struct devheap *dh, const struct filter *f, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	size_t free_b = 0, total_b = 0;
	uint64_t need = 0;
	vmm_status st;

	for (struct phandle *h = dh->handles; h; h = h->next)
		if (h->asleep && selected(h->arena, f))
			need += h->size;
	if (!need)
		return VMM_OK;
	st = be->mem_info(be, dh->dev, &free_b, &total_b, err);
	if (st)
		return st;
	if (need > free_b)
		return vmm_fail(err, VMM_E_OOM, 0,
				"device %d: waking needs %llu bytes, %zu available", dh->dev,
				(unsigned long long)need, free_b);
	return VMM_OK;
}

/* hs[0..n) are re-created and filled: they are awake. */
static void commit_awake(struct phandle **hs, size_t n, vmm_transfer_result *res)
{
	for (size_t i = 0; i < n; i++) {
		struct arena *a = hs[i]->arena;

		hs[i]->asleep = false;
		a->st.asleep_bytes -= hs[i]->size;
		a->st.handles_created++;
		if (hs[i]->has_backup)
			a->st.host_backup_bytes -= hs[i]->size;
		hs[i]->has_backup = false;
		stats_mapped(a, (int64_t)hs[i]->size);
		res->bytes_released += hs[i]->size;
	}
}

/* Wake the selected arenas of one device (its lock held): all or nothing. */
static vmm_status wake_device(struct devheap *dh, const struct filter *f, const vmm_limits *lim,
			      vmm_transfer_result *res, vmm_error *err)
{
	struct phandle **hs;
	size_t n = 0;
	vmm_status st;

	(void)lim; /* nothing to wait for: the copies back are the whole work */
	for (struct phandle *h = dh->handles; h; h = h->next)
		n += h->asleep && selected(h->arena, f);
	hs = calloc(n ? n : 1, sizeof(*hs));
	if (!hs)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for the wake plan");
	n = 0;
	for (struct phandle *h = dh->handles; h; h = h->next)
		if (h->asleep && selected(h->arena, f))
			hs[n++] = h;
	st = restore_handles(dh, hs, n, false, &res->bytes_copied, err);
	if (!st) {
		commit_awake(hs, n, res);
		for (int i = 0; i < dh->narenas; i++) {
			struct arena *a = dh->arenas[i];

			if (selected(a, f) && a->asleep) {
				a->asleep = a->discarded = a->asleep_in_part = false;
				a->marked = true;
			}
		}
	}
	free(hs);
	return st;
}

static void clear_marks(struct sel *s)
{
	for (int d = 0; d < s->n; d++)
		for (int i = 0; i < s->dh[d]->narenas; i++)
			s->dh[d]->arenas[i]->marked = false;
}

/* Is anything selected there to sleep (resident), or asleep? */
static bool any_selected(struct sel *s, const struct filter *f, bool want_asleep)
{
	for (int d = 0; d < s->n; d++) {
		for (int i = 0; i < s->dh[d]->narenas; i++) {
			struct arena *a = s->dh[d]->arenas[i];

			if (want_asleep ? selected(a, f) && a->asleep : sleeps(a, f))
				return true;
		}
	}
	return false;
}

/* The bytes of the selection that are asleep now: what the partial state reports. */
static uint64_t asleep_bytes(struct sel *s, const struct filter *f)
{
	uint64_t n = 0;

	for (int d = 0; d < s->n; d++)
		for (struct phandle *h = s->dh[d]->handles; h; h = h->next)
			if (h->asleep && selected(h->arena, f))
				n += h->size;
	return n;
}

typedef vmm_status (*device_transfer)(struct devheap *dh, const struct filter *f,
				      const vmm_limits *lim, vmm_transfer_result *res,
				      vmm_error *err);

/* An undo is not cancelled and has no deadline; its drain keeps the operation's bound. */
static vmm_limits undo_limits(const vmm_limits *lim)
{
	return (vmm_limits){ .drain_s = lim ? lim->drain_s : 0 };
}

/* Run one transfer (sleep or wake) device by device. If one device fails, the devices done so
 * far are undone in reverse with the opposite transfer, on the arenas this call changed
 * (marked). Where an undo fails too, that device keeps what the transfer did: the selection is
 * partly asleep and res->partial_bytes says how much is asleep. The first error is returned. */
static vmm_status transfer_devices(struct sel *s, const struct filter *f, const vmm_limits *lim,
				   vmm_transfer_result *res, device_transfer run,
				   device_transfer undo, const char *undo_name, vmm_error *err)
{
	const struct filter changed = { .changed_only = true };
	vmm_limits ulim = undo_limits(lim);
	bool partial = false;
	vmm_status st = VMM_OK;
	int d;

	clear_marks(s);
	for (d = 0; d < s->n && !st; d++) {
		if (d)
			st = vmm_limits_check(lim, "the next device", err);
		if (!st)
			st = run(s->dh[d], f, lim, res, err);
	}
	if (!st)
		return VMM_OK;
	partial = res->partial_bytes > 0;
	for (int k = d - 2; k >= 0; k--) {
		vmm_transfer_result ignored = { 0 };
		vmm_error e;

		vmm_error_clear(&e);
		if (undo(s->dh[k], &changed, &ulim, &ignored, &e)) {
			vmm_log(VMM_LOG_ERROR, "device %d: undoing the %s failed: %s",
				s->dh[k]->dev, undo_name, e.msg);
			partial = true;
		}
	}
	res->partial_bytes = partial ? asleep_bytes(s, f) : 0;
	return st;
}

/* The sleep and the wake: select and lock the devices, answer "already" when nothing is to
 * change, check a wake's device memory first, run the transfer, time it. */
static vmm_status transfer(vmm_core *core, const vmm_sleep_opts *opts, const vmm_limits *lim,
			   bool sleeping, vmm_transfer_result *res, vmm_error *err)
{
	struct filter f = filter_of(opts);
	vmm_transfer_result local;
	double t0 = vmm_now_s();
	vmm_status st;
	struct sel s;

	if (!res)
		res = &local;
	memset(res, 0, sizeof(*res));
	f.discard = sleeping && f.discard;
	st = select_devices(core, opts, &s, err);
	if (st)
		return st;
	if (!any_selected(&s, &f, !sleeping)) {
		bool nothing = sleeping && !any_selected(&s, &f, true);

		unlock_all(&s);
		if (nothing)
			return VMM_OK; /* nothing allocated: nothing to do */
		res->already = true;
		return vmm_fail(err, VMM_E_ALREADY, 0, sleeping ? "already asleep" : "already awake");
	}
	/* Every device's memory is checked before any is woken. */
	for (int d = 0; !sleeping && d < s.n && !st; d++)
		st = wake_fits(s.dh[d], &f, err);
	if (!st && sleeping)
		st = transfer_devices(&s, &f, lim, res, sleep_device, wake_device, "wake", err);
	else if (!st)
		st = transfer_devices(&s, &f, lim, res, wake_device, sleep_device, "sleep", err);
	unlock_all(&s);
	res->seconds = vmm_now_s() - t0;
	return st;
}

vmm_status vmm_sleep_within(vmm_core *core, const vmm_sleep_opts *opts, const vmm_limits *lim,
			    vmm_transfer_result *res, vmm_error *err)
{
	return transfer(core, opts, lim, true, res, err);
}

vmm_status vmm_sleep(vmm_core *core, const vmm_sleep_opts *opts, vmm_transfer_result *res,
		     vmm_error *err)
{
	return transfer(core, opts, NULL, true, res, err);
}

vmm_status vmm_wake_within(vmm_core *core, const vmm_sleep_opts *opts, const vmm_limits *lim,
			   vmm_transfer_result *res, vmm_error *err)
{
	return transfer(core, opts, lim, false, res, err);
}

vmm_status vmm_wake(vmm_core *core, const vmm_sleep_opts *opts, vmm_transfer_result *res,
		    vmm_error *err)
{
	return transfer(core, opts, NULL, false, res, err);
}

/* Undo the last operation on every device: `step` on the arenas it changed. Each device is tried;
 * the first error is returned, with what stays asleep of those arenas. */
static vmm_status undo_all(vmm_core *core, device_transfer step, const vmm_limits *lim,
			   vmm_transfer_result *res, vmm_error *err)
{
	const struct filter changed = { .changed_only = true };
	vmm_limits ulim = undo_limits(lim);
	vmm_transfer_result local;
	vmm_status st = VMM_OK;
	struct sel s;

	if (!res)
		res = &local;
	memset(res, 0, sizeof(*res));
	select_devices(core, NULL, &s, NULL);
	for (int d = 0; d < s.n; d++) {
		vmm_error e;
		vmm_status r;

		vmm_error_clear(&e);
		r = step(s.dh[d], &changed, &ulim, res, &e);
		if (r && !st) {
			st = r;
			if (err)
				*err = e;
		}
	}
	res->partial_bytes = st ? asleep_bytes(&s, &changed) : 0;
	unlock_all(&s);
	return st;
}

vmm_status vmm_sleep_undo(vmm_core *core, const vmm_limits *lim, vmm_transfer_result *res,
			  vmm_error *err)
{
	return undo_all(core, wake_device, lim, res, err);
}

vmm_status vmm_wake_undo(vmm_core *core, const vmm_limits *lim, vmm_transfer_result *res,
			 vmm_error *err)
{
	return undo_all(core, sleep_device, lim, res, err);
}

bool vmm_is_asleep(vmm_core *core, int device, const char *tag)
{
	vmm_sleep_opts o = { .tag = tag, .device = device };
	struct filter f = filter_of(&o);
	struct sel s;
	bool r;

	if (select_devices(core, &o, &s, NULL))
		return false;
	r = any_selected(&s, &f, true);
	unlock_all(&s);
	return r;
}

/* Backups for the selected resident handles of one device, provisioned now, shaped as the
 * sleep will want them: a run that will become one handle gets one piece. */
static vmm_status provision_device(struct devheap *dh, const struct filter *f, vmm_error *err)
{
	struct handle_run *runs = NULL;
	struct phandle **hs;
	size_t n = 0, nruns;
	vmm_status st = VMM_OK;

	for (struct phandle *h = dh->handles; h; h = h->next)
		n += selected(h->arena, f) && !h->asleep && h->va;
	hs = calloc(n ? n : 1, sizeof(*hs));
	if (!hs)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory to plan the backup");
	n = 0;
	for (struct phandle *h = dh->handles; h; h = h->next)
		if (selected(h->arena, f) && !h->asleep && h->va)
			hs[n++] = h;
	qsort(hs, n, sizeof(*hs), by_va);
	nruns = coalesce_runs(dh, hs, n, &runs);
	st = run_backups(dh, hs, runs, nruns, 1, err);
	for (size_t i = 0; i < n && !st; i++)
		if (!hs[i]->backup.ptr)
			st = backup_for(dh, hs[i], 1, err);
	free(runs);
	free(hs);
	return st;
}

vmm_status vmm_provision_backup(vmm_core *core, const vmm_sleep_opts *opts, vmm_error *err)
{
	struct filter f = filter_of(opts);
	vmm_status st = VMM_OK;
	struct sel s;

	st = select_devices(core, opts, &s, err);
	if (st)
		return st;
	for (int d = 0; d < s.n && !st; d++) {
		struct devheap *dh = s.dh[d];
		uint64_t need = 0;

		for (struct phandle *h = dh->handles; h; h = h->next)
			if (selected(h->arena, &f) && !h->asleep && !h->backup.ptr)
				need += h->size;
		if (need > vmm_host_available_bytes()) {
			st = vmm_fail(err, VMM_E_HOST_OOM, 0,
				      "the backup needs %llu bytes of host memory, %llu available",
				      (unsigned long long)need,
				      (unsigned long long)vmm_host_available_bytes());
			break;
		}
		st = provision_device(dh, &f, err);
	}
	unlock_all(&s);
	return st;
}
