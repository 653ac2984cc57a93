/* The sleep and wake of a whole process over its parts (transition.h): which parts hold what is
 * selected, the run over them, the undo in reverse, and the partial state's report. */
#include "transition.h"

#include <stdio.h>
#include <string.h>

#include "../heap_offload.h"
#include "../log.h"
#include "progress.h"

#define MAX_PARTS (VMM_OFFLOAD_MAX_HEAPS + 1)
#define MAX_TAGS 64   /* a heap has at most this many tags per device (MAX_ARENAS) */

/* One part as the run sees it: a core heap or the app registry. */
struct part {
	const char *name;
	vmm_core *core;
	vmm_app_registry *app;
};

static vmm_status part_sleep(const struct part *p, const vmm_sleep_opts *o, const vmm_limits *lim,
			     vmm_transfer_result *r, vmm_error *e)
{
	return p->core ? vmm_sleep_within(p->core, o, lim, r, e) :
			 vmm_app_sleep_within(p->app, o, lim, r, e);
}

static vmm_status part_wake(const struct part *p, const vmm_sleep_opts *o, const vmm_limits *lim,
			    vmm_transfer_result *r, vmm_error *e)
{
	return p->core ? vmm_wake_within(p->core, o, lim, r, e) :
			 vmm_app_wake_within(p->app, o, lim, r, e);
}

/* Bring back what the part's last sleep (wake) did, contents kept. A heap undoes exactly what it
 * changed; the app registry has no tags, so a wake (sleep) of the same devices is its undo. */
static vmm_status part_undo(const struct part *p, bool of_sleep, const vmm_sleep_opts *o,
			    const vmm_limits *lim, vmm_transfer_result *r, vmm_error *e)
{
	vmm_sleep_opts keep = *o;

	keep.discard = false;
	if (p->core)
		return of_sleep ? vmm_sleep_undo(p->core, lim, r, e) :
				  vmm_wake_undo(p->core, lim, r, e);
	return of_sleep ? vmm_app_wake_within(p->app, &keep, lim, r, e) :
			  vmm_app_sleep_within(p->app, &keep, lim, r, e);
}

/* The bytes of the selection asleep in the part now. */
static uint64_t part_asleep(const struct part *p, const vmm_sleep_opts *o)
{
	if (p->core) {
		vmm_stats st;

		return vmm_stats_get(p->core, o->device, o->tag, &st, NULL) ? 0 : st.asleep_bytes;
	}
	vmm_app_stats as;

	vmm_app_stats_get(p->app, o->device, &as);
	return as.asleep_bytes;
}

static bool heap_has_tag(vmm_core *core, int dev, const char *tag)
{
	uint32_t used = vmm_devices_used(core);
	char names[MAX_TAGS][VMM_TAG_MAX];

	for (int d = 0; d < VMM_MAX_DEVICES; d++) {
		int n;

		if ((dev >= 0 && d != dev) || !(used & (1u << d)))
			continue;
		n = vmm_tags_list(core, d, names, MAX_TAGS);
		for (int i = 0; i < n; i++)
			if (!strcmp(names[i], tag))
				return true;
	}
	return false;
}

/* The parts that hold something of sel, in sleep order. VMM_E_INVALID, saying what is missing,
 * when none does. */
static vmm_status collect(const vmm_offload_parts *parts, const vmm_selection *sel,
			  struct part *p, int *n, vmm_error *err)
{
	bool has_device = false;

	*n = 0;
	if (sel->device < -1 || sel->device >= VMM_MAX_DEVICES)
		return vmm_fail(err, VMM_E_INVALID, 0, "device %d is not -1..%d", sel->device,
				VMM_MAX_DEVICES - 1);
	if (sel->tag && (!sel->tag[0] || strlen(sel->tag) >= VMM_TAG_MAX))
		return vmm_fail(err, VMM_E_INVALID, 0, "a tag has 1 to %d bytes", VMM_TAG_MAX - 1);
	for (int i = 0; i < parts->nheaps && i < VMM_OFFLOAD_MAX_HEAPS; i++) {
		vmm_core *core = parts->heaps[i].core;

		/* A process using CUDA and Ascend has device numbers on each side: one side
		 * lacking the device or the tag is not an error of the other. */
		if (!core || (sel->device >= 0 && !(vmm_devices_used(core) & (1u << sel->device))))
			continue;
		has_device = true;
		if (sel->tag && !heap_has_tag(core, sel->device, sel->tag))
			continue;
		p[(*n)++] = (struct part){ .name = parts->heaps[i].name, .core = core };
	}
	if (sel->app && !sel->tag && parts->app) {
		vmm_app_stats as = { 0 };

		if (sel->device >= 0)
			vmm_app_stats_get(parts->app, sel->device, &as);
		if (sel->device < 0 || as.handles) {
			has_device = true;
			p[(*n)++] = (struct part){ .name = "app mappings", .app = parts->app };
		}
	}
	if (*n)
		return VMM_OK;
	if (sel->device >= 0 && !has_device)
		return vmm_fail(err, VMM_E_INVALID, 0, "device %d has no memory managed by vmmshim",
				sel->device);
	if (sel->tag && sel->device >= 0)
		return vmm_fail(err, VMM_E_INVALID, 0, "no tag \"%s\" on device %d", sel->tag,
				sel->device);
	if (sel->tag)
		return vmm_fail(err, VMM_E_INVALID, 0, "no tag \"%s\"", sel->tag);
	return vmm_fail(err, VMM_E_INVALID, 0, "no device memory is managed by vmmshim");
}

/* What the operation will copy, as far as the figures say before it starts (the progress
 * record's first total; the copy engine's plan corrects it as the copies start). */
static uint64_t expected_bytes(const struct part *p, int n, const vmm_sleep_opts *o, bool sleeping)
{
	uint64_t sum = 0;

	if (sleeping && o->discard)
		return 0;
	for (int i = 0; i < n; i++) {
		if (p[i].core) {
			vmm_stats st;

			if (vmm_stats_get(p[i].core, o->device, o->tag, &st, NULL))
				continue;
			sum += sleeping ? (st.mapped_bytes > st.cached_bytes ?
					   st.mapped_bytes - st.cached_bytes : 0) :
					  st.asleep_bytes;
		} else {
			vmm_app_stats as;

			vmm_app_stats_get(p[i].app, o->device, &as);
			sum += sleeping ? (as.handle_bytes > as.asleep_bytes ?
					   as.handle_bytes - as.asleep_bytes : 0) :
					  as.asleep_bytes;
		}
	}
	return sum;
}

/* Undo the done parts (those with done[i]) in the reverse of the run's order. Returns whether
 * every undo succeeded. A part that answers "already" has nothing left to undo: the program's
 * handles a wake brought back that are shared by now stay resident, as a sleep of the process
 * alone leaves shared memory. */
static bool undo_done(const struct part *p, const int *order, int ran, const bool *done,
		      bool of_sleep, const vmm_sleep_opts *o, const vmm_limits *lim)
{
	vmm_limits ulim = { .drain_s = lim ? lim->drain_s : 0 }; /* not cancelled, no deadline */
	bool all = true;

	for (int k = ran - 1; k >= 0; k--) {
		const struct part *q = &p[order[k]];
		vmm_transfer_result ignored = { 0 };
		vmm_error e;

		if (!done[order[k]])
			continue;
		vmm_error_clear(&e);
		vmm_status st = part_undo(q, of_sleep, o, &ulim, &ignored, &e);

		if (st && st != VMM_E_ALREADY) {
			vmm_log(VMM_LOG_ERROR, "%s roll-back: the %s could not be brought back: %s",
				of_sleep ? "sleep" : "wake", q->name, e.msg);
			all = false;
		}
	}
	return all;
}

/* A failure that left the partial state: the error says so, after its own reason. */
static void say_partial(vmm_error *err, uint64_t bytes, bool sleeping)
{
	char why[120], tail[136];
	size_t n;

	if (!err)
		return;
	n = strnlen(err->msg, sizeof(why) - 1);
	memcpy(why, err->msg, n);
	why[n] = '\0';
	snprintf(tail, sizeof(tail), "; the %s could not be undone in full: partially asleep, "
		 "%llu bytes stay asleep with their host copy (wake completes it)",
		 sleeping ? "sleep" : "wake", (unsigned long long)bytes);
	snprintf(err->msg, sizeof(err->msg), "%s%s", why, tail);
}

/* Give the free physical memory every heap of the process keeps in its cache (and quarantine)
 * back to the driver, on dev (-1: every device): that memory is free for the process's own wake,
 * which the driver's free figure alone does not show. Returns whether any memory went back. */
static bool trim_caches(const vmm_offload_parts *parts, int dev)
{
	bool any = false;

	for (int i = 0; i < parts->nheaps && i < VMM_OFFLOAD_MAX_HEAPS; i++) {
		vmm_core *core = parts->heaps[i].core;

		vmm_stats before, after;

		if (!core || (dev >= 0 && !(vmm_devices_used(core) & (1u << dev))) ||
		    vmm_stats_get(core, dev, NULL, &before, NULL))
			continue;
		vmm_trim(core, dev, NULL); /* what could not be trimmed stays cached */
		if (!vmm_stats_get(core, dev, NULL, &after, NULL) &&
		    after.mapped_bytes < before.mapped_bytes)
			any = true;
	}
	return any;
}

/* Run each part in the operation's order (wake walks the parts back). Returns the first
 * failure; *ran: the parts that ran or were skipped before it, done[]: which of them changed
 * something (and so have something to undo). */
static vmm_status run_parts(const vmm_offload_parts *parts, struct part *p, const int *order,
			    int n, bool sleeping, const vmm_sleep_opts *o, const vmm_limits *lim, bool *done, int *ran,
			    vmm_transfer_result *sum, vmm_error *err)
{
	vmm_status st = VMM_OK;
	bool trimmed = false;
	int k;

	for (k = 0; k < n; k++) {
		struct part *q = &p[order[k]];
		vmm_transfer_result r = { 0 };

		if (k && (st = vmm_limits_check(lim, q->name, err)))
			break;
		double t0 = vmm_now_s();

		st = sleeping ? part_sleep(q, o, lim, &r, err) : part_wake(q, o, lim, &r, err);
		vmm_log(VMM_LOG_DEBUG, "%s: the %s took %.3f ms", sleeping ? "sleep" : "wake",
			q->name, (vmm_now_s() - t0) * 1e3);
		/* A wake refused for lack of device memory while the process's own caches hold
		 * some: give those back and, when any went back, try once more (a part's failed
		 * wake changed nothing). */
		if (st == VMM_E_OOM && !sleeping && !trimmed && !r.partial_bytes) {
			trimmed = true;
			if (trim_caches(parts, o->device)) {
				memset(&r, 0, sizeof(r));
				vmm_error_clear(err);
				st = part_wake(q, o, lim, &r, err);
			}
		}
		sum->partial_bytes += r.partial_bytes;
		if (st == VMM_E_ALREADY) {
			st = VMM_OK;
			continue;
		}
		if (st)
			break;
		done[order[k]] = true;
		sum->bytes_released += r.bytes_released;
		sum->bytes_imported += r.bytes_imported;
		sum->bytes_copied += r.bytes_copied;
		sum->drain_seconds += r.drain_seconds;
		sum->copy_seconds += r.copy_seconds;
	}
	*ran = k;
	return st;
}

static vmm_status transition(const vmm_offload_parts *parts, const vmm_selection *sel,
			     bool sleeping, const vmm_limits *lim, vmm_transfer_result *res,
			     vmm_error *err)
{
	vmm_sleep_opts o = { .tag = sel->tag, .device = sel->device,
			     .discard = sleeping && sel->discard };
	vmm_transfer_result sum = { 0 };
	struct part p[MAX_PARTS];
	bool done[MAX_PARTS] = { false }, changed = false, partial;
	int order[MAX_PARTS], n, ran;
	double t0 = vmm_now_s();
	vmm_status st;

	st = collect(parts, sel, p, &n, err);
	if (st)
		return st;
	for (int i = 0; i < n; i++)
		order[i] = sleeping ? i : n - 1 - i;
	vmm_progress_begin(sleeping, expected_bytes(p, n, &o, sleeping));
	st = run_parts(parts, p, order, n, sleeping, &o, lim, done, &ran, &sum, err);
	memset(res, 0, sizeof(*res));
	res->seconds = vmm_now_s() - t0;
	if (st) {
		vmm_progress_phase_set(VMM_PHASE_ROLLING_BACK);
		partial = !undo_done(p, order, ran, done, sleeping, &o, lim) || sum.partial_bytes;
		for (int i = 0; partial && i < n; i++)
			res->partial_bytes += part_asleep(&p[i], &o);
		if (partial)
			say_partial(err, res->partial_bytes, sleeping);
		/* A wake refused for want of device memory, all of it still asleep, is no fault:
		 * a sharing process waiting for room meets it at every look (hundreds of lines a
		 * minute at warn), and whoever asked gets the error. */
		vmm_log(!sleeping && st == VMM_E_OOM && !partial ? VMM_LOG_INFO : VMM_LOG_WARN,
			"%s failed in the %s, %s: %s", sleeping ? "sleep" : "wake",
			p[order[ran]].name, partial ? "partly undone" : sleeping ? "rolled back" :
			"still asleep", err ? err->msg : "");
		vmm_progress_end(NULL);
		return st;
	}
	for (int i = 0; i < n; i++)
		changed |= done[i];
	sum.seconds = res->seconds;
	sum.already = !changed;
	*res = sum;
	vmm_progress_end(&sum);
	if (!changed)
		return vmm_fail(err, VMM_E_ALREADY, 0, "%s: nothing changed",
				sleeping ? "already asleep" : "already awake");
	vmm_log(VMM_LOG_INFO, "%s %llu bytes, copied %llu in %.3f s",
		sleeping ? "sleep: released" : "wake: re-created",
		(unsigned long long)sum.bytes_released, (unsigned long long)sum.bytes_copied,
		sum.seconds);
	return VMM_OK;
}

vmm_status vmm_offload_sleep(const vmm_offload_parts *parts, const vmm_selection *sel,
			     const vmm_limits *lim, vmm_transfer_result *res, vmm_error *err)
{
	vmm_transfer_result local;

	return transition(parts, sel, true, lim, res ? res : &local, err);
}

vmm_status vmm_offload_wake(const vmm_offload_parts *parts, const vmm_selection *sel,
			    const vmm_limits *lim, vmm_transfer_result *res, vmm_error *err)
{
	vmm_transfer_result local;

	return transition(parts, sel, false, lim, res ? res : &local, err);
}

bool vmm_offload_is_asleep(const vmm_offload_parts *parts, const vmm_selection *sel)
{
	struct part p[MAX_PARTS];
	int n;

	if (collect(parts, sel, p, &n, NULL))
		return false;
	for (int i = 0; i < n; i++) {
		bool asleep = p[i].core ? vmm_is_asleep(p[i].core, sel->device, sel->tag) :
					  vmm_app_is_asleep(p[i].app, sel->device);
		if (asleep)
			return true;
	}
	return false;
}
