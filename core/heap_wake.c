/* The wake of one device's selected arenas (heap_wake.h): check the driver's free
 * memory, re-create every asleep handle, map it at its old address, grant access to the owner and
 * peers, copy its backup back: in batches, each copy running while the next batch is set up. All
 * or nothing: a failure releases what was brought back, and the handles stay asleep with their
 * host copy. A failed sleep brings its released handles back the same way. */
#include "heap_wake.h"

#include <stdlib.h>

#include "heap_backups.h"
#include "log.h"

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
			st = heap_live_ranges(dh, hs[k], &rs->r, &nr, &rs->cap, err);
	if (st || !nr)
		return st;
	if (!rs->copying) {
		st = heap_copy_engine(dh, err);
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
 * for, the handles are released again and stay asleep; the host copies are untouched. A new
 * handle that will not unmap is parked still mapped (its address stays the asleep handle's). */
vmm_status heap_restore_handles(struct devheap *dh, struct phandle **hs, size_t n, bool no_copy,
				vmm_transfer_result *res, vmm_error *err)
{
	struct restore rs = { .dh = dh, .hs = hs };
	uint64_t batch = UINT64_MAX;
	vmm_copy_stats cs;
	vmm_status st = VMM_OK, cst;

	qsort(hs, n, sizeof(*hs), compare_handle_va);
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
			res->bytes_copied += cs.bytes;
		res->copy_seconds += cs.seconds;
		st = st ? st : cst;
	}
	free(rs.r);
	if (!st)
		return VMM_OK;
	/* Copies that could not be confirmed finished (every synchronize of a stream failed) may
	 * still write to what was mapped: unmapping it would fault. It is parked mapped instead and
	 * given back once the engine's streams synchronize again (phys_retry_parked). */
	bool unsettled = rs.copying && vmm_copy_engine_unsettled(dh->ce);

	for (size_t i = 0; i < rs.created; i++) {
		if (i < rs.mapped && unsettled)
			phys_park_mapped(dh, hs[i]->h, hs[i]->va, hs[i]->size, false,
					 "a failed wake whose copies may still run");
		else if (i < rs.mapped)
			phys_unmap_release(dh, hs[i]->h, hs[i]->va, hs[i]->size, false,
					   "a failed wake");
		else
			phys_release(dh, hs[i]->h, hs[i]->size);
	}
	return st;
}

/* Does the device have the memory to wake what is selected? */
vmm_status heap_wake_fits(struct devheap *dh, const struct filter *f, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	size_t free_b = 0, total_b = 0;
	uint64_t need = 0;
	vmm_status st;

	/* Memory the driver refused to take back earlier would count against the wake. */
	phys_retry_parked(dh);

	for (struct phandle *h = dh->handles; h; h = h->next)
		if (h->asleep && arena_selected(h->arena, f))
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
vmm_status heap_wake_device(struct devheap *dh, const struct filter *f, const vmm_limits *lim,
			    vmm_transfer_result *res, vmm_error *err)
{
	struct phandle **hs;
	size_t n = 0;
	vmm_status st;

	(void)lim; /* nothing to wait for: the copies back are the whole work */
	for (struct phandle *h = dh->handles; h; h = h->next)
		n += h->asleep && arena_selected(h->arena, f);
	hs = calloc(n ? n : 1, sizeof(*hs));
	if (!hs)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for the wake plan");
	n = 0;
	for (struct phandle *h = dh->handles; h; h = h->next)
		if (h->asleep && arena_selected(h->arena, f))
			hs[n++] = h;
	st = heap_restore_handles(dh, hs, n, false, res, err);
	if (!st) {
		commit_awake(hs, n, res);
		for (int i = 0; i < dh->narenas; i++) {
			struct arena *a = dh->arenas[i];

			if (arena_selected(a, f) && a->asleep) {
				a->asleep = a->discarded = a->asleep_in_part = false;
				a->marked = true;
			}
		}
	}
	free(hs);
	return st;
}
