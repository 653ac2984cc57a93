/* The progress record and the counters (progress.h). The record is a few atomics written by the
 * one operation in progress and read by anyone; readers may see the fields of two moments mixed,
 * so the reader's copy is made consistent (total never below done). The counters change once per
 * operation, under a lock. */
#include "progress.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static atomic_int phase;                 /* vmm_progress_phase */
static atomic_bool sleeping;
static atomic_ullong expected, planned, done;
static _Atomic double began_s, copy_began_s;

static pthread_mutex_t counters_lock = PTHREAD_MUTEX_INITIALIZER;
static vmm_offload_counters counters;

/* The callback: replaced under the write lock, called under the read lock. */
static pthread_rwlock_t cb_lock = PTHREAD_RWLOCK_INITIALIZER;
static vmm_progress_fn cb_fn;
static void *cb_arg;
static atomic_bool cb_set;    /* a callback is set: the hot path looks only at this */
static double cb_interval = 0.5;
static _Atomic double cb_last_s;
static pthread_mutex_t cb_call_lock = PTHREAD_MUTEX_INITIALIZER; /* one call at a time */
static _Thread_local bool in_callback;

const char *vmm_progress_phase_name(vmm_progress_phase p)
{
	switch (p) {
	case VMM_PHASE_PREPARING: return "preparing";
	case VMM_PHASE_COPYING: return "copying";
	case VMM_PHASE_ROLLING_BACK: return "rolling_back";
	case VMM_PHASE_DONE: return "done";
	default: return "none";
	}
}

static void fill(vmm_progress *out, vmm_progress_phase ph)
{
	uint64_t d = atomic_load(&done), e = atomic_load(&expected), p = atomic_load(&planned);
	double t0 = atomic_load(&began_s), c0 = atomic_load(&copy_began_s), now = vmm_now_s();

	out->sleeping = atomic_load(&sleeping);
	out->phase = ph;
	out->bytes_done = d;
	out->bytes_total = p > e ? p : e;
	if (out->bytes_total < d)
		out->bytes_total = d;
	out->seconds = t0 > 0 ? now - t0 : 0;
	out->copy_seconds = c0 > 0 ? now - c0 : 0;
}

bool vmm_progress_get(vmm_progress *out)
{
	vmm_progress_phase ph = (vmm_progress_phase)atomic_load(&phase);

	memset(out, 0, sizeof(*out));
	if (ph == VMM_PHASE_NONE || ph == VMM_PHASE_DONE)
		return false;
	fill(out, ph);
	return true;
}

/* Tell the callback (force: whatever the interval). Copies may run on several threads: one call
 * at a time, and a call that is not forced is skipped rather than waited for. */
static void notify(vmm_progress_phase ph, bool force)
{
	vmm_progress p;
	double now;

	if (!atomic_load_explicit(&cb_set, memory_order_relaxed) || in_callback)
		return;
	now = vmm_now_s();
	if (pthread_rwlock_rdlock(&cb_lock))
		return;
	if (cb_fn && (force || now - atomic_load(&cb_last_s) >= cb_interval) &&
	    !(force ? pthread_mutex_lock(&cb_call_lock) : pthread_mutex_trylock(&cb_call_lock))) {
		atomic_store(&cb_last_s, now);
		fill(&p, ph);
		in_callback = true;
		cb_fn(&p, cb_arg);
		in_callback = false;
		pthread_mutex_unlock(&cb_call_lock);
	}
	pthread_rwlock_unlock(&cb_lock);
}

void vmm_progress_begin(bool is_sleep, uint64_t bytes)
{
	atomic_store(&sleeping, is_sleep);
	atomic_store(&expected, bytes);
	atomic_store(&planned, 0);
	atomic_store(&done, 0);
	atomic_store(&copy_began_s, 0.0);
	atomic_store(&began_s, vmm_now_s());
	atomic_store(&phase, VMM_PHASE_PREPARING);
	notify(VMM_PHASE_PREPARING, true);
}

void vmm_progress_phase_set(vmm_progress_phase ph)
{
	vmm_progress_phase was = (vmm_progress_phase)atomic_load(&phase);

	if (was == VMM_PHASE_NONE || was == VMM_PHASE_DONE || was == ph ||
	    was == VMM_PHASE_ROLLING_BACK)
		return; /* no operation, or a roll-back stays one until the end */
	if (ph == VMM_PHASE_COPYING && atomic_load(&copy_began_s) == 0)
		atomic_store(&copy_began_s, vmm_now_s());
	atomic_store(&phase, ph);
	notify(ph, true);
}

void vmm_progress_end(const vmm_transfer_result *res)
{
	vmm_progress_phase was = (vmm_progress_phase)atomic_load(&phase);
	bool is_sleep = atomic_load(&sleeping);
	double secs = vmm_now_s() - atomic_load(&began_s);

	if (was == VMM_PHASE_NONE || was == VMM_PHASE_DONE)
		return;
	pthread_mutex_lock(&counters_lock);
	if (!res) {
		counters.failures++;
	} else if (res->already) {
		/* nothing changed: not a sleep or wake that happened */
	} else if (is_sleep) {
		counters.sleeps++;
		counters.bytes_out += res->bytes_copied;
		counters.sleep_seconds += secs;
	} else {
		counters.wakes++;
		counters.bytes_in += res->bytes_copied;
		counters.wake_seconds += secs;
	}
	pthread_mutex_unlock(&counters_lock);
	/* The last word: what was copied is all there was to copy. */
	if (res)
		atomic_store(&expected, atomic_load(&done));
	atomic_store(&planned, res ? atomic_load(&done) : atomic_load(&planned));
	atomic_store(&phase, VMM_PHASE_DONE);
	notify(VMM_PHASE_DONE, true);
}

void vmm_progress_plan(uint64_t bytes)
{
	vmm_progress_phase ph = (vmm_progress_phase)atomic_load(&phase);

	if (ph == VMM_PHASE_NONE || ph == VMM_PHASE_DONE)
		return;
	atomic_fetch_add(&planned, bytes);
	vmm_progress_phase_set(VMM_PHASE_COPYING);
}

void vmm_progress_advance(uint64_t bytes)
{
	vmm_progress_phase ph = (vmm_progress_phase)atomic_load(&phase);

	if (ph == VMM_PHASE_NONE || ph == VMM_PHASE_DONE)
		return;
	atomic_fetch_add(&done, bytes);
	notify(ph, false);
}

void vmm_progress_counters(vmm_offload_counters *out)
{
	pthread_mutex_lock(&counters_lock);
	*out = counters;
	pthread_mutex_unlock(&counters_lock);
}

bool vmm_progress_in_callback(void)
{
	return in_callback;
}

vmm_status vmm_progress_set_callback(vmm_progress_fn fn, void *arg, double interval_s,
				     vmm_error *err)
{
	if (in_callback)
		return vmm_fail(err, VMM_E_BUSY, 0,
				"the progress callback cannot be replaced from inside itself");
	if (!(interval_s >= 0) || interval_s > 3600)
		return vmm_fail(err, VMM_E_INVALID, 0,
				"progress interval %g s is not 0..3600", interval_s);
	pthread_rwlock_wrlock(&cb_lock);
	cb_fn = fn;
	cb_arg = arg;
	cb_interval = interval_s;
	atomic_store(&cb_set, fn != NULL);
	pthread_rwlock_unlock(&cb_lock);
	return VMM_OK;
}
