/* This process's side of sharing: whether it takes part, its priority and rules, when it last
 * submitted device work (the idle rule), when it became resident (the time slice and the minimum
 * residency), who slept it and why, and how long it has waited for memory. Read by the control
 * server's info record, which is how the other sharing processes see it. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

#include "../../core/log.h"
#include "../../core/mono_wait.h"
#include "../gate.h"
#include "share_internal.h"

static atomic_bool on;
static share_settings settings;
static atomic_llong resident_since_ms;
static atomic_llong waiting_since_ms; /* 0: not waiting */
static atomic_llong waited_ms;        /* in total */
static atomic_llong looks;            /* rounds of making room, in total */
static atomic_llong looked_at;        /* processes those rounds asked, in total */
static atomic_llong slept_by_peers;   /* sleeps a sharing peer made of it, in total */
static atomic_int waiters;
static pthread_mutex_t slept_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	long by;                          /* 0: not slept by a peer */
	char why[PROTO_REASON_MAX];
	long long at_ms;
} slept;

void share_init(const shim_runtime *rt)
{
	const char *stall;

	if (!rt->cfg.share)
		return;
	settings.priority = rt->cfg.priority;
	settings.idle_ms = (long long)(rt->cfg.share_idle_s * 1000);
	settings.slice_ms = (long long)(rt->cfg.share_slice_s * 1000);
	settings.residency_ms = (long long)(rt->cfg.share_residency_s * 1000);
	settings.wait_ms = (long long)(rt->cfg.share_wait_s * 1000);
	snprintf(settings.run_dir, sizeof(settings.run_dir), "%s", rt->cfg.run_dir);
	/* Not a setting: a test widens a race window with it (0 to 10 s, else ignored). */
	stall = getenv("VMMSHIM_TEST_SHARE_STALL_MS");
	if (stall && atoll(stall) > 0 && atoll(stall) <= 10000)
		settings.test_stall_ms = atoll(stall);
	atomic_store(&resident_since_ms, vmm_now_ms());
	gate_track_entries(true);
	atomic_store(&on, true);
	vmm_log(VMM_LOG_INFO, "share: on, priority %d (idle %.1f s, slice %.1f s, residency %.1f s, "
		"wait %.1f s)", settings.priority, rt->cfg.share_idle_s, rt->cfg.share_slice_s,
		rt->cfg.share_residency_s, rt->cfg.share_wait_s);
}

bool share_enabled(void)
{
	return atomic_load_explicit(&on, memory_order_relaxed);
}

const share_settings *share_settings_get(void)
{
	return &settings;
}

void share_note_slept(long by_pid, const char *reason)
{
	if (by_pid > 0)
		atomic_fetch_add(&slept_by_peers, 1);
	pthread_mutex_lock(&slept_lock);
	slept.by = by_pid;
	snprintf(slept.why, sizeof(slept.why), "%s", reason);
	slept.at_ms = vmm_now_ms();
	pthread_mutex_unlock(&slept_lock);
}

void share_note_woken(void)
{
	pthread_mutex_lock(&slept_lock);
	slept.by = 0;
	slept.why[0] = '\0';
	pthread_mutex_unlock(&slept_lock);
	atomic_store(&resident_since_ms, vmm_now_ms());
}

void share_wait_begin(void)
{
	if (atomic_fetch_add(&waiters, 1) == 0)
		atomic_store(&waiting_since_ms, vmm_now_ms());
}

void share_wait_end(void)
{
	if (atomic_fetch_sub(&waiters, 1) == 1) {
		long long t0 = atomic_exchange(&waiting_since_ms, 0);

		if (t0)
			atomic_fetch_add(&waited_ms, vmm_now_ms() - t0);
	}
}

void share_note_look(void)
{
	atomic_fetch_add(&looks, 1);
}

void share_note_looked(int processes)
{
	atomic_fetch_add(&looked_at, processes);
}

void share_put_info(proto_writer *w)
{
	char gpus[PROTO_VALUE_MAX] = "", uuid[SHARE_UUID_MAX];
	long long now = vmm_now_ms(), waiting = atomic_load(&waiting_since_ms), by, at;
	char why[PROTO_REASON_MAX];
	size_t n = 0;
	int count = 0;
	shim_runtime *rt = shim_runtime_peek();
	vmm_backend *be = rt ? rt->side[SHIM_CUDA].be : NULL;

	proto_put_bool(w, "share", share_enabled());
	if (!share_enabled())
		return;
	if (be && !be->device_count(be, &count, NULL))
		for (int d = 0; d < count && d < VMM_MAX_DEVICES; d++)
			if (n < sizeof(gpus))
				n += (size_t)snprintf(gpus + n, sizeof(gpus) - n, "%s%s",
						      d ? "," : "",
						      share_gpu_uuid(d, uuid, sizeof(uuid)) ?
							      uuid : "?");
	pthread_mutex_lock(&slept_lock);
	by = slept.by;
	at = slept.at_ms;
	snprintf(why, sizeof(why), "%s", slept.why);
	pthread_mutex_unlock(&slept_lock);
	proto_put_int(w, "priority", settings.priority);
	proto_put_str(w, "gpus", gpus);
	proto_put_int(w, "idle_ms", gate_idle_ms());
	proto_put_int(w, "resident_ms", now - atomic_load(&resident_since_ms));
	proto_put_int(w, "slept_by", by);
	if (by) {
		proto_put_str(w, "slept_why", why);
		proto_put_int(w, "asleep_ms", now - at);
	}
	proto_put_bool(w, "waiting", waiting != 0);
	proto_put_int(w, "waited_ms", atomic_load(&waited_ms) + (waiting ? now - waiting : 0));
	proto_put_int(w, "looks", atomic_load(&looks));
	proto_put_int(w, "looked_at", atomic_load(&looked_at));
	proto_put_int(w, "slept_by_peers", atomic_load(&slept_by_peers));
}
