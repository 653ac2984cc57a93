/* Sleep and wake of the program's own VMM handles (app_vmm.h). Sleep: drain, copy each
 * handle's contents to its host backup (once per handle even when it is mapped several times),
 * unmap every mapping, release the handle; unreleasable ones stay. Wake: check device memory,
 * re-create each handle as the same kind, map every mapping at its address and offset, re-grant
 * the same access, copy back. A handle whose contents are not all reachable through mappings the
 * owner can read is copied through a temporary whole-handle mapping. Failures roll back; a
 * rollback that fails leaves the partial state (transfer.h), never lost contents. */
#include <stdlib.h>
#include <string.h>

#include "../lib_thread.h"
#include "../log.h"
#include "app_internal.h"
#include "drain.h"
#include "offload_internal.h"

struct range_buf {
	vmm_copy_range *r;
	size_t n, cap;
};

static vmm_status push_range(struct range_buf *b, vmm_devptr dev, void *host, size_t size,
			     vmm_error *err)
{
	if (b->n == b->cap) {
		size_t c = b->cap ? b->cap * 2 : 64;
		vmm_copy_range *nr = realloc(b->r, c * sizeof(*nr));

		if (!nr)
			return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for copy ranges");
		b->r = nr;
		b->cap = c;
	}
	b->r[b->n++] = (vmm_copy_range){ .dev = dev, .host = host, .size = size };
	return VMM_OK;
}

static bool selected(const struct app_handle *h, const vmm_sleep_opts *o)
{
	return !o || o->device < 0 || h->dev == o->device;
}

static vmm_status engine_of(vmm_app_registry *reg, int dev, vmm_copy_engine **ce,
			    vmm_error *err)
{
	vmm_status st = VMM_OK;

	if (dev < 0 || dev >= VMM_MAX_DEVICES)
		return vmm_fail(err, VMM_E_INVALID, 0, "app handle on device %d", dev);
	if (!reg->ce[dev])
		st = vmm_copy_engine_create(reg->be, dev, &reg->ce[dev], err);
	*ce = reg->ce[dev];
	return st;
}

/* A failed copy whose streams could not be synchronized (copy_engine.h): copies may still touch
 * the handles' memory, which must then stay mapped. */
static bool copies_unsettled(vmm_app_registry *reg)
{
	for (int d = 0; d < VMM_MAX_DEVICES; d++)
		if (vmm_copy_engine_unsettled(reg->ce[d]))
			return true;
	return false;
}

/* Ask unsettled engines again: true when no copy of an earlier transfer can still run. */
static bool copies_settle(vmm_app_registry *reg)
{
	for (int d = 0; d < VMM_MAX_DEVICES; d++)
		if (vmm_copy_engine_unsettled(reg->ce[d]) && !vmm_copy_engine_settle(reg->ce[d]))
			return false;
	return true;
}

static vmm_status temp_map(vmm_app_registry *reg, struct app_handle *h, vmm_error *err)
{
	vmm_backend *be = reg->be;
	size_t g = 0;
	vmm_devptr va = 0;
	vmm_status st;

	st = be->granularity(be, h->dev, &g, err);
	if (!st)
		st = be->reserve(be, h->dev, h->size, g, &va, err);
	if (st)
		return st;
	st = be->map(be, va, h->size, h->real, err);
	if (st) {
		be->unreserve(be, h->dev, va, h->size, NULL);
		return st;
	}
	st = be->set_access(be, h->dev, va, h->size, NULL, 0, err);
	if (st && be->unmap(be, va, h->size, NULL) && be->unmap(be, va, h->size, NULL)) {
		/* Still mapped: kept, so that temp_unmap_all tries again before the handle can
		 * be released under it. */
		h->tmp_va = va;
		return st;
	}
	if (st) {
		be->unreserve(be, h->dev, va, h->size, NULL);
		return st;
	}
	h->tmp_va = va;
	return VMM_OK;
}

static void temp_unmap_all(vmm_app_registry *reg, struct app_handle **hs, size_t n)
{
	vmm_backend *be = reg->be;

	for (size_t i = 0; i < n; i++) {
		struct app_handle *h = hs[i];

		if (!h->tmp_va)
			continue;
		if (be->unmap(be, h->tmp_va, h->size, NULL) &&
		    be->unmap(be, h->tmp_va, h->size, NULL)) {
			/* Kept: the handle is not released under it (release_one, unrestore), and
			 * the next copy uses it and tries again. */
			vmm_log(VMM_LOG_WARN, "app handle %#llx: temporary mapping at %#llx would not "
				"unmap; kept, tried again later", (unsigned long long)h->app,
				(unsigned long long)h->tmp_va);
			continue;
		}
		be->unreserve(be, h->dev, h->tmp_va, h->size, NULL);
		h->tmp_va = 0;
	}
}

/* The ranges that carry h's contents: its mappings that the owner can access, each byte once;
 * when they leave a gap, one temporary mapping of the whole handle instead. An import's are
 * those mappings alone, gaps left out: the bytes this process can read are what it keeps a copy
 * of, and the rest of another process's handle may not be its to map whole. */
static vmm_status handle_ranges(vmm_app_registry *reg, struct app_handle *h, struct range_buf *b,
				vmm_error *err)
{
	size_t nm = 0, first = b->n, cur = 0;
	struct app_map **ms = app_maps_of(reg, h, &nm);
	vmm_status st = VMM_OK;

	if (h->nmaps && !ms)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a copy plan");
	for (size_t i = 0; i < nm && !st; i++) {
		struct app_map *m = ms[i];
		size_t end = m->offset + m->size;

		if (!(m->rw & (1u << h->dev)) || end <= cur)
			continue;
		if (m->offset > cur && !h->imported)
			break;   /* a gap: cur stops short */
		if (m->offset > cur)
			cur = m->offset;
		st = push_range(b, m->va + (cur - m->offset), (char *)h->backup.ptr + cur,
				end - cur, err);
		cur = end;
	}
	free(ms);
	if (st || cur >= h->size || h->imported)
		return st;
	b->n = first;
	st = h->tmp_va ? VMM_OK : temp_map(reg, h, err); /* one that would not unmap: still there */
	if (!st)
		st = push_range(b, h->tmp_va, h->backup.ptr, h->size, err);
	return st;
}

struct dev_copy {
	vmm_copy_engine *ce;
	struct range_buf b;
	bool out;
	vmm_status st;
	vmm_error err;
	uint64_t bytes;
};

static void *dev_copy_run(void *arg)
{
	struct dev_copy *dc = arg;
	vmm_copy_stats cs;

	dc->st = dc->out ? vmm_copy_out(dc->ce, dc->b.r, dc->b.n, &cs, &dc->err) :
			   vmm_copy_in(dc->ce, dc->b.r, dc->b.n, &cs, &dc->err);
	if (!dc->st)
		dc->bytes = cs.bytes;
	return NULL;
}

/* Copy the contents of hs (out: to their backups; in: back). Each device has its own engine and
 * link: the copies run side by side, one thread per device. A fresh thread also has no current
 * context: the driver checks an async copy against the current context, not the stream's, and
 * fails it when they differ (NVIDIA/cccl#9615); the caller may have another device's current. */
static vmm_status copy_handles(vmm_app_registry *reg, struct app_handle **hs, size_t n, bool out,
			       vmm_transfer_result *res, vmm_error *err)
{
	struct dev_copy *dc = calloc(VMM_MAX_DEVICES, sizeof(*dc));
	pthread_t th[VMM_MAX_DEVICES];
	bool started[VMM_MAX_DEVICES] = { false };
	double t0 = vmm_now_s();
	vmm_status st = VMM_OK;

	if (!dc)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a copy plan");
	for (int d = 0; d < VMM_MAX_DEVICES && !st; d++) {
		dc[d].out = out;
		for (size_t i = 0; i < n && !st; i++)
			if (hs[i]->dev == d && hs[i]->backup.ptr)
				st = handle_ranges(reg, hs[i], &dc[d].b, err);
		if (!st && dc[d].b.n)
			st = engine_of(reg, d, &dc[d].ce, err);
	}
	for (int d = 0; d < VMM_MAX_DEVICES && !st; d++) {
		if (!dc[d].b.n)
			continue;
		if (vmm_thread_create(&th[d], NULL, dev_copy_run, &dc[d]) == 0)
			started[d] = true;
		else
			dev_copy_run(&dc[d]);
	}
	for (int d = 0; d < VMM_MAX_DEVICES; d++) {
		if (started[d])
			pthread_join(th[d], NULL);
		if (!st && dc[d].b.n && dc[d].st) {
			st = dc[d].st;
			if (err)
				*err = dc[d].err;
		}
		res->bytes_copied += dc[d].bytes;
		free(dc[d].b.r);
	}
	res->copy_seconds += vmm_now_s() - t0;
	if (!st || !copies_unsettled(reg))
		temp_unmap_all(reg, hs, n);
	free(dc);
	return st;
}

static vmm_status map_one(vmm_app_registry *reg, struct app_map *m, vmm_error *err)
{
	vmm_backend *be = reg->be;
	struct app_handle *h = m->h;

	if (m->offset == 0 && m->size == h->size)
		return be->map(be, m->va, m->size, h->real, err);
	if (!be->map_at)
		return vmm_fail(err, VMM_E_UNSUPPORTED, 0,
				"the %s backend cannot map part of a handle (offset %zu, %zu of "
				"%zu bytes)", be->name, m->offset, m->size, h->size);
	return be->map_at(be, m->va, m->size, m->offset, h->real, err);
}

static vmm_status grant(vmm_app_registry *reg, struct app_map *m, vmm_error *err)
{
	int peers[VMM_MAX_DEVICES], np = 0, owner = -1;

	for (int d = 0; d < VMM_MAX_DEVICES; d++) {
		if (!(m->rw & (1u << d)))
			continue;
		if (owner < 0)
			owner = d;
		else
			peers[np++] = d;
	}
	if (owner < 0)
		return VMM_OK;   /* the program had granted no access yet */
	return reg->be->set_access(reg->be, owner, m->va, m->size, peers, np, err);
}

/* Unmap m, tried twice. Where the driver refuses both, m is marked stuck: still mapped to its
 * handle, which must not be released under it (unrestore keeps it as stale). */
static void unmap_or_stick(vmm_app_registry *reg, struct app_map *m)
{
	if (reg->be->unmap(reg->be, m->va, m->size, NULL) &&
	    reg->be->unmap(reg->be, m->va, m->size, NULL))
		m->stuck = true;
}

static bool has_stuck(vmm_app_registry *reg, const struct app_handle *h)
{
	for (size_t i = 0; i < reg->nm; i++)
		if (reg->maps[i].h == h && reg->maps[i].stuck)
			return true;
	return false;
}

/* Every mapping of h is mapped to the handle that becomes h->stale. */
static void stick_all(vmm_app_registry *reg, const struct app_handle *h)
{
	for (size_t i = 0; i < reg->nm; i++)
		if (reg->maps[i].h == h)
			reg->maps[i].stuck = true;
}

/* Map m and grant its access; a failed grant unmaps it again. */
static vmm_status map_granted(vmm_app_registry *reg, struct app_map *m, vmm_error *err)
{
	vmm_status st = map_one(reg, m, err);

	if (!st && (st = grant(reg, m, err)))
		unmap_or_stick(reg, m);
	return st;
}

/* Map (map true: with access granted) or unmap every mapping of h, which has a real handle
 * when mapping; on failure the mappings done are put back as they were. */
static vmm_status remap_all(vmm_app_registry *reg, struct app_handle *h, bool map,
			    vmm_error *err)
{
	size_t nm = 0, done = 0;
	struct app_map **ms = app_maps_of(reg, h, &nm);
	vmm_status st = VMM_OK;

	if (h->nmaps && !ms)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory to %s", map ? "map" : "unmap");
	for (; done < nm; done++) {
		st = map ? map_granted(reg, ms[done], err) :
			   reg->be->unmap(reg->be, ms[done]->va, ms[done]->size, err);
		if (st)
			break;
	}
	for (size_t i = 0; st && i < done; i++) {
		if (map)
			unmap_or_stick(reg, ms[i]);
		else if (map_granted(reg, ms[i], NULL))
			vmm_log(VMM_LOG_ERROR, "app mapping at %#llx lost in a rollback",
				(unsigned long long)ms[i]->va);
	}
	free(ms);
	return st;
}

/* A new driver handle for h: made like the program's, or an import fetched again. */
static vmm_status create_like(vmm_app_registry *reg, struct app_handle *h, vmm_error *err)
{
	vmm_backend *be = reg->be;

	if (h->imported)
		return app_share_reimport(reg, h, err);

	if (be->create_with_prop && h->prop)
		return be->create_with_prop(be, h->dev, h->size, h->prop, h->prop_size, &h->real,
					    err);
	return be->create(be, h->dev, h->size, &h->real, err);
}

/* Copy back the contents of those of hs[0..n) that have a backup. */
static vmm_status copy_back(vmm_app_registry *reg, struct app_handle **hs, size_t n,
			    vmm_transfer_result *res, vmm_error *err)
{
	struct app_handle **with = malloc((n ? n : 1) * sizeof(*with));
	size_t nw = 0;
	vmm_status st;

	if (!with)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory to plan a copy");
	for (size_t i = 0; i < n; i++)
		if (hs[i]->has_backup && (!hs[i]->imported || hs[i]->refill))
			with[nw++] = hs[i];   /* an import fetched again has its exporter's bytes */
	st = copy_handles(reg, with, nw, false, res, err);
	free(with);
	return st;
}

/* A failed restore gives h's new handle back: its mappings unmapped (mapped: it got that far;
 * otherwise remap_all's own rollback unmapped what it mapped), then released. Where they will
 * not unmap (tried twice: remap_all puts back what it unmapped; or marked stuck), the handle is
 * not released under them: it is kept as h->stale for the next wake (settle_stale). */
static void unrestore(vmm_app_registry *reg, struct app_handle *h, bool mapped)
{
	if (mapped && remap_all(reg, h, false, NULL) && remap_all(reg, h, false, NULL))
		stick_all(reg, h);
	if (has_stuck(reg, h) || h->tmp_va) {
		vmm_log(VMM_LOG_ERROR, "app handle %#llx: a failed wake could not unmap it again; "
			"its new driver handle is kept mapped, not released, until the next wake "
			"unmaps it", (unsigned long long)h->app);
		h->stale = h->real;
	} else {
		reg->be->release(reg->be, h->real, NULL);
	}
	h->real = 0;
}

/* Unmap h's stuck mappings, each tried twice; those that go are no longer stuck. */
static vmm_status unstick(vmm_app_registry *reg, struct app_handle *h, vmm_error *err)
{
	vmm_status st = VMM_OK;

	for (size_t i = 0; i < reg->nm; i++) {
		struct app_map *m = &reg->maps[i];

		if (m->h != h || !m->stuck)
			continue;
		m->stuck = false;
		unmap_or_stick(reg, m);
		if (m->stuck && !st)
			st = vmm_fail(err, VMM_E_DRIVER, 0, "app handle %#llx: %#llx (%zu bytes), "
				      "mapped by an earlier failed wake, still will not unmap",
				      (unsigned long long)h->app, (unsigned long long)m->va, m->size);
	}
	return st;
}

/* Before h is brought back: unmap and release what a failed wake left mapped (unrestore). */
static vmm_status settle_stale(vmm_app_registry *reg, struct app_handle *h, vmm_error *err)
{
	vmm_status st;

	if (!h->stale)
		return VMM_OK;
	if (!copies_settle(reg))
		return vmm_fail(err, VMM_E_DRIVER, 0, "app handle %#llx: copies of an earlier failed "
				"wake may still be running (its copy streams do not synchronize)",
				(unsigned long long)h->app);
	temp_unmap_all(reg, &h, 1); /* an unsettled copy's temporary mapping (copy_handles) */
	if (h->tmp_va)
		return vmm_fail(err, VMM_E_DRIVER, 0, "app handle %#llx: a temporary mapping of an "
				"earlier failed wake still will not unmap", (unsigned long long)h->app);
	st = unstick(reg, h, err);
	if (st)
		return st;
	if (reg->be->release(reg->be, h->stale, NULL))
		vmm_log(VMM_LOG_WARN, "app handle %#llx: a failed wake's driver handle, unmapped "
			"now, could not be released", (unsigned long long)h->app);
	h->stale = 0;
	return VMM_OK;
}

/* Bring back hs[0..n) (asleep: no real handle, nothing mapped but what settle_stale unmaps):
 * create, map, grant, copy back (when they have a backup and `copy`). All or nothing: on failure
 * they stay asleep, host copies intact. */
static vmm_status restore(vmm_app_registry *reg, struct app_handle **hs, size_t n, bool copy,
			  vmm_transfer_result *res, vmm_error *err)
{
	vmm_backend *be = reg->be;
	size_t created = 0, mapped = 0;
	vmm_status st = VMM_OK;

	for (size_t i = 0; i < n; i++)
		if ((st = settle_stale(reg, hs[i], err)))
			return st;
	for (; created < n; created++)
		if ((st = create_like(reg, hs[created], err)))
			break;
	for (; !st && mapped < n; mapped++)
		if ((st = remap_all(reg, hs[mapped], true, err)))
			break;
	bool copy_ran = !st && copy;

	if (copy_ran)
		st = copy_back(reg, hs, n, res, err);
	if (st && copy_ran && copies_unsettled(reg)) {
		/* Unmapping what copies may still write to would fault: kept for the next wake,
		 * which unmaps it once the copy streams synchronize again (settle_stale). */
		vmm_log(VMM_LOG_ERROR, "a failed wake keeps %zu app handle(s) mapped until the next "
			"wake: copies into them may still be running", created);
		for (size_t i = 0; i < created; i++) {
			stick_all(reg, hs[i]);
			hs[i]->stale = hs[i]->real;
			hs[i]->real = 0;
		}
		return st;
	}
	if (st) {
		for (size_t i = 0; i < created; i++)
			unrestore(reg, hs[i], i < mapped);
		return st;
	}
	app_share_publish(reg, hs, n);
	for (size_t i = 0; i < n; i++) {
		struct app_handle *h = hs[i];

		/* The program had dropped its reference: the memory lives while mapped, as before. */
		if (h->app_released && be->release(be, h->real, NULL))
			vmm_log(VMM_LOG_WARN, "app handle %#llx: re-releasing failed",
				(unsigned long long)h->app);
		h->asleep = false;
		h->group_released = false;
		if (h->imported && h->backup.ptr) {
			/* Its bytes are in device memory again: the copy was for one sleep. */
			vmm_host_buf_free(be, &h->backup);
			h->has_backup = h->refill = false;
		}
	}
	return VMM_OK;
}

/* The handles an operation covers: selected, releasable, and asleep or not as asked. */
static struct app_handle **pick(vmm_app_registry *reg, const vmm_sleep_opts *o, bool asleep,
				size_t *n, uint64_t *bytes, uint64_t *imported_bytes,
				uint64_t *exported_bytes)
{
	struct app_handle **v = malloc((reg->nh ? reg->nh : 1) * sizeof(*v));

	*n = 0;
	*bytes = *imported_bytes = *exported_bytes = 0;
	if (!v)
		return NULL;
	for (size_t i = 0; i < reg->nh; i++) {
		struct app_handle *h = reg->hs[i];

		if (!selected(h, o))
			continue;
		if (!asleep && app_unreleasable(reg, h)) {
			*exported_bytes += h->size;
			continue;
		}
		if (asleep && reg->defer_imports && h->imported && h->group_released)
			continue;   /* a second wake fetches it, once its exporter is awake */
		if (h->asleep == asleep) {
			v[(*n)++] = h;
			*(h->imported ? imported_bytes : bytes) += h->size;
		}
	}
	return v;
}

/* The bytes of the selection asleep now: what the partial state reports. */
static uint64_t asleep_bytes(vmm_app_registry *reg, const vmm_sleep_opts *o)
{
	uint64_t n = 0;

	for (size_t i = 0; i < reg->nh; i++)
		if (reg->hs[i]->asleep && selected(reg->hs[i], o))
			n += reg->hs[i]->size;
	return n;
}

/* One sleep or wake of the registry, from its start (options checked, registry locked, handles
 * picked) to its end (unlocked, timed). */
struct app_op {
	struct app_handle **hs;
	size_t n;
	uint64_t bytes, imported, exported;   /* bytes: of the handles this process created */
	double t0;
};

static vmm_status op_begin(vmm_app_registry *reg, const vmm_sleep_opts *o, bool asleep,
			   struct app_op *op, vmm_transfer_result *res, vmm_error *err)
{
	memset(res, 0, sizeof(*res));
	op->t0 = vmm_now_s();
	if (!reg)
		return vmm_fail(err, VMM_E_INVALID, 0, "no app registry");
	if (o && (o->device < -1 || o->device >= VMM_MAX_DEVICES))
		return vmm_fail(err, VMM_E_INVALID, 0, "no device %d", o->device);
	if (o && o->tag) {
		res->already = true;
		return vmm_fail(err, VMM_E_ALREADY, 0,
				"the program's own VMM mappings belong to no tag");
	}
	pthread_mutex_lock(&reg->lock);
	op->hs = pick(reg, o, asleep, &op->n, &op->bytes, &op->imported, &op->exported);
	if (!op->hs) {
		pthread_mutex_unlock(&reg->lock);
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory to plan a %s",
				asleep ? "wake" : "sleep");
	}
	return VMM_OK;
}

static void op_end(vmm_app_registry *reg, struct app_op *op, vmm_transfer_result *res)
{
	pthread_mutex_unlock(&reg->lock);
	free(op->hs);
	res->seconds = vmm_now_s() - op->t0;
}

/* Drain every device that hs[0..n) live on. */
static vmm_status drain_devices(vmm_app_registry *reg, struct app_handle **hs, size_t n,
				const vmm_limits *lim, vmm_error *err)
{
	for (int d = 0; d < VMM_MAX_DEVICES; d++) {
		bool used = false;
		vmm_status st;

		for (size_t i = 0; i < n && !used; i++)
			used = hs[i]->dev == d;
		if (used && (st = vmm_drain(reg->be, d, lim, err)))
			return st;
	}
	return VMM_OK;
}

/* Copy hs[0..n) to their host backups, made first where missing (after a host memory check). */
static vmm_status back_up(vmm_app_registry *reg, struct app_handle **hs, size_t n,
			  vmm_transfer_result *res, vmm_error *err)
{
	uint64_t need = 0, avail;
	vmm_status st;

	for (size_t i = 0; i < n; i++)
		if (!hs[i]->backup.ptr)
			need += hs[i]->size;
	avail = vmm_host_available_bytes();
	if (need > avail)
		return vmm_fail(err, VMM_E_HOST_OOM, 0,
				"sleeping the program's VMM mappings needs %llu bytes of host memory, "
				"%llu available", (unsigned long long)need, (unsigned long long)avail);
	/* An import too: its exporter keeps a copy, but may end before the group wakes, and
	 * natively the memory would have outlived it in this process (app_reshare.c). */
	for (size_t i = 0; i < n; i++) {
		if (hs[i]->backup.ptr)
			continue;
		st = vmm_host_buf_alloc(reg->be, hs[i]->size, 0, &hs[i]->backup, err);
		if (st)
			return st;   /* buffers made so far are kept for the next try */
	}
	return copy_handles(reg, hs, n, true, res, err);
}

/* Unmap and release h, which is then asleep. When the release fails its mappings are put back;
 * where even that fails, h goes asleep all the same (its contents are on the host, or were to be
 * discarded), so that a wake or the rollback re-creates it: a driver handle left behind is
 * better than memory the program can no longer reach. */
static vmm_status release_one(vmm_app_registry *reg, struct app_handle *h, bool discard,
			      vmm_error *err)
{
	vmm_status st;

	/* One that would not unmap after the copy: once more, when no copy can still use it. */
	if (h->tmp_va && copies_settle(reg))
		temp_unmap_all(reg, &h, 1);
	if (h->tmp_va)
		return vmm_fail(err, VMM_E_DRIVER, 0, "app handle %#llx: its temporary mapping at "
				"%#llx will not unmap; not released under it",
				(unsigned long long)h->app, (unsigned long long)h->tmp_va);
	st = remap_all(reg, h, false, err);
	if (st)
		return st;
	if (!h->app_released) {
		st = reg->be->release(reg->be, h->real, err);
		if (st && !remap_all(reg, h, true, NULL))
			return st;
		if (st)
			vmm_log(VMM_LOG_ERROR, "app handle %#llx could neither be released nor mapped "
				"again: it is put asleep, its driver handle left behind",
				(unsigned long long)h->app);
		/* Mapped part-way again, and some of it would not unmap: the next wake unmaps it
		 * and releases the handle left behind. */
		if (st && has_stuck(reg, h))
			h->stale = h->real;
	}
	h->real = 0;
	h->asleep = true;
	h->has_backup = !discard;
	return st;
}

/* restore, imports last: every handle of its own is back (contents copied, exports made ahead
 * for the importers) before any import is fetched from another process, so that two members
 * that import from each other never wait for each other. When an import fails, the handles
 * brought back first go asleep again (their backups still hold the contents: nothing ran). */
static vmm_status restore_in_order(vmm_app_registry *reg, struct app_handle **hs, size_t n,
				   vmm_transfer_result *res, vmm_error *err)
{
	struct app_handle **v = malloc((n ? n : 1) * sizeof(*v));
	size_t own = 0, k = 0;
	vmm_status st;

	if (!v)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory to plan a wake");
	for (size_t i = 0; i < n; i++)
		if (!hs[i]->imported)
			v[own++] = hs[i];
	k = own;
	for (size_t i = 0; i < n; i++)
		if (hs[i]->imported)
			v[k++] = hs[i];
	st = restore(reg, v, own, true, res, err);
	if (!st && n > own && (st = restore(reg, v + own, n - own, true, res, err))) {
		for (size_t i = 0; i < own; i++) {
			app_share_unpublish(reg, v[i]->app);
			if (release_one(reg, v[i], false, NULL)) {
				vmm_log(VMM_LOG_ERROR, "app handle %#llx: could not be put asleep again "
					"after a failed import", (unsigned long long)v[i]->app);
			} else if (v[i]->exported) {
				/* Only a group sleep puts an export asleep: as it left it. */
				app_share_fds_close(v[i]);
				v[i]->group_released = true;
			}
		}
	}
	free(v);
	return st;
}

/* Back up (unless discard) and release hs[0..n). On failure those released are brought back;
 * where that fails they stay asleep with their host copy (*partial set). */
static vmm_status sleep_handles(vmm_app_registry *reg, struct app_handle **hs, size_t n,
				bool discard, const vmm_limits *lim, vmm_transfer_result *res,
				bool *partial, vmm_error *err)
{
	double t0 = vmm_now_s();
	size_t done = 0;
	vmm_status st;

	*partial = false;
	st = drain_devices(reg, hs, n, lim, err);
	res->drain_seconds += vmm_now_s() - t0;
	if (!st && !discard)
		st = back_up(reg, hs, n, res, err);
	if (!st)
		st = vmm_limits_check(lim, "releasing the program's VMM handles", err);
	if (st)
		return st;
	for (; done < n; done++) {
		st = release_one(reg, hs[done], discard, err);
		if (st)
			break;
	}
	if (done == n)
		return VMM_OK;
	if (hs[done]->asleep)
		done++;   /* released in effect: it comes back with the others */
	if (done) {
		vmm_error rerr;
		vmm_transfer_result ignored = { 0 };

		vmm_error_clear(&rerr);
		if (restore_in_order(reg, hs, done, &ignored, &rerr)) {
			vmm_log(VMM_LOG_ERROR, "sleep rollback failed (%s): %zu app handles stay "
				"asleep with their host copy; a wake brings them back", rerr.msg,
				done);
			*partial = true;
		}
	}
	return st;
}

vmm_status vmm_app_sleep_within(vmm_app_registry *reg, const vmm_sleep_opts *opts,
				const vmm_limits *lim, vmm_transfer_result *res, vmm_error *err)
{
	vmm_transfer_result local;
	struct app_op op;
	bool partial = false;
	vmm_status st;

	if (!res)
		res = &local;
	st = op_begin(reg, opts, false, &op, res, err);
	if (st)
		return st;
	if (!op.n) {
		st = vmm_fail(err, VMM_E_ALREADY, 0, "no app VMM handle to sleep%s",
			      op.exported ? " (exported, imported or partly mapped handles stay)" :
					    "");
		res->already = true;
	} else {
		st = sleep_handles(reg, op.hs, op.n, opts && opts->discard, lim, res,
				   &partial, err);
		if (!st) {
			res->bytes_released = op.bytes;
			res->bytes_imported = op.imported;
			app_share_released(reg, op.hs, op.n);
		} else {
			res->bytes_copied = 0;
		}
		if (partial)
			res->partial_bytes = asleep_bytes(reg, opts);
	}
	op_end(reg, &op, res);
	if (op.exported)
		vmm_log(VMM_LOG_INFO, "%llu bytes of app handles stay resident (exported, imported, "
			"or mapped in part where the backend cannot re-map part of a handle)",
			(unsigned long long)op.exported);
	return st;
}

vmm_status vmm_app_sleep(vmm_app_registry *reg, const vmm_sleep_opts *opts,
			 vmm_transfer_result *res, vmm_error *err)
{
	return vmm_app_sleep_within(reg, opts, NULL, res, err);
}

/* Enough device memory on each device for hs[0..n), before anything is created. */
static vmm_status wake_fits(vmm_app_registry *reg, struct app_handle **hs, size_t n,
			    vmm_error *err)
{
	for (int d = 0; d < VMM_MAX_DEVICES; d++) {
		uint64_t need = 0;
		size_t fr = 0, tot = 0;

		/* A stale handle (unrestore) gives its memory back before its own comes. */
		for (size_t i = 0; i < n; i++)
			if (hs[i]->dev == d && !hs[i]->stale && !hs[i]->imported)
				need += hs[i]->size;
		if (need && reg->be->mem_info(reg->be, d, &fr, &tot, NULL) == VMM_OK && need > fr)
			return vmm_fail(err, VMM_E_OOM, 0,
					"device %d: waking the program's VMM mappings needs %llu "
					"bytes, %zu available", d, (unsigned long long)need, fr);
	}
	return VMM_OK;
}

vmm_status vmm_app_wake_within(vmm_app_registry *reg, const vmm_sleep_opts *opts,
			       const vmm_limits *lim, vmm_transfer_result *res, vmm_error *err)
{
	vmm_transfer_result local;
	struct app_op op;
	vmm_status st;

	if (!res)
		res = &local;
	st = op_begin(reg, opts, true, &op, res, err);
	if (st)
		return st;
	if (!op.n) {
		res->already = true;
		st = vmm_fail(err, VMM_E_ALREADY, 0, "no app VMM handle is asleep");
	}
	if (!st)
		st = wake_fits(reg, op.hs, op.n, err);
	if (!st) {
		reg->wake_deadline = lim ? lim->deadline : 0;   /* imports fetched within it */
		st = restore_in_order(reg, op.hs, op.n, res, err);
		reg->wake_deadline = 0;
		if (st == VMM_E_OOM && err) {
			char why[sizeof(err->msg)];

			memcpy(why, err->msg, sizeof(why));
			vmm_fail(err, VMM_E_OOM, err->driver_code,
				 "waking the program's VMM mappings needs %llu bytes: %s",
				 (unsigned long long)op.bytes, why);
		}
		if (!st) {
			res->bytes_released = op.bytes;
			res->bytes_imported = op.imported;
		} else {
			res->bytes_copied = 0;
		}
	}
	op_end(reg, &op, res);
	return st;
}

vmm_status vmm_app_wake(vmm_app_registry *reg, const vmm_sleep_opts *opts,
			vmm_transfer_result *res, vmm_error *err)
{
	return vmm_app_wake_within(reg, opts, NULL, res, err);
}

vmm_status vmm_app_provision_backup(vmm_app_registry *reg, const vmm_sleep_opts *opts,
				    vmm_error *err)
{
	struct app_handle **hs;
	uint64_t bytes, imported, exported, need = 0, avail;
	vmm_status st = VMM_OK;
	size_t n;

	if (!reg)
		return vmm_fail(err, VMM_E_INVALID, 0, "no app registry");
	if (opts && (opts->device < -1 || opts->device >= VMM_MAX_DEVICES))
		return vmm_fail(err, VMM_E_INVALID, 0, "no device %d", opts->device);
	pthread_mutex_lock(&reg->lock);
	hs = pick(reg, opts, false, &n, &bytes, &imported, &exported);
	if (!hs) {
		pthread_mutex_unlock(&reg->lock);
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory to plan provisioning");
	}
	for (size_t i = 0; i < n; i++)
		if (!hs[i]->backup.ptr)
			need += hs[i]->size;
	avail = vmm_host_available_bytes();
	if (need > avail)
		st = vmm_fail(err, VMM_E_HOST_OOM, 0,
			      "provisioning the program's VMM backups needs %llu bytes of host "
			      "memory, %llu available", (unsigned long long)need,
			      (unsigned long long)avail);
	for (size_t i = 0; i < n && !st; i++)
		if (!hs[i]->backup.ptr)
			st = vmm_host_buf_alloc(reg->be, hs[i]->size, 1, &hs[i]->backup, err);
	pthread_mutex_unlock(&reg->lock);
	free(hs);
	return st;
}
