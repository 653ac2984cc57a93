/* Sleep and wake of the core's own heaps (heap_offload.h). Sleep: synchronize, reclaim the quarantine,
 * give wholly free handles back without copying, copy the live ranges of the other handles into
 * host buffers (kept per handle and reused across cycles), unmap and release them; the addresses
 * stay reserved. Wake: check the driver's free memory, re-create every handle, map it at its old
 * address, grant access to the owner and peers, copy back. Any failure rolls back. */
#include "heap_offload.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "heap_internal.h"
#include "log.h"

struct sel;
static vmm_status wake_device(struct devheap *dh, const vmm_sleep_opts *o,
			      vmm_transfer_result *res, vmm_error *err);
static void clear_marks(struct sel *s);

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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

/* Rollback across devices acts only on the arenas this call changed (marked). */
static _Thread_local bool only_marked;

static bool selected(struct arena *a, const vmm_sleep_opts *o)
{
	if (only_marked)
		return a->marked;
	return !o || !o->tag || !strcmp(o->tag, a->tag);
}

/* The ranges of h that hold live data (used blocks and slabs), merged, appended to *r. */
static vmm_status live_ranges(struct devheap *dh, struct phandle *h, vmm_copy_range **r,
			      size_t *n, size_t *cap, vmm_error *err)
{
	vmm_devptr end = h->va + h->size;
	size_t first = *n;

	for (struct blk *b = blk_containing(dh, h->va); b && b->addr < end; b = b->next) {
		vmm_devptr lo, hi;

		if (b->state != BLK_USED && b->state != BLK_SLAB)
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

/* Re-create, map, grant and (unless `no_copy`) fill the handles hs[0..n) that are released. On
 * failure they are released again and stay asleep; the host copies are untouched. */
static vmm_status restore_handles(struct devheap *dh, struct phandle **hs, size_t n, bool no_copy,
				  uint64_t *copied, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	vmm_copy_range *r = NULL;
	size_t nr = 0, cap = 0, created = 0, mapped = 0;
	vmm_copy_stats cs;
	vmm_status st = VMM_OK;

	qsort(hs, n, sizeof(*hs), by_va);
	for (; created < n; created++) {
		st = be->create(be, dh->dev, hs[created]->size, &hs[created]->h, err);
		if (st)
			goto undo;
	}
	for (; mapped < n; mapped++) {
		st = be->map(be, hs[mapped]->va, hs[mapped]->size, hs[mapped]->h, err);
		if (st)
			goto undo;
	}
	st = grant_runs(dh, hs, n, err);
	if (st)
		goto undo;
	if (!no_copy) {
		for (size_t i = 0; i < n && !st; i++)
			if (hs[i]->has_backup)
				st = live_ranges(dh, hs[i], &r, &nr, &cap, err);
		if (!st && nr) {
			st = engine_of(dh, err);
			if (!st)
				st = vmm_copy_in(dh->ce, r, nr, &cs, err);
			if (!st)
				*copied += cs.bytes;
		}
		if (st)
			goto undo;
	}
	free(r);
	return VMM_OK;
undo:
	if (!no_copy && nr)
		be->synchronize(be, dh->dev, NULL); /* a failed copy-in may still be running */
	for (size_t i = 0; i < mapped; i++)
		phys_unmap(be, hs[i]->va, hs[i]->size);
	for (size_t i = 0; i < created; i++)
		phys_release(be, hs[i]->h);
	free(r);
	return st;
}

/* Map hs[0..n) back at their addresses after a failed unmap (a handle still mapped refuses,
 * which is what it should) and grant access again. */
static void remap_handles(struct devheap *dh, struct phandle **hs, size_t n)
{
	vmm_backend *be = dh->core->be;

	for (size_t i = 0; i < n; i++)
		be->map(be, hs[i]->va, hs[i]->size, hs[i]->h, NULL);
	if (grant_runs(dh, hs, n, NULL))
		vmm_log(VMM_LOG_ERROR, "device %d: access could not be granted again after a failed "
			"sleep", dh->dev);
}

/* Unmap the live handles: one call per run of address-adjacent handles (the backend's unmap
 * covers several whole mappings). On failure everything is mapped again. */
static vmm_status unmap_live(struct devheap *dh, struct phandle **hs, size_t n, vmm_error *err)
{
	vmm_backend *be = dh->core->be;

	qsort(hs, n, sizeof(*hs), by_va);
	for (size_t i = 0; i < n;) {
		size_t j = i + 1, len = hs[i]->size;
		vmm_status st;

		while (j < n && hs[j]->va == hs[i]->va + len)
			len += hs[j++]->size;
		st = be->unmap(be, hs[i]->va, len, err);
		if (st) {
			remap_handles(dh, hs, j);
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
	size_t k = 0;

	*released = 0;
	if (!ph || !ok) {
		free(ph);
		free(ok);
		remap_handles(dh, hs, n);
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory to release handles");
	}
	for (size_t i = 0; i < n; i++)
		ph[i] = hs[i]->h;
	st = phys_release_many(be, ph, n, ok, err);
	if (st) {
		/* Released ones first; the others are still created: map them back. A handle that
		 * cannot be mapped back is released too, and comes back with the rollback. */
		for (size_t i = 0; i < n; i++) {
			struct phandle *h = hs[i];

			if (!ok[i] && (be->map(be, h->va, h->size, h->h, NULL) ||
				       heap_grant_access(dh, h->va, h->size, NULL))) {
				phys_unmap(be, h->va, h->size);
				phys_release(be, h->h);
				ok[i] = true;
			}
			if (ok[i]) {
				hs[i] = hs[k];
				hs[k++] = h;
			}
		}
	} else {
		k = n;
	}
	free(ph);
	free(ok);
	*released = k;
	return st;
}

/* Sleep the selected arenas of one device (its lock held). */
static vmm_status sleep_device(struct devheap *dh, const vmm_sleep_opts *o,
			       vmm_transfer_result *res, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	bool discard = o && o->discard;
	struct phandle **live = NULL;
	vmm_copy_range *r = NULL;
	size_t nlive = 0, nfree, nr = 0, cap = 0, done = 0;
	uint64_t host_need = 0;
	vmm_copy_stats cs;
	vmm_status st;

	st = be->synchronize(be, dh->dev, err);
	if (st)
		return st;
	/* That sync began after every free in the quarantine (the lock is held): no second one. */
	heap_reclaim_synced(dh);
	for (int i = 0; i < dh->narenas; i++)
		if (selected(dh->arenas[i], o) && !dh->arenas[i]->asleep)
			slab_release_empty(dh, dh->arenas[i]);
	for (struct phandle *h = dh->handles; h; h = h->next)
		if (selected(h->arena, o) && !h->arena->asleep && h->va && !h->asleep)
			nlive++;
	nfree = nlive;
	live = calloc(nlive ? nlive : 1, sizeof(*live));
	if (!live)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for the sleep plan");
	nlive = 0;
	for (struct phandle *h = dh->handles; h; h = h->next) {
		if (selected(h->arena, o) && !h->arena->asleep && h->va && !h->asleep &&
		    !handle_wholly_free(dh, h)) {
			live[nlive++] = h;
			if (!discard && !h->backup.ptr)
				host_need += h->size;
		}
	}
	/* Host memory is checked before anything is touched. */
	if (!discard && host_need > vmm_host_available_bytes()) {
		free(live);
		return vmm_fail(err, VMM_E_HOST_OOM, 0,
				"device %d: sleeping needs %llu bytes of host memory, %llu available",
				dh->dev, (unsigned long long)host_need,
				(unsigned long long)vmm_host_available_bytes());
	}
	/* Wholly free handles go back at once: nothing to copy. */
	{
		struct phandle **wf = calloc(nfree ? nfree : 1, sizeof(*wf));
		size_t k = 0;

		for (struct phandle *h = dh->handles, *n; h; h = n) {
			n = h->next;
			if (!selected(h->arena, o) || h->arena->asleep || !handle_wholly_free(dh, h))
				continue;
			if (wf && k < nfree) {
				wf[k++] = h;
			} else {
				size_t sz = h->size;

				if (handle_drop(dh, h, NULL) == VMM_OK)
					res->bytes_released += sz;
			}
		}
		if (k)
			res->bytes_released += heap_drop_handles(dh, wf, k);
		free(wf);
	}
	if (!discard) {
		for (size_t i = 0; i < nlive; i++) {
			struct phandle *h = live[i];

			if (!h->backup.ptr) {
				st = vmm_host_buf_alloc(be, h->size, 0, &h->backup, err);
				if (st)
					goto fail;
				dh->backup_free = vmm_host_buf_free;
			}
			st = live_ranges(dh, h, &r, &nr, &cap, err);
			if (st)
				goto fail;
		}
		if (nr) {
			st = engine_of(dh, err);
			if (!st)
				st = vmm_copy_out(dh->ce, r, nr, &cs, err);
			if (st) {
				/* No copy may still be running when the caller moves on. */
				be->synchronize(be, dh->dev, NULL);
				goto fail;
			}
			res->bytes_copied += cs.bytes;
		}
		/* From here on the host holds the contents: a rollback copies them back. */
		for (size_t i = 0; i < nlive; i++)
			live[i]->has_backup = true;
	}
	st = unmap_live(dh, live, nlive, err);
	if (st)
		goto fail;
	st = release_live(dh, live, nlive, &done, err);
	if (st)
		goto fail;
	for (size_t i = 0; i < nlive; i++) {
		struct phandle *h = live[i];
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
	for (int i = 0; i < dh->narenas; i++) {
		if (selected(dh->arenas[i], o) && !dh->arenas[i]->asleep) {
			dh->arenas[i]->asleep = true;
			dh->arenas[i]->discarded = discard;
			dh->arenas[i]->marked = true;
		}
	}
	free(live);
	free(r);
	return VMM_OK;
fail:
	/* Bring back what was released already; the rest was never touched. */
	if (done) {
		uint64_t ignored = 0;

		if (restore_handles(dh, live, done, discard, &ignored, NULL))
			vmm_log(VMM_LOG_ERROR, "device %d: rollback of a failed sleep failed",
				dh->dev);
	}
	for (size_t i = 0; i < nlive; i++)
		live[i]->has_backup = false;
	free(live);
	free(r);
	return st;
}

static bool any_selected(struct sel *s, const vmm_sleep_opts *o, bool want_asleep)
{
	for (int d = 0; d < s->n; d++)
		for (int i = 0; i < s->dh[d]->narenas; i++)
			if (selected(s->dh[d]->arenas[i], o) &&
			    s->dh[d]->arenas[i]->asleep == want_asleep)
				return true;
	return false;
}

typedef vmm_status (*device_transfer)(struct devheap *dh, const vmm_sleep_opts *o,
				      vmm_transfer_result *res, vmm_error *err);

/* Run one transfer (sleep or wake) device by device. If one device fails half-way, the devices
 * done so far are undone with the opposite transfer, acting only on the arenas this call changed
 * (marked); a failed undo is logged, the first error is what the caller gets. */
static vmm_status transfer_devices(struct sel *s, const vmm_sleep_opts *o,
				   vmm_transfer_result *res, device_transfer run,
				   device_transfer undo, const char *undo_name, vmm_error *err)
{
	vmm_status st = VMM_OK;

	clear_marks(s);
	for (int d = 0; d < s->n && !st; d++) {
		st = run(s->dh[d], o, res, err);
		if (st) {
			vmm_transfer_result ignored = { 0 };

			only_marked = true;
			for (int k = 0; k < d; k++)
				if (undo(s->dh[k], NULL, &ignored, NULL))
					vmm_log(VMM_LOG_ERROR, "device %d: rollback %s failed",
						s->dh[k]->dev, undo_name);
			only_marked = false;
		}
	}
	return st;
}

vmm_status vmm_sleep(vmm_core *core, const vmm_sleep_opts *opts, vmm_transfer_result *res,
		     vmm_error *err)
{
	vmm_transfer_result local;
	double t0 = now_s();
	vmm_status st = VMM_OK;
	struct sel s;

	if (!res)
		res = &local;
	memset(res, 0, sizeof(*res));
	st = select_devices(core, opts, &s, err);
	if (st)
		return st;
	if (!any_selected(&s, opts, false)) {
		bool asleep = any_selected(&s, opts, true);

		unlock_all(&s);
		if (!asleep)
			return VMM_OK; /* nothing allocated: nothing to do */
		res->already = true;
		return vmm_fail(err, VMM_E_ALREADY, 0, "already asleep");
	}
	st = transfer_devices(&s, opts, res, sleep_device, wake_device, "wake", err);
	unlock_all(&s);
	res->seconds = now_s() - t0;
	return st;
}

static void clear_marks(struct sel *s)
{
	for (int d = 0; d < s->n; d++)
		for (int i = 0; i < s->dh[d]->narenas; i++)
			s->dh[d]->arenas[i]->marked = false;
}

/* Does the device have the memory to wake what is selected? */
static vmm_status wake_fits(struct devheap *dh, const vmm_sleep_opts *o, vmm_error *err)
{
	vmm_backend *be = dh->core->be;
	size_t free_b = 0, total_b = 0;
	uint64_t need = 0;
	vmm_status st;

	for (struct phandle *h = dh->handles; h; h = h->next)
		if (h->asleep && selected(h->arena, o))
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

static vmm_status wake_device(struct devheap *dh, const vmm_sleep_opts *o,
			      vmm_transfer_result *res, vmm_error *err)
{
	struct phandle **hs;
	size_t n = 0;
	vmm_status st;

	for (struct phandle *h = dh->handles; h; h = h->next)
		if (h->asleep && selected(h->arena, o))
			n++;
	hs = calloc(n ? n : 1, sizeof(*hs));
	if (!hs)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for the wake plan");
	n = 0;
	for (struct phandle *h = dh->handles; h; h = h->next)
		if (h->asleep && selected(h->arena, o))
			hs[n++] = h;
	st = restore_handles(dh, hs, n, false, &res->bytes_copied, err);
	if (st) {
		free(hs);
		return st;
	}
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
	for (int i = 0; i < dh->narenas; i++) {
		if (selected(dh->arenas[i], o) && dh->arenas[i]->asleep) {
			dh->arenas[i]->asleep = false;
			dh->arenas[i]->discarded = false;
			dh->arenas[i]->marked = true;
		}
	}
	free(hs);
	return VMM_OK;
}

vmm_status vmm_wake(vmm_core *core, const vmm_sleep_opts *opts, vmm_transfer_result *res,
		    vmm_error *err)
{
	vmm_transfer_result local;
	double t0 = now_s();
	vmm_status st;
	struct sel s;

	if (!res)
		res = &local;
	memset(res, 0, sizeof(*res));
	st = select_devices(core, opts, &s, err);
	if (st)
		return st;
	if (!any_selected(&s, opts, true)) {
		unlock_all(&s);
		res->already = true;
		return vmm_fail(err, VMM_E_ALREADY, 0, "already awake");
	}
	/* Every device's memory is checked before any is woken. */
	for (int d = 0; d < s.n && !st; d++)
		st = wake_fits(s.dh[d], opts, err);
	if (!st)
		st = transfer_devices(&s, opts, res, wake_device, sleep_device, "sleep", err);
	unlock_all(&s);
	res->seconds = now_s() - t0;
	return st;
}

bool vmm_is_asleep(vmm_core *core, int device, const char *tag)
{
	vmm_sleep_opts o = { .tag = tag, .device = device };
	struct sel s;
	bool r;

	if (select_devices(core, &o, &s, NULL))
		return false;
	r = any_selected(&s, &o, true);
	unlock_all(&s);
	return r;
}

vmm_status vmm_provision_backup(vmm_core *core, const vmm_sleep_opts *opts, vmm_error *err)
{
	vmm_status st = VMM_OK;
	struct sel s;

	st = select_devices(core, opts, &s, err);
	if (st)
		return st;
	for (int d = 0; d < s.n && !st; d++) {
		struct devheap *dh = s.dh[d];
		uint64_t need = 0;

		for (struct phandle *h = dh->handles; h; h = h->next)
			if (selected(h->arena, opts) && !h->asleep && !h->backup.ptr)
				need += h->size;
		if (need > vmm_host_available_bytes()) {
			st = vmm_fail(err, VMM_E_HOST_OOM, 0,
				      "the backup needs %llu bytes of host memory, %llu available",
				      (unsigned long long)need,
				      (unsigned long long)vmm_host_available_bytes());
			break;
		}
		for (struct phandle *h = dh->handles; h && !st; h = h->next) {
			if (selected(h->arena, opts) && !h->asleep && !h->backup.ptr) {
				st = vmm_host_buf_alloc(dh->core->be, h->size, 1, &h->backup, err);
				if (!st)
					dh->backup_free = vmm_host_buf_free;
			}
		}
	}
	unlock_all(&s);
	return st;
}
