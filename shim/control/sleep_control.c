/* Sleep and wake of the whole process, a tag or a device: the order of operations across the
 * submission gate, the core heaps (CUDA, Ascend) and the program's own VMM mappings, with
 * roll-back when a step fails. One sleep or wake at a time (ctl_lock).
 *
 * Sleep: close the gate (bounded wait for calls in flight) -> vmm_sleep on each core -> the app
 * mappings (whole-process sleeps only) -> keep the gate closed until wake (hold) or reopen it.
 * Wake: app mappings -> cores -> reopen the gate once no held sleep is left (each held sleep is
 * remembered by what it selected: it ends when a wake covers it or nothing of it is asleep).
 *
 * Cancellation (control_cancel, or a caller whose limits say its client has gone) is checked
 * before the operation and after each part; what was done is then rolled back and the call
 * returns VMM_E_BUSY with a message that starts with "cancelled". */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../../core/log.h"
#include "../gate.h"
#include "../runtime.h"
#include "control.h"
#include "control_internal.h"

static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static bool held;             /* the gate is closed by a sleep until the matching wake */
/* A sleep or wake holds ctl_lock (what control_cancel may cancel), and whether it was asked to
 * stop. Read without the lock. */
static bool op_running;
static bool cancel_requested;

/* What each held sleep selected. */
struct held_sel {
	bool all_tags;
	char tag[VMM_TAG_MAX];
	int device;
};
#define MAX_HELD 16
static struct held_sel held_list[MAX_HELD];
static int nheld;
static bool held_autowake;    /* ...and a submission that meets it wakes the process */
static bool autowake_default; /* VMMSHIM_AUTOWAKE */
static bool shut_down;
static bool forked_child;

/* One thing that sleeps and wakes: a core heap or the app-mapping registry. */
struct part {
	const char *name;
	vmm_status (*sleep)(void *obj, const vmm_sleep_opts *o, vmm_transfer_result *r,
			    vmm_error *e);
	vmm_status (*wake)(void *obj, const vmm_sleep_opts *o, vmm_transfer_result *r,
			   vmm_error *e);
	bool (*asleep)(void *obj);
	void *obj;
};

static vmm_status core_sleep(void *obj, const vmm_sleep_opts *o, vmm_transfer_result *r,
			     vmm_error *e)
{
	return vmm_sleep(obj, o, r, e);
}

static vmm_status core_wake(void *obj, const vmm_sleep_opts *o, vmm_transfer_result *r,
			    vmm_error *e)
{
	return vmm_wake(obj, o, r, e);
}

static bool core_asleep(void *obj)
{
	return vmm_is_asleep(obj, -1, NULL);
}

static vmm_status app_sleep(void *obj, const vmm_sleep_opts *o, vmm_transfer_result *r,
			    vmm_error *e)
{
	return vmm_app_sleep(obj, o, r, e);
}

static vmm_status app_wake(void *obj, const vmm_sleep_opts *o, vmm_transfer_result *r,
			   vmm_error *e)
{
	return vmm_app_wake(obj, o, r, e);
}

static bool app_asleep(void *obj)
{
	return vmm_app_is_asleep(obj, -1);
}

/* The parts in sleep order; wake walks them backwards. App mappings belong to no tag, so only
 * sleeps of every tag include them. */
static int collect_parts(shim_runtime *rt, bool with_app, struct part *p)
{
	int n = 0;

	if (rt->cuda_core)
		p[n++] = (struct part){ "cuda heap", core_sleep, core_wake, core_asleep,
					rt->cuda_core };
	if (rt->acl_core)
		p[n++] = (struct part){ "acl heap", core_sleep, core_wake, core_asleep,
					rt->acl_core };
	if (with_app && rt->cuda_app)
		p[n++] = (struct part){ "app mappings", app_sleep, app_wake, app_asleep,
					rt->cuda_app };
	return n;
}

/* Keep the parts that have memory on dev (-1: all): a process using CUDA and Ascend has device
 * numbers on each side, and one side lacking dev is not an error of the other. */
static int parts_with_device(struct part *p, int n, int dev)
{
	int k = 0;

	for (int i = 0; i < n; i++) {
		if (dev >= 0 && p[i].asleep == core_asleep &&
		    !(vmm_devices_used(p[i].obj) & (1u << dev)))
			continue;
		p[k++] = p[i];
	}
	/* Only the app registry left: it has memory there only if it says so. */
	if (k == 1 && dev >= 0 && p[0].asleep == app_asleep) {
		vmm_app_stats as;

		vmm_app_stats_get(p[0].obj, dev, &as);
		if (!as.handles)
			k = 0;
	}
	return k;
}

static double now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void add_result(vmm_transfer_result *sum, const vmm_transfer_result *r)
{
	sum->bytes_released += r->bytes_released;
	sum->bytes_copied += r->bytes_copied;
}

static void autowake_fn(void);

static void remember_held(const vmm_sleep_opts *opts)
{
	struct held_sel e = { .all_tags = !opts->tag, .device = opts->device };

	if (opts->tag)
		snprintf(e.tag, sizeof(e.tag), "%s", opts->tag);
	if (nheld == MAX_HELD) {
		/* Out of room: the last slot becomes "everything" (ended only by a whole wake or
		 * once nothing is asleep). */
		held_list[MAX_HELD - 1] = (struct held_sel){ .all_tags = true, .device = -1 };
		return;
	}
	held_list[nheld++] = e;
}

/* Does a wake of opts cover the held sleep e? */
static bool covers(const vmm_sleep_opts *opts, const struct held_sel *e)
{
	return (!opts->tag || (!e->all_tags && !strcmp(opts->tag, e->tag))) &&
	       (opts->device < 0 || opts->device == e->device);
}

static bool held_still_asleep(shim_runtime *rt, const struct held_sel *e)
{
	const char *tag = e->all_tags ? NULL : e->tag;
	struct part parts[3];
	int n = collect_parts(rt, e->all_tags, parts);

	for (int i = 0; i < n; i++) {
		bool asleep = parts[i].asleep == core_asleep ?
				      vmm_is_asleep(parts[i].obj, e->device, tag) :
				      vmm_app_is_asleep(parts[i].obj, e->device);
		if (asleep)
			return true;
	}
	return false;
}

/* After a wake: forget the held sleeps it ended; reopen the gate when none is left. */
static void release_held(shim_runtime *rt, const vmm_sleep_opts *opts)
{
	int k = 0;

	for (int i = 0; i < nheld; i++)
		if (!covers(opts, &held_list[i]) && held_still_asleep(rt, &held_list[i]))
			held_list[k++] = held_list[i];
	nheld = k;
	if (held && !nheld) {
		__atomic_store_n(&held, false, __ATOMIC_RELAXED);
		held_autowake = false;
		gate_set_autowake(autowake_default, autowake_default ? autowake_fn : NULL);
		gate_open();
	}
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool client_gone(const control_limits *lim)
{
	return lim && lim->gone && lim->gone(lim->gone_arg);
}

/* Has the operation been asked to stop? what: "sleep" or "wake". */
static vmm_status check_stop(const control_limits *lim, const char *what, vmm_error *err)
{
	if (__atomic_load_n(&cancel_requested, __ATOMIC_ACQUIRE))
		return vmm_fail(err, VMM_E_BUSY, 0, "cancelled: the %s was stopped (vmmctl cancel, "
				"or a wake)", what);
	if (client_gone(lim))
		return vmm_fail(err, VMM_E_BUSY, 0,
				"cancelled: the client that asked for the %s has gone", what);
	return VMM_OK;
}

/* Take ctl_lock, or fail when the process is exiting. Waiting for another sleep or wake ends
 * when the caller's client goes away or its timeout passes (without limits: as long as it
 * takes, as before). */
static vmm_status lock_control(const control_limits *lim, vmm_error *err, shim_runtime **rt)
{
	long long deadline = lim && lim->timeout_ms > 0 ? now_ms() + lim->timeout_ms : 0;

	for (;;) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (!pthread_mutex_timedlock(&ctl_lock, &ts))
			break;
		if (client_gone(lim))
			return vmm_fail(err, VMM_E_BUSY, 0, "cancelled: the client went away "
					"while another sleep or wake was in progress");
		if (deadline && now_ms() >= deadline)
			return vmm_fail(err, VMM_E_BUSY, 0, "another sleep or wake was still in "
					"progress after %d ms", lim->timeout_ms);
	}
	if (shut_down || forked_child) {
		pthread_mutex_unlock(&ctl_lock);
		return vmm_fail(err, forked_child ? VMM_E_UNSUPPORTED : VMM_E_BUSY, 0, "%s",
				forked_child ? "not available in a forked child" :
					       "the process is exiting");
	}
	*rt = shim_runtime_peek();
	if (!*rt || (!(*rt)->cuda_core && !(*rt)->acl_core)) {
		pthread_mutex_unlock(&ctl_lock);
		return vmm_fail(err, VMM_E_INVALID, 0,
				"no device memory is managed by vmmshim in this process yet");
	}
	__atomic_store_n(&cancel_requested, false, __ATOMIC_RELEASE);
	__atomic_store_n(&op_running, true, __ATOMIC_RELEASE);
	return VMM_OK;
}

static void unlock_control(void)
{
	__atomic_store_n(&op_running, false, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ctl_lock);
}

vmm_status control_cancel(vmm_error *err)
{
	if (!__atomic_load_n(&op_running, __ATOMIC_ACQUIRE))
		return vmm_fail(err, VMM_E_INVALID, 0, "no sleep or wake is in progress");
	__atomic_store_n(&cancel_requested, true, __ATOMIC_RELEASE);
	return VMM_OK;
}

static vmm_status check_opts(const vmm_sleep_opts *opts, vmm_error *err)
{
	if (!opts)
		return vmm_fail(err, VMM_E_INVALID, 0, "no options");
	if (opts->device < -1 || opts->device >= VMM_MAX_DEVICES)
		return vmm_fail(err, VMM_E_INVALID, 0, "device %d is not -1..%d", opts->device,
				VMM_MAX_DEVICES - 1);
	if (opts->tag && (!opts->tag[0] || strlen(opts->tag) >= VMM_TAG_MAX))
		return vmm_fail(err, VMM_E_INVALID, 0, "a tag has 1 to %d bytes",
				VMM_TAG_MAX - 1);
	return VMM_OK;
}

static void autowake_fn(void)
{
	vmm_sleep_opts all = { .tag = NULL, .device = -1, .discard = false };
	vmm_transfer_result res;
	vmm_error err;

	vmm_error_clear(&err);
	vmm_status s = control_wake(&all, NULL, &res, &err);
	if (s && s != VMM_E_ALREADY)
		vmm_log(VMM_LOG_WARN, "autowake failed (will retry on the next submission): %s",
			err.msg);
	else
		vmm_log(VMM_LOG_INFO, "autowake: %llu bytes back in %.3f s",
			(unsigned long long)res.bytes_copied, res.seconds);
}

/* The end of a sleep or a wake, the control lock released: time the summed result, hand it
 * back, and log it; a call that changed nothing is VMM_E_ALREADY (with the `already` text). */
static vmm_status report_result(vmm_transfer_result *sum, double t0, bool changed,
				const char *already, const char *done, vmm_transfer_result *res,
				vmm_error *err)
{
	sum->seconds = now_seconds() - t0;
	sum->already = !changed;
	if (res)
		*res = *sum;
	if (!changed)
		return vmm_fail(err, VMM_E_ALREADY, 0, "%s: nothing changed", already);
	vmm_log(VMM_LOG_INFO, "%s %llu bytes, copied %llu in %.3f s", done,
		(unsigned long long)sum->bytes_released, (unsigned long long)sum->bytes_copied,
		sum->seconds);
	return VMM_OK;
}

vmm_status control_sleep(const vmm_sleep_opts *opts, bool hold, bool autowake,
			 const control_limits *lim, vmm_transfer_result *res, vmm_error *err)
{
	vmm_transfer_result sum = { 0 }, part_res;
	struct part parts[3];
	bool done[3] = { false };
	bool changed = false, was_held;
	shim_runtime *rt;
	vmm_status s;
	double t0 = now_seconds();
	int n, timeout_ms = lim ? lim->timeout_ms : 0;

	if ((s = check_opts(opts, err)))
		return s;
	if ((s = lock_control(lim, err, &rt)))
		return s;
	if ((s = check_stop(lim, "sleep", err))) {
		unlock_control();
		return s;
	}
	was_held = held;
	if (!was_held) {
		s = gate_close(timeout_ms > 0 ? timeout_ms : CONTROL_GATE_TIMEOUT_MS, err);
		if (s) {
			unlock_control();
			return s;
		}
	}
	n = collect_parts(rt, opts->tag == NULL, parts);
	n = parts_with_device(parts, n, opts->device);
	if (!n) {
		if (!was_held)
			gate_open();
		unlock_control();
		return vmm_fail(err, VMM_E_INVALID, 0,
				"device %d has no memory managed by vmmshim", opts->device);
	}
	/* i == n: the check after the last part. */
	for (int i = 0; i <= n; i++) {
		bool stopped;

		s = check_stop(lim, "sleep", err);
		stopped = s != VMM_OK;
		if (!s && i == n)
			break;
		if (!s) {
			memset(&part_res, 0, sizeof(part_res));
			s = parts[i].sleep(parts[i].obj, opts, &part_res, err);
			if (s == VMM_E_ALREADY)
				continue;
		}
		if (s) {
			vmm_error rb;

			/* Roll back: wake what this call put to sleep. */
			for (int j = i - 1; j >= 0; j--) {
				if (!done[j])
					continue;
				vmm_error_clear(&rb);
				if (parts[j].wake(parts[j].obj, opts, &part_res, &rb))
					vmm_log(VMM_LOG_ERROR, "sleep roll-back: waking the %s "
						"failed: %s", parts[j].name, rb.msg);
			}
			if (!was_held)
				gate_open();
			unlock_control();
			vmm_log(VMM_LOG_WARN, "sleep %s %s%s, rolled back: %s",
				stopped ? "stopped" : "failed",
				i == n ? "at the end" : stopped ? "before the " : "in the ",
				i < n ? parts[i].name : "", err ? err->msg : "");
			return s;
		}
		done[i] = true;
		changed = true;
		add_result(&sum, &part_res);
	}
	if (changed && hold) {
		__atomic_store_n(&held, true, __ATOMIC_RELAXED);
		remember_held(opts);
		held_autowake = held_autowake || autowake || autowake_default;
		if (held_autowake)
			gate_set_autowake(true, autowake_fn);
	} else if (!was_held) {
		gate_open();
	}
	unlock_control();
	return report_result(&sum, t0, changed, "already asleep", "sleep: released", res, err);
}

vmm_status control_wake(const vmm_sleep_opts *opts, const control_limits *lim,
			vmm_transfer_result *res, vmm_error *err)
{
	vmm_transfer_result sum = { 0 }, part_res;
	struct part parts[3];
	bool done[3] = { false };
	bool changed = false;
	shim_runtime *rt;
	vmm_status s;
	double t0 = now_seconds();
	int n;

	if ((s = check_opts(opts, err)))
		return s;
	if ((s = lock_control(lim, err, &rt)))
		return s;
	n = collect_parts(rt, opts->tag == NULL, parts);
	n = parts_with_device(parts, n, opts->device);
	if (!n) {
		unlock_control();
		return vmm_fail(err, VMM_E_INVALID, 0,
				"device %d has no memory managed by vmmshim", opts->device);
	}
	/* i == -1: the check after the last part. */
	for (int i = n - 1; i >= -1; i--) {
		bool stopped;

		s = check_stop(lim, "wake", err);
		stopped = s != VMM_OK;
		if (!s && i < 0)
			break;
		if (!s) {
			memset(&part_res, 0, sizeof(part_res));
			s = parts[i].wake(parts[i].obj, opts, &part_res, err);
			if (s == VMM_E_ALREADY)
				continue;
		}
		if (s) {
			vmm_sleep_opts keep = *opts;
			vmm_error rb;

			/* Roll back: what this call woke goes back to sleep, contents kept. */
			keep.discard = false;
			for (int j = i + 1; j < n; j++) {
				if (!done[j])
					continue;
				vmm_error_clear(&rb);
				if (parts[j].sleep(parts[j].obj, &keep, &part_res, &rb))
					vmm_log(VMM_LOG_ERROR, "wake roll-back: the %s stays "
						"awake: %s", parts[j].name, rb.msg);
			}
			unlock_control();
			vmm_log(VMM_LOG_WARN, "wake %s %s%s (still asleep): %s",
				stopped ? "stopped" : "failed",
				i < 0 ? "at the end" : stopped ? "before the " : "in the ",
				i >= 0 ? parts[i].name : "", err ? err->msg : "");
			return s;
		}
		done[i] = true;
		changed = true;
		add_result(&sum, &part_res);
	}
	release_held(rt, opts);
	unlock_control();
	return report_result(&sum, t0, changed, "already awake", "wake: re-created", res, err);
}

vmm_status shim_sleep(const vmm_sleep_opts *opts, bool hold, vmm_transfer_result *res,
		      vmm_error *err)
{
	return control_sleep(opts, hold, false, NULL, res, err);
}

vmm_status shim_wake(const vmm_sleep_opts *opts, vmm_transfer_result *res, vmm_error *err)
{
	return control_wake(opts, NULL, res, err);
}

void control_state_get(control_state *out)
{
	shim_runtime *rt;
	struct part parts[3];
	int n, asleep = 0;

	memset(out, 0, sizeof(*out));
	/* A sleep or wake in progress (an in-process one can run beside the server) is reported,
	 * not waited for. */
	if (pthread_mutex_trylock(&ctl_lock)) {
		out->changing = true;
		out->held = __atomic_load_n(&held, __ATOMIC_RELAXED);
		return;
	}
	out->held = held;
	out->autowake = held ? held_autowake : autowake_default;
	rt = shim_runtime_peek();
	n = rt && !shut_down ? collect_parts(rt, true, parts) : 0;
	for (int i = 0; i < n; i++)
		asleep += parts[i].asleep(parts[i].obj);
	pthread_mutex_unlock(&ctl_lock);
	out->any_asleep = asleep > 0;
	out->all_asleep = held || (n > 0 && asleep == n);
}

void control_set_autowake_default(bool on)
{
	pthread_mutex_lock(&ctl_lock);
	autowake_default = on;
	if (!held)
		gate_set_autowake(on, on ? autowake_fn : NULL);
	pthread_mutex_unlock(&ctl_lock);
}

void control_sleep_shutdown(void)
{
	struct timespec ts;

	/* A sleep or wake in progress finishes first (bounded: exit must not hang on it). */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	if (pthread_mutex_timedlock(&ctl_lock, &ts)) {
		vmm_log(VMM_LOG_WARN, "exit: a sleep or wake is still running");
		return;
	}
	shut_down = true;
	if (held)
		vmm_log(VMM_LOG_INFO, "exit while asleep: the host copy is freed with the process");
	pthread_mutex_unlock(&ctl_lock);
}

void control_sleep_after_fork(void)
{
	/* The parent's server thread may have held the lock at fork time. */
	pthread_mutex_init(&ctl_lock, NULL);
	forked_child = true;
	__atomic_store_n(&held, false, __ATOMIC_RELAXED);
	nheld = 0;
}
