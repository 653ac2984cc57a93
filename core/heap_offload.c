/* Sleep and wake of the core's own heaps (heap_offload.h). Sleep, per device: drain, reclaim the
 * quarantine, give wholly free handles back without copying, copy the live ranges of the other
 * handles into host buffers (kept per handle and reused across cycles), unmap and release them;
 * the addresses stay reserved. Wake: check the driver's free memory, re-create every handle, map
 * it at its old address, grant access to the owner and peers, copy back: in batches, each copy
 * running while the next batch is set up. Any failure rolls back;
 * a rollback that fails leaves the partial state (offload/transfer.h), never lost contents.
 *
 * This file: which devices and arenas an operation covers, the transfer across devices with its
 * undo, and the public calls (heap_offload.h). One device's sleep is heap_sleep.c, its wake
 * heap_wake.c, the host backups heap_backups.c. */
#include "heap_offload.h"

#include <string.h>

#include "heap_backups.h"
#include "heap_reads.h"
#include "heap_refill.h"
#include "heap_sleep.h"
#include "heap_wake.h"
#include "log.h"

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
			/* Nothing of the device's is made elsewhere while it sleeps or wakes. */
			refill_settle(dh);
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

			if (want_asleep ? arena_selected(a, f) && a->asleep : arena_sleeps(a, f))
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
			if (h->asleep && arena_selected(h->arena, f))
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
		st = heap_wake_fits(s.dh[d], &f, err);
	if (!st && sleeping)
		st = transfer_devices(&s, &f, lim, res, heap_sleep_device, heap_wake_device, "wake",
				      err);
	else if (!st)
		st = transfer_devices(&s, &f, lim, res, heap_wake_device, heap_sleep_device, "sleep",
				      err);
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
	return undo_all(core, heap_wake_device, lim, res, err);
}

vmm_status vmm_wake_undo(vmm_core *core, const vmm_limits *lim, vmm_transfer_result *res,
			 vmm_error *err)
{
	return undo_all(core, heap_sleep_device, lim, res, err);
}

/* A read (heap_reads.h): the devices locked as select_devices does, refills left alone; false
 * when a lock was missed (bounded reads), with nothing held. */
static bool select_for_reading(vmm_core *core, int device, struct sel *s)
{
	s->n = 0;
	if (device >= core->ndev || device < -1)
		return false;
	for (int d = device < 0 ? 0 : device; d < (device < 0 ? core->ndev : device + 1); d++) {
		struct devheap *dh = heap_for(core, d, false, NULL);

		if (!dh)
			continue;
		if (!heap_lock_read(dh)) {
			unlock_all(s);
			return false;
		}
		s->dh[s->n++] = dh;
	}
	return true;
}

bool vmm_is_asleep(vmm_core *core, int device, const char *tag)
{
	vmm_sleep_opts o = { .tag = tag, .device = device };
	struct filter f = filter_of(&o);
	struct sel s;
	bool r;

	if (!select_for_reading(core, device, &s))
		return false;
	r = any_selected(&s, &f, true);
	unlock_all(&s);
	return r;
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
			if (arena_selected(h->arena, &f) && !h->asleep && !h->backup.ptr)
				need += h->size;
		if (need > vmm_host_available_bytes()) {
			st = vmm_fail(err, VMM_E_HOST_OOM, 0,
				      "the backup needs %llu bytes of host memory, %llu available",
				      (unsigned long long)need,
				      (unsigned long long)vmm_host_available_bytes());
			break;
		}
		st = heap_provision_backups(dh, &f, err);
	}
	unlock_all(&s);
	return st;
}
