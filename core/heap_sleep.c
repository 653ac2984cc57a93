/* The sleep of one device's selected arenas (heap_sleep.h): drain, reclaim the
 * quarantine, give wholly free handles back without copying, copy the live ranges of the other
 * handles into their host backups and unmap and release them, in batches; the addresses stay
 * reserved. A failure brings the released handles back (heap_wake.c); where that fails too they
 * stay asleep with their host copy (the partial state). */
#include "heap_sleep.h"

#include <stdlib.h>
#include <string.h>

#include "heap_backups.h"
#include "heap_coalesce.h"
#include "heap_keep.h"
#include "heap_tail.h"
#include "heap_wake.h"
#include "log.h"
#include "offload/drain.h"

/* A shared handle stays mapped through a sleep, unless a group sleep allowed its release. */
static bool stays(const struct phandle *h, const struct filter *f)
{
	return h->shared && (!h->release_ok || f->discard);
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
		if (arena_sleeps(h->arena, f) && h->va && !h->asleep && !stays(h, f))
			n++;
	p->live = calloc(n ? n : 1, sizeof(*p->live));
	p->idle = calloc(n ? n : 1, sizeof(*p->idle));
	if (!p->live || !p->idle) {
		plan_free(p);
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for the sleep plan");
	}
	for (struct phandle *h = dh->handles; h; h = h->next) {
		/* Shared handles stay: another process maps them (heap_share.h). */
		if (!arena_sleeps(h->arena, f) || !h->va || h->asleep || stays(h, f))
			continue;
		/* One a group sleep releases: a kept descriptor would hold its memory. */
		if (h->shared)
			keep_close(dh->core, keep_detach_range(dh, h->va, h->size));
		if (handle_wholly_free(dh, h)) {
			p->idle[p->nidle++] = h;
			continue;
		}
		p->live[p->nlive++] = h;
	}
	return VMM_OK;
}

/* The host backup the live handles still need (none for a discarding sleep). */
static void count_host_need(struct sleep_plan *p, bool discard)
{
	p->host_need = 0;
	for (size_t i = 0; i < p->nlive && !discard; i++)
		if (!p->live[i]->backup.ptr)
			p->host_need += p->live[i]->size;
}

/* Is h one of the live handles (p->live sorted by address)? */
static bool plan_releases(const struct sleep_plan *p, struct phandle *h)
{
	return p->nlive && bsearch(&h, p->live, p->nlive, sizeof(*p->live), compare_handle_va);
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
 * asleep with the released ones rather than stay created but unreachable; mapped without its
 * access and refusing to unmap, it is parked mapped instead. false: released (or parked). */
static bool remap_or_release(struct devheap *dh, struct phandle *h)
{
	vmm_backend *be = dh->core->be;

	if (be->map(be, h->va, h->size, h->h, NULL)) {
		phys_release(dh, h->h, h->size);
		return false;
	}
	if (!heap_grant_access(dh, h->va, h->size, NULL))
		return true;
	phys_unmap_release(dh, h->h, h->va, h->size, false, "a failed sleep's undo");
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
	qsort(hs, n, sizeof(*hs), compare_handle_va);
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

		if (!h->backup.ptr && (st = heap_backup_for(dh, h, 0, err)))
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
		st = heap_live_ranges(dh, p->live[k], r, &nr, cap, err);
	if (st || !nr)
		return st;
	st = heap_copy_engine(dh, err);
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
			res->copy_seconds += cs.seconds;
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
	vmm_transfer_result kept = { 0 }, ignored = { 0 };
	vmm_error e;

	if (!p->released)
		return 0;
	vmm_error_clear(&e);
	phys_retry_parked(dh); /* one that would not unmap just now holds its address */
	if (!heap_restore_handles(dh, p->live, p->released, f->discard, &ignored, &e))
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

		if (arena_sleeps(a, f)) {
			a->asleep = a->marked = true;
			a->asleep_in_part = false;
			a->discarded = f->discard;
		}
	}
}

/* Give the wholly free handles back, without a copy. One whose unmap fails stays mapped and free
 * in its arena (heap_drop_handles): it gets one more try, and where it stays the sleep fails here,
 * before anything live is touched. Going on would mark its arena asleep with the handle still
 * mapped, and every later sleep passes over an asleep arena (arena_sleeps()): device memory held
 * while the program reads as asleep. */
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
		/* A hole released with its neighbours (coalesce_take_holes) is not dropped. */
		if (!arena_sleeps(h->arena, f) || stays(h, f) || !handle_wholly_free(dh, h) ||
		    plan_releases(p, h))
			continue;
		st = handle_drop(dh, h, err);
		if (st)
			return st;
		res->bytes_released += size;
	}
	return VMM_OK;
}

/* Sleep the selected arenas of one device (its lock held). */
vmm_status heap_sleep_device(struct devheap *dh, const struct filter *f, const vmm_limits *lim,
			     vmm_transfer_result *res, vmm_error *err)
{
	struct handle_run *runs = NULL;
	struct sleep_plan p;
	size_t nruns;
	double t0 = vmm_now_s(), t_drained, t_plan, t_backups, t_copied;
	double copy0 = res->copy_seconds;
	uint64_t before, released;
	vmm_status st;

	/* No drain where nothing was submitted since a synchronization that completed began: the
	 * gate is closed, and a call it let through was counted before it left, so no work can be
	 * running (~0.1-0.3 ms a sleep on the H200, a twentieth of a 1 GiB sleep's time beside
	 * its copy). Otherwise this drain, which began after every free in the quarantine (the lock
	 * is held), also serves the heap's reuse of freed memory. */
	if (heap_device_idle(dh, &before)) {
		heap_reclaim_synced(dh);
	} else {
		st = vmm_drain(dh->core->be, dh->dev, lim, err);
		res->drain_seconds += vmm_now_s() - t0;
		if (st)
			return st;
		heap_synced_upto(dh, dh->quar_seq, before);
	}
	t_drained = vmm_now_s();
	phys_retry_parked(dh); /* what the driver refused before goes back first */
	for (int i = 0; i < dh->narenas; i++)
		if (arena_sleeps(dh->arenas[i], f))
			slab_release_empty(dh, dh->arenas[i]);
	st = plan_sleep(dh, f, &p, err);
	if (st)
		return st;
	qsort(p.live, p.nlive, sizeof(*p.live), compare_handle_va);
	coalesce_take_holes(dh, p.live, &p.nlive, p.idle, &p.nidle);
	count_host_need(&p, f->discard);
	nruns = coalesce_runs(dh, p.live, p.nlive, &runs);
	st = check_host(dh, &p, err);
	t_plan = t_backups = t_copied = vmm_now_s();
	if (!st) {
		st = drop_idle(dh, f, &p, res, err);
		if (!st && !f->discard)
			st = heap_run_backups(dh, p.live, runs, nruns, 0, err);
		t_backups = vmm_now_s();
		if (!st)
			st = copy_out_and_release(dh, &p, f->discard, lim, res, err);
		t_copied = vmm_now_s();
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
	released = res->bytes_released;
	commit_asleep(p.live, p.nlive, f->discard, res);
	released = res->bytes_released - released; /* what this sleep took off the device */
	for (size_t i = 0; i < nruns; i++)
		coalesce_asleep(dh, p.live, &runs[i]);
	/* A joined run's entries all name its one handle now, side by side. */
	for (size_t i = 0; i < p.nlive && !f->discard && released <= TAIL_SLEEP_MAX; i++)
		if (!i || p.live[i] != p.live[i - 1])
			tail_split_asleep(dh, p.live[i]);
	mark_asleep(dh, f);
	plan_free(&p);
	free(runs);
	/* Where a sleep's time goes outside its copy, for a timed run (VMMSHIM_LOG=debug). */
	vmm_log(VMM_LOG_DEBUG, "sleep dev %d phases ms: drain %.3f, plan %.3f, idle+backups %.3f, "
		"copy+release %.3f (copy %.3f), commit %.3f; %zu live handles in %zu runs", dh->dev,
		(t_drained - t0) * 1e3, (t_plan - t_drained) * 1e3, (t_backups - t_plan) * 1e3,
		(t_copied - t_backups) * 1e3, (res->copy_seconds - copy0) * 1e3,
		(vmm_now_s() - t_copied) * 1e3, p.nlive, nruns);
	return VMM_OK;
}
