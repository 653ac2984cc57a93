/* Sleep and wake as the shim does them: the submission gate around the core's one sleep/wake of
 * the process (core/offload/transition.h), the held-sleep policy, cancellation and the exit. One
 * sleep or wake at a time (ctl_lock); the state that status reads is kept in atomics, so that it
 * is answered without waiting for an operation in progress.
 *
 * Sleep: close the gate (bounded, cancellable) -> vmm_offload_sleep -> keep the gate closed
 * until wake (a held sleep, or a failure that left the process partly asleep) or reopen it.
 * Wake: vmm_offload_wake -> reopen the gate once no held sleep is left (each held sleep is
 * remembered by what it selected: it ends when a wake covers it or nothing of it is asleep). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../../core/log.h"
#include "../../core/mono_wait.h"
#include "../../core/offload/drain.h"
#include "../../core/offload/transition.h"
#include "../gate.h"
#include "../runtime.h"
#include "control.h"
#include "control_internal.h"
#include "../share/share.h"

/* Exclusive: the sleep or wake in progress, or a change of its settings. Shared: a look at the
 * state (control_state_get), so that looks at once never take each other for an operation, and a
 * full status while it reads the figures (control_state_hold). */
static pthread_rwlock_t ctl_lock = PTHREAD_RWLOCK_INITIALIZER;

/* Written under ctl_lock, read by control_state_get and the operation's stop test without it. */
static atomic_bool held;          /* the gate is closed by a sleep until the matching wake */
static atomic_bool held_autowake; /* ...and a submission that meets it wakes the process */
static atomic_bool autowake_default; /* VMMSHIM_AUTOWAKE */
static atomic_bool partial;       /* a failed sleep or wake left the process partly asleep */
static atomic_bool shut_down;     /* the process is exiting: stop, start nothing */
static atomic_ullong running_op;  /* the id of the operation in progress; 0: none */
static atomic_ullong cancel_op;   /* control_cancel asked the operation with this id to stop */

/* Under ctl_lock. */
struct held_sel {
	bool all_tags;
	char tag[VMM_TAG_MAX];
	int device;
};
#define MAX_HELD 16
static struct held_sel held_list[MAX_HELD];
static int nheld;
static unsigned long long last_op;
static bool forked_child;

/* One operation in progress: its id and its caller's limits. */
struct op {
	unsigned long long id;
	const control_limits *lim;
	vmm_limits core_lim;
	int gate_ms;
	double t0;
};

static void autowake_fn(void);

/* Should the operation give up: exit, control_cancel, or its caller gone? */
static bool op_stop(void *arg)
{
	const struct op *op = arg;

	return atomic_load(&shut_down) || (op->id && atomic_load(&cancel_op) == op->id) ||
	       (op->lim && op->lim->gone && op->lim->gone(op->lim->gone_arg));
}

/* The parts of the process: each side's core heap and the program's own VMM mappings. */
static vmm_offload_parts parts_of(const shim_runtime *rt)
{
	static const char *const heap_names[SHIM_NSIDES] = { [SHIM_CUDA] = "cuda heap",
							     [SHIM_ACL] = "acl heap" };
	vmm_offload_parts p = { 0 };

	for (int i = 0; i < SHIM_NSIDES; i++) {
		if (!rt->side[i].core)
			continue;
		p.heaps[p.nheaps].name = heap_names[i];
		p.heaps[p.nheaps++].core = rt->side[i].core;
		if (rt->side[i].app)
			p.app = rt->side[i].app;
	}
	return p;
}

/* App mappings belong to no tag: only operations on every tag include them. */
static vmm_selection selection_of(const vmm_sleep_opts *o)
{
	return (vmm_selection){ .tag = o->tag, .device = o->device, .app = !o->tag,
				.discard = o->discard };
}

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

static bool held_still_asleep(const vmm_offload_parts *parts, const struct held_sel *e)
{
	vmm_selection sel = { .tag = e->all_tags ? NULL : e->tag, .device = e->device,
			      .app = e->all_tags };

	return vmm_offload_is_asleep(parts, &sel);
}

/* Keep the gate closed after this sleep until a wake covers it. */
static void hold(const vmm_sleep_opts *opts, bool autowake)
{
	atomic_store(&held, true);
	remember_held(opts);
	if (autowake || atomic_load(&autowake_default))
		atomic_store(&held_autowake, true);
	if (atomic_load(&held_autowake))
		gate_set_autowake(true, autowake_fn);
}

/* After a wake: forget the held sleeps it ended; reopen the gate when none is left. */
static void release_held(const vmm_offload_parts *parts, const vmm_sleep_opts *opts)
{
	bool dflt = atomic_load(&autowake_default);
	int k = 0;

	for (int i = 0; i < nheld; i++)
		if (!covers(opts, &held_list[i]) && held_still_asleep(parts, &held_list[i]))
			held_list[k++] = held_list[i];
	nheld = k;
	if (atomic_load(&held) && !nheld) {
		atomic_store(&held, false);
		atomic_store(&held_autowake, false);
		gate_set_autowake(dflt, dflt ? autowake_fn : NULL);
		gate_open();
	}
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

/* How long op_begin waits for an operation in progress: the caller's bound, else its timeout,
 * else as long as a client is there to hang up (it polls gone), else VMMSHIM_OP_WAIT: the
 * program's own calls (the API, autowake) must not wait forever on an operation that hangs.
 * 0: unbounded. */
static double begin_bound_s(const control_limits *lim)
{
	const shim_runtime *rt;

	if (lim && lim->begin_ms > 0)
		return lim->begin_ms / 1000.0;
	if (lim && lim->timeout_ms > 0)
		return lim->timeout_ms / 1000.0;
	if (lim && lim->gone)
		return 0;
	rt = shim_runtime_peek();
	return rt && rt->cfg.op_wait_s > 0 ? rt->cfg.op_wait_s : 60;
}

/* Take ctl_lock exclusively, waiting for the holder within bound_s (<= 0: no bound) and, with op,
 * while op_stop(op) says the caller still wants it. */
static bool ctl_lock_take(double bound_s, struct op *op)
{
	double t0 = vmm_now_s();

	while (pthread_rwlock_trywrlock(&ctl_lock)) {
		/* Held by another operation, or shared by a look at the state: that one ends soon. */
		struct timespec pause = { 0, (atomic_load(&running_op) ? 20 : 1) * 1000000L };

		if ((bound_s > 0 && vmm_now_s() - t0 >= bound_s) || (op && op_stop(op)))
			return false;
		nanosleep(&pause, NULL);
	}
	return true;
}

/* Take ctl_lock for a new operation (waiting for one in progress within begin_bound_s, while the
 * caller is there), or fail when the process is exiting or manages nothing. */
static vmm_status op_begin(const control_limits *lim, struct op *op, shim_runtime **rt,
			   vmm_error *err)
{
	int t = lim && lim->timeout_ms > 0 ? lim->timeout_ms : 0;
	double bound = begin_bound_s(lim);

	memset(op, 0, sizeof(*op));
	op->lim = lim;
	op->t0 = vmm_now_s();
	if (!ctl_lock_take(bound, op))
		return vmm_fail(err, VMM_E_BUSY, 0,
				"another sleep or wake is in progress (waited %.1f s)",
				vmm_now_s() - op->t0);
	if (atomic_load(&shut_down) || forked_child) {
		pthread_rwlock_unlock(&ctl_lock);
		return vmm_fail(err, forked_child ? VMM_E_UNSUPPORTED : VMM_E_BUSY, 0, "%s",
				forked_child ? "not available in a forked child" :
					       "the process is exiting");
	}
	*rt = shim_runtime_peek();
	if (!*rt || !shim_runtime_serves(*rt)) {
		pthread_rwlock_unlock(&ctl_lock);
		return vmm_fail(err, VMM_E_INVALID, 0,
				"no device memory is managed by vmmshim in this process yet");
	}
	op->id = ++last_op;
	atomic_store(&running_op, op->id);
	/* The drain is bounded by VMMSHIM_SLEEP_TIMEOUT, the gate by its default; a request's
	 * timeout bounds the whole operation on top. */
	op->core_lim = (vmm_limits){ .cancelled = op_stop, .arg = op,
				     .drain_s = (*rt)->cfg.sleep_timeout_s };
	/* A group sleep asks for a short drain and retries (tools/group.c). */
	if (lim && lim->drain_ms > 0 &&
	    (op->core_lim.drain_s <= 0 || lim->drain_ms / 1000.0 < op->core_lim.drain_s))
		op->core_lim.drain_s = lim->drain_ms / 1000.0;
	op->gate_ms = CONTROL_GATE_TIMEOUT_MS;
	if (t) {
		double left = t / 1000.0 - (vmm_now_s() - op->t0);

		op->core_lim.deadline = vmm_now_s() + (left > 0 ? left : 0);
		if (left * 1000 < op->gate_ms)
			op->gate_ms = left > 0 ? (int)(left * 1000) : 0;
	}
	return VMM_OK;
}

static void (*_Atomic when_unlocked)(void);

void control_set_when_unlocked(void (*fn)(void))
{
	atomic_store(&when_unlocked, fn);
}

static void run_when_unlocked(void)
{
	void (*fn)(void) = atomic_load(&when_unlocked);

	if (fn)
		fn();
}

bool control_exclusive_begin(int wait_ms)
{
	return ctl_lock_take(wait_ms / 1000.0, NULL);
}

void control_exclusive_end(void)
{
	pthread_rwlock_unlock(&ctl_lock);
	run_when_unlocked();
}

static void op_end(void)
{
	atomic_store(&running_op, 0);
	pthread_rwlock_unlock(&ctl_lock);
}

/* The partial flag follows the outcome: set by a failure that left the process partly asleep,
 * cleared once an operation on everything succeeds or nothing is asleep any more. */
static void note_partial(const vmm_offload_parts *parts, const vmm_sleep_opts *o, vmm_status s,
			 const vmm_transfer_result *r)
{
	vmm_selection all = { .device = -1, .app = true };

	if (s && s != VMM_E_ALREADY && r->partial_bytes)
		atomic_store(&partial, true);
	else if (!s && ((!o->tag && o->device < 0) || !vmm_offload_is_asleep(parts, &all)))
		atomic_store(&partial, false);
}

/* How an automatic wake gets its memory when something above sets it (control.h). */
static void (*_Atomic autowake_waker)(void);

void control_set_autowake_waker(void (*waker)(void))
{
	atomic_store(&autowake_waker, waker);
}

static void autowake_fn(void)
{
	void (*waker)(void) = atomic_load(&autowake_waker);

	if (waker) {
		waker(); /* e.g. GPU sharing: waits for memory under its rules */
		return;
	}
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

/* What a sleep or a wake adds around the core's call, run under ctl_lock; it notes the outcome
 * (note_partial) and leaves the gate as the operation requires. */
struct transition {
	vmm_status (*run)(const struct transition *t, struct op *op, const vmm_offload_parts *parts,
			  vmm_transfer_result *r, vmm_error *err);
	const vmm_sleep_opts *opts;
	bool hold_after, autowake; /* sleep only */
};

/* One sleep or wake: check the options, take the operation slot, run it, time it. */
static vmm_status run_transition(const struct transition *t, const control_limits *lim,
				 vmm_transfer_result *res, vmm_error *err)
{
	vmm_transfer_result r = { 0 };
	vmm_offload_parts parts;
	shim_runtime *rt = NULL;
	struct op op;
	double t_begun, t_ran;
	vmm_status s;

	if ((s = check_opts(t->opts, err)) || (s = op_begin(lim, &op, &rt, err)))
		return s;
	t_begun = vmm_now_s();
	parts = parts_of(rt);
	s = t->run(t, &op, &parts, &r, err);
	t_ran = vmm_now_s();
	op_end();
	r.seconds = vmm_now_s() - op.t0;
	vmm_log(VMM_LOG_DEBUG, "control: a transition took %.3f ms to begin, %.3f to run, %.3f to end",
		(t_begun - op.t0) * 1e3, (t_ran - t_begun) * 1e3, (vmm_now_s() - t_ran) * 1e3);
	if (res)
		*res = r;
	run_when_unlocked();
	return s;
}

static vmm_status sleep_step(const struct transition *t, struct op *op,
			     const vmm_offload_parts *parts, vmm_transfer_result *r, vmm_error *err)
{
	vmm_selection sel = selection_of(t->opts);
	bool was_held = atomic_load(&held);
	double t0 = vmm_now_s(), gate_s;
	vmm_status s;

	if (!was_held && (s = gate_close_within(op->gate_ms, op_stop, op, err)))
		return s;
	gate_s = vmm_now_s() - t0;
	vmm_log(VMM_LOG_DEBUG, "sleep: device work is held; offloading");
	s = control_group_sleep(parts, &sel, &op->core_lim, op->lim, r, err);
	r->gate_seconds = gate_s;
	note_partial(parts, t->opts, s, r);
	if (!s && t->hold_after) {
		hold(t->opts, t->autowake);
	} else if (s && s != VMM_E_ALREADY && r->partial_bytes) {
		/* Partly asleep: device work must not reach what sleeps, until a wake completes it.
		 * A caller that did not ask for a hold (the program itself) gets autowake. */
		hold(t->opts, t->autowake || !t->hold_after);
	} else if (!was_held) {
		gate_open();
	}
	if (r->bytes_released)
		share_note_freed(); /* sharing processes waiting for memory look again */
	return s;
}

/* A wake does not close the gate: it only waits for its own copies. */
static vmm_status wake_step(const struct transition *t, struct op *op,
			    const vmm_offload_parts *parts, vmm_transfer_result *r, vmm_error *err)
{
	vmm_selection sel = selection_of(t->opts);
	vmm_status s = control_group_wake(parts, &sel, &op->core_lim, op->lim, r, err);
	bool deferred = op->lim && op->lim->app_defer;

	note_partial(parts, t->opts, s, r);
	/* A deferred wake left imports asleep: device work stays held until the second wake. */
	if ((!s || s == VMM_E_ALREADY) && !deferred)
		release_held(parts, t->opts);
	if (!s && !atomic_load(&held))
		share_note_woken(); /* resident again: its time slice starts now */
	return s;
}

vmm_status control_sleep(const vmm_sleep_opts *opts, bool hold_after, bool autowake,
			 const control_limits *lim, vmm_transfer_result *res, vmm_error *err)
{
	struct transition t = { .run = sleep_step, .opts = opts, .hold_after = hold_after,
				.autowake = autowake };

	return run_transition(&t, lim, res, err);
}

vmm_status control_wake(const vmm_sleep_opts *opts, const control_limits *lim,
			vmm_transfer_result *res, vmm_error *err)
{
	struct transition t = { .run = wake_step, .opts = opts };

	return run_transition(&t, lim, res, err);
}

bool control_op_running(void)
{
	return atomic_load(&running_op) != 0;
}

vmm_status control_cancel(vmm_error *err)
{
	unsigned long long id = atomic_load(&running_op);

	if (!id)
		return vmm_fail(err, VMM_E_INVALID, 0, "no sleep or wake is in progress");
	atomic_store(&cancel_op, id);
	return VMM_OK;
}

vmm_status shim_sleep(const vmm_sleep_opts *opts, bool hold_after, vmm_transfer_result *res,
		      vmm_error *err)
{
	return control_sleep(opts, hold_after, false, NULL, res, err);
}

vmm_status shim_wake(const vmm_sleep_opts *opts, vmm_transfer_result *res, vmm_error *err)
{
	return control_wake(opts, NULL, res, err);
}

/* The state; keep: when no operation runs, hold ctl_lock (shared) on return, so that none starts
 * until control_state_release. false: one runs (changing), nothing is held. */
static bool state_get(control_state *out, bool keep)
{
	vmm_offload_parts parts;
	shim_runtime *rt;
	int n = 0, asleep = 0;

	memset(out, 0, sizeof(*out));
	out->held = atomic_load(&held);
	out->partial = atomic_load(&partial);
	/* A sleep or wake in progress (an in-process one can run beside the server) is reported,
	 * not waited for. */
	if (pthread_rwlock_tryrdlock(&ctl_lock)) {
		out->changing = true;
		out->autowake = atomic_load(&held_autowake);
		return false;
	}
	out->held = atomic_load(&held);
	out->partial = atomic_load(&partial);
	out->autowake = out->held ? atomic_load(&held_autowake) : atomic_load(&autowake_default);
	rt = shim_runtime_peek();
	if (rt && !atomic_load(&shut_down)) {
		parts = parts_of(rt);
		for (int i = 0; i < parts.nheaps; i++, n++)
			asleep += vmm_is_asleep(parts.heaps[i].core, -1, NULL);
		if (parts.app) {
			n++;
			asleep += vmm_app_is_asleep(parts.app, -1);
		}
	}
	if (!keep)
		pthread_rwlock_unlock(&ctl_lock);
	out->any_asleep = asleep > 0;
	out->all_asleep = out->held || (n > 0 && asleep == n);
	return true;
}

void control_state_get(control_state *out)
{
	state_get(out, false);
}

bool control_state_hold(control_state *out)
{
	return state_get(out, true);
}

void control_state_release(void)
{
	pthread_rwlock_unlock(&ctl_lock);
	run_when_unlocked(); /* a status look may have held it for seconds (dispatch.c) */
}

void control_set_autowake_default(bool on)
{
	pthread_rwlock_wrlock(&ctl_lock);
	atomic_store(&autowake_default, on);
	if (!atomic_load(&held))
		gate_set_autowake(on, on ? autowake_fn : NULL);
	pthread_rwlock_unlock(&ctl_lock);
}

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static double exit_until;

static void exit_begin(void)
{
	exit_until = vmm_now_s() + CONTROL_EXIT_WAIT_MS / 1000.0;
}

bool control_sleep_shutdown(void)
{
	struct timespec pause = { 0, 10 * 1000000L };
	bool locked;

	/* The operation in progress sees this between its steps and rolls back. */
	atomic_store(&shut_down, true);
	pthread_once(&exit_once, exit_begin);
	while (!(locked = !pthread_rwlock_trywrlock(&ctl_lock)) && vmm_now_s() < exit_until)
		nanosleep(&pause, NULL);
	if (!locked) {
		vmm_log(VMM_LOG_WARN, "exit: a sleep or wake is still running after %d ms: its memory "
			"is left to the end of the process", CONTROL_EXIT_WAIT_MS);
		return false;
	}
	if (atomic_load(&held) && nheld) {
		vmm_log(VMM_LOG_INFO, "exit while asleep: the host copy is freed with the process");
		nheld = 0; /* said once */
	}
	pthread_rwlock_unlock(&ctl_lock);
	/* A drain that was given up may still be inside the driver with a backend pointer. */
	if (!vmm_drain_wait_idle(vmm_now_s() + (exit_until - vmm_now_s()))) {
		vmm_log(VMM_LOG_WARN, "exit: a device drain that was given up is still running: "
			"the device memory is left to the end of the process");
		return false;
	}
	return true;
}

void control_sleep_after_fork(void)
{
	/* The parent's server thread may have held the lock at fork time. */
	pthread_rwlock_init(&ctl_lock, NULL);
	forked_child = true;
	atomic_store(&held, false);
	atomic_store(&partial, false);
	atomic_store(&running_op, 0);
	nheld = 0;
}
