/* The process-wide runtime (runtime.h): the sides' state, created on the first device allocation
 * by whichever thread gets there first. What starts with a side and what ends at exit or in a
 * forked child is lifecycle.c's, which calls in here; nothing here calls up into the control
 * server or GPU sharing.
 *
 * Nothing here runs before the first device allocation: no constructor, no thread, no file. */
#include "runtime.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../core/backend/backend.h"
#include "../core/log.h"
#include "../core/mono_wait.h"
#include "../core/offload/transfer.h"
#include "alloc_trace.h"
#include "lone_stream.h"
#include "shim_internal.h"
#include "submit_count.h"

enum side_state { SIDE_UNTRIED = 0, SIDE_READY, SIDE_UNAVAILABLE };

/* What differs between the sides, as data: here what creating one needs, in rt.side what the
 * rest of the shim reads (runtime.h). */
static const struct side_kind {
	const char *label;   /* in the log: "CUDA", "ACL" */
	const char *driver;  /* in the log: what could not be loaded */
	vmm_status (*open)(vmm_backend **out, vmm_error *err);
	bool track_app;      /* the hooks see the program's own VMM calls (hooks_vmm.c) */
	/* the backend's count of the program's submissions: the CUDA hooks count them
	 * (hooks_submit.c); the ACL hooks do not, so its heap always synchronizes */
	uint64_t (*submitted)(vmm_backend *be);
} kinds[SHIM_NSIDES] = {
	[SHIM_CUDA] = { "CUDA", "CUDA driver", vmm_backend_cuda_open, true, submit_count_read },
	[SHIM_ACL] = { "ACL", "ACL runtime", vmm_backend_acl_open, false, NULL },
};

static shim_runtime rt = {
	.side = { [SHIM_CUDA] = { .name = "cuda", .device_prefix = "", .legacy_ipc = true },
		  [SHIM_ACL] = { .name = "acl", .device_prefix = "acl:" } },
};
static atomic_int side_state[SHIM_NSIDES];
static atomic_bool forked_child;
static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;
static bool cfg_loaded;
/* The thread creating the runtime: its own nested hooks (a driver constructor allocating) pass
 * through instead of waiting for themselves. */
static _Thread_local bool creating;
static _Thread_local const char *thread_tag;

#define PASS_MEMBER(field, status) atomic_ullong field;
static struct {
	SHIM_PASSTHROUGH_STATS(PASS_MEMBER)
} pass;
#undef PASS_MEMBER

static void log_side(const shim_side *s)
{
	vmm_stats st;

	if (!s->core || !vmm_log_enabled(VMM_LOG_INFO) ||
	    vmm_stats_get(s->core, -1, NULL, &st, NULL))
		return;
	/* The driver work and waits behind those allocations, so that two runs of a program (an
	 * A/B of a heap setting) can be told apart without a debug log. */
	vmm_log(VMM_LOG_INFO,
		"exit: %s served %llu allocations (%llu frees), peak %llu bytes live / %llu mapped; "
		"live at exit: %llu bytes in %llu allocations; %llu handles created, %llu released, "
		"%llu moved, %llu cut (%llu avoided), %llu pieces given back (%llu before a sync); "
		"%llu device syncs (%llu ahead, %llu skipped); cuts' rests refilled: %llu pieces on "
		"the shim's thread, %llu by a request placed on them",
		s->name, (unsigned long long)st.alloc_calls, (unsigned long long)st.free_calls,
		(unsigned long long)st.peak_live_bytes, (unsigned long long)st.peak_mapped_bytes,
		(unsigned long long)st.live_bytes, (unsigned long long)st.live_count,
		(unsigned long long)st.handles_created, (unsigned long long)st.handles_released,
		(unsigned long long)st.handles_moved, (unsigned long long)st.handles_cut,
		(unsigned long long)st.cuts_avoided, (unsigned long long)st.pieces_given_back,
		(unsigned long long)st.pieces_given_back_early, (unsigned long long)st.syncs,
		(unsigned long long)st.syncs_ahead, (unsigned long long)st.syncs_skipped,
		(unsigned long long)st.pieces_refilled, (unsigned long long)st.pieces_refill_claimed);
}

/* At exit a device may never finish its work (a collective whose peer died or was stopped, a
 * kernel spinning on a flag): the exit's trim would synchronize it for good (for the quarantine),
 * and releasing memory under kernels still running faults them. So that synchronization waits
 * EXIT_DRAIN_S at most; past that the core is left as it is, and the driver frees its memory
 * with the process. The heaps' locks are waited for within EXIT_LOCK_MS the same way (bounded
 * reads: an allocator waiting for its device holds one). */
#define EXIT_DRAIN_S 2.0
#define EXIT_LOCK_MS 1000

static void destroy_side(shim_side *s)
{
	if (s->app) {
		vmm_app_registry_destroy(s->app);
		s->app = NULL;
	}
	if (s->core) {
		vmm_limits lim = { .deadline = vmm_now_s() + EXIT_DRAIN_S, .drain_s = EXIT_DRAIN_S };
		vmm_error err;

		vmm_error_clear(&err);
		if (vmm_trim_within(s->core, -1, &lim, &err) == VMM_E_BUSY) {
			vmm_log(VMM_LOG_WARN, "exit: %s: %s; its memory is left to the driver, which "
				"frees it with the process", s->name, err.msg);
			return; /* the core and the backend stay to the end of the process */
		}
		if (!vmm_core_destroy(s->core))
			return; /* a thread of it is still in the driver: the backend stays open */
		s->core = NULL;
	}
	if (s->be) {
		s->be->close(s->be);
		s->be = NULL;
	}
}

void shim_runtime_teardown(bool quiet)
{
	shim_passthrough_stats ps;

	pthread_mutex_lock(&create_lock);
	/* Hooks that run after this (other exit handlers freeing memory) pass through. */
	for (int i = 0; i < SHIM_NSIDES; i++)
		atomic_store(&side_state[i], SIDE_UNAVAILABLE);
	vmm_bounded_reads_begin(EXIT_LOCK_MS);
	if (quiet) /* the statistics take the heaps' locks, which the operation may hold */
		for (int i = 0; i < SHIM_NSIDES; i++)
			log_side(&rt.side[i]);
	shim_passthrough_stats_get(&ps);
	vmm_log(VMM_LOG_INFO, "exit: passed through %llu device allocations (%llu bytes), "
		"%llu managed, %llu host, %llu arrays, %llu acl",
		(unsigned long long)ps.device_allocs, (unsigned long long)ps.device_bytes,
		(unsigned long long)ps.managed_allocs, (unsigned long long)ps.host_allocs,
		(unsigned long long)ps.array_allocs, (unsigned long long)ps.acl_allocs);
	if (quiet)
		for (int i = 0; i < SHIM_NSIDES; i++)
			destroy_side(&rt.side[i]);
	vmm_bounded_reads_end();
	pthread_mutex_unlock(&create_lock);
}

shim_runtime *shim_runtime_mark_forked(void)
{
	atomic_store(&forked_child, true);
	pthread_mutex_init(&create_lock, NULL);
	return &rt;
}

void shim_runtime_sides_after_fork(void)
{
	for (int i = 0; i < SHIM_NSIDES; i++) {
		vmm_core_after_fork(rt.side[i].core);
		vmm_app_share_after_fork(rt.side[i].app);
	}
}

static void load_config_locked(void)
{
	if (!cfg_loaded) {
		shim_config_load(&rt.cfg);
		cfg_loaded = true;
	}
}

static const char *describe_size(size_t v, char *buf, size_t n)
{
	if (v == SIZE_MAX)
		return "unlimited";
	snprintf(buf, n, "%zu bytes", v);
	return buf;
}

/* Open side id's backend, its heap and (where tracked) its registry of the program's own VMM
 * mappings; returns the side's new state. */
static int create_side_locked(int id)
{
	const struct side_kind *k = &kinds[id];
	shim_side *s = &rt.side[id];
	char limit[32];
	vmm_error err;

	load_config_locked();
	if (rt.cfg.disable)
		return SIDE_UNAVAILABLE;
	vmm_error_clear(&err);
	if (k->open(&s->be, &err)) {
		vmm_log(VMM_LOG_INFO, "%s not usable, passing through: %s", k->driver, err.msg);
		return SIDE_UNAVAILABLE;
	}
	s->be->submitted = k->submitted;
	if (id == SHIM_CUDA && !rt.cfg.lone_stream)
		lone_stream_disable();
	if (vmm_core_create(s->be, &rt.cfg.core, &s->core, &err)) {
		vmm_log(VMM_LOG_WARN, "cannot create the %s heap, passing through: %s", k->label,
			err.msg);
		s->be->close(s->be);
		s->be = NULL;
		return SIDE_UNAVAILABLE;
	}
	alloc_trace_open(rt.cfg.alloc_trace);
	if (!k->track_app) {
		vmm_log(VMM_LOG_INFO, "serving %s device memory", k->label);
		return SIDE_READY;
	}
	if (vmm_app_registry_create(s->be, &s->app, &err)) {
		vmm_log(VMM_LOG_WARN, "the program's own VMM mappings will not be tracked: %s",
			err.msg);
		s->app = NULL;
	}
	vmm_log(VMM_LOG_INFO, "serving %s device memory (cache limit %s, max handle %zu bytes); "
		"the program's own VMM calls are %s", k->label,
		describe_size(rt.cfg.core.cache_limit, limit, sizeof(limit)),
		rt.cfg.core.max_handle_bytes, s->app ? "tracked" : "not tracked");
	return SIDE_READY;
}

shim_runtime *shim_runtime_side(enum shim_side_id id, shim_side_ready_fn on_ready)
{
	atomic_int *state = &side_state[id];
	int st = atomic_load_explicit(state, memory_order_acquire);

	if (st == SIDE_READY)
		return atomic_load_explicit(&forked_child, memory_order_relaxed) ? NULL : &rt;
	if (st == SIDE_UNAVAILABLE || creating || atomic_load(&forked_child))
		return NULL;
	pthread_mutex_lock(&create_lock);
	st = atomic_load(state);
	if (st == SIDE_UNTRIED) {
		creating = true;
		st = create_side_locked(id);
		creating = false;
		if (st == SIDE_READY && on_ready)
			on_ready(&rt, id);
		atomic_store_explicit(state, st, memory_order_release);
	}
	pthread_mutex_unlock(&create_lock);
	return st == SIDE_READY ? &rt : NULL;
}

shim_runtime *shim_runtime_peek(void)
{
	if (atomic_load_explicit(&forked_child, memory_order_relaxed))
		return NULL;
	for (int i = 0; i < SHIM_NSIDES; i++)
		if (atomic_load_explicit(&side_state[i], memory_order_acquire) == SIDE_READY)
			return &rt;
	return NULL;
}

bool shim_in_forked_child(void)
{
	return atomic_load_explicit(&forked_child, memory_order_relaxed);
}

void shim_count_passthrough(enum shim_pass_kind kind, size_t bytes)
{
	switch (kind) {
	case PASS_DEVICE:
		atomic_fetch_add(&pass.device_allocs, 1);
		atomic_fetch_add(&pass.device_bytes, bytes);
		break;
	case PASS_DEVICE_FREE:
		atomic_fetch_add(&pass.device_frees, 1);
		break;
	case PASS_MANAGED:
		atomic_fetch_add(&pass.managed_allocs, 1);
		atomic_fetch_add(&pass.managed_bytes, bytes);
		break;
	case PASS_HOST:
		atomic_fetch_add(&pass.host_allocs, 1);
		atomic_fetch_add(&pass.host_bytes, bytes);
		break;
	case PASS_ARRAY:
		atomic_fetch_add(&pass.array_allocs, 1);
		break;
	case PASS_ACL:
		atomic_fetch_add(&pass.acl_allocs, 1);
		atomic_fetch_add(&pass.acl_bytes, bytes);
		break;
	case PASS_ACL_FREE:
		atomic_fetch_add(&pass.acl_frees, 1);
		break;
	}
}

void shim_passthrough_stats_get(shim_passthrough_stats *out)
{
#define PASS_LOAD(field, status) out->field = atomic_load(&pass.field);
	SHIM_PASSTHROUGH_STATS(PASS_LOAD)
#undef PASS_LOAD
}

void shim_set_thread_tag(const char *tag)
{
	thread_tag = tag;
}

const char *shim_thread_tag(void)
{
	return thread_tag;
}
