/* Lone-stream ordering (lone_stream.h). The state moves one way: UNSET -> ON -> JOINING -> OFF
 * (or straight to OFF). The state is read without the lock on every submission; every change,
 * and every join, happens under the lock; host waits for the event happen outside it. */
#include "lone_stream.h"

#include <pthread.h>
#include <stdatomic.h>

#include "../core/log.h"
#include "config.h"
#include "hooks_common.h"

DRIVER_EXTRA_SLOT(cuCtxGetCurrent);
DRIVER_EXTRA_SLOT(cuCtxPushCurrent_v2);
DRIVER_EXTRA_SLOT(cuCtxPopCurrent_v2);
DRIVER_EXTRA_SLOT(cuStreamGetCtx);
DRIVER_EXTRA_SLOT(cuStreamSynchronize);
DRIVER_EXTRA_SLOT(cuStreamWaitEvent);
DRIVER_EXTRA_SLOT(cuEventCreate);
DRIVER_EXTRA_SLOT(cuEventRecord);
DRIVER_EXTRA_SLOT(cuEventQuery);
DRIVER_EXTRA_SLOT(cuEventSynchronize);
DRIVER_EXTRA_SLOT(cuEventDestroy_v2);

enum { LONE_UNSET, LONE_ON, LONE_JOINING, LONE_OFF };

/* S's handle once S was destroyed: no stream's handle, so that a new stream given S's old
 * address is joined like any other. */
#define GONE_HANDLE ((CUstream)(~(uintptr_t)0 - 1))

static pthread_mutex_t lone_lock = PTHREAD_MUTEX_INITIALIZER;
/* Sequentially consistent: a free that read ON must come before the store that ends lone mode,
 * hence before the event recorded after that store (see end_lone). */
static _Atomic int state = LONE_UNSET;
static _Atomic(CUstream) lone_handle; /* S when the program made it; NULL for a default stream */
static _Atomic(CUcontext) lone_ctx;   /* S's context */
static _Atomic(vmm_stream) lone_key;
static CUevent join_event;            /* recorded on S when lone mode ended (lock held) */

enum target_kind { T_HANDLE, T_LEGACY, T_PER_THREAD, T_UNKNOWN };

struct target {
	enum target_kind kind;
	CUstream h;     /* T_HANDLE */
	CUcontext ctx;  /* T_LEGACY: the calling thread's current context */
};

static void resolve(CUstream s, bool per_thread, struct target *t)
{
	t->h = s;
	t->ctx = NULL;
	if (s == SUBMIT_STREAM_UNKNOWN) {
		t->kind = T_UNKNOWN;
	} else if (s == CU_STREAM_PER_THREAD || (!s && per_thread)) {
		t->kind = T_PER_THREAD;
	} else if (!s || s == CU_STREAM_LEGACY) {
		t->kind = T_LEGACY;
		if (!DRIVER_EXTRA(cuCtxGetCurrent) ||
		    DRIVER_EXTRA(cuCtxGetCurrent)(&t->ctx) != CUDA_SUCCESS)
			t->ctx = NULL;
	} else {
		t->kind = T_HANDLE;
	}
}

static bool is_lone(const struct target *t)
{
	CUstream h = atomic_load_explicit(&lone_handle, memory_order_relaxed);

	if (t->kind == T_HANDLE)
		return t->h == h;
	return t->kind == T_LEGACY && !h &&
	       t->ctx == atomic_load_explicit(&lone_ctx, memory_order_relaxed);
}

/* Run fn with S's context current (events and default streams belong to a context). */
static CUresult in_lone_ctx(CUresult (*fn)(void *), void *arg)
{
	CUcontext popped;
	CUresult r;

	if (!DRIVER_EXTRA(cuCtxPushCurrent_v2) || !DRIVER_EXTRA(cuCtxPopCurrent_v2))
		return CUDA_ERROR_NOT_FOUND;
	r = DRIVER_EXTRA(cuCtxPushCurrent_v2)(atomic_load(&lone_ctx));
	if (r != CUDA_SUCCESS)
		return r;
	r = fn(arg);
	DRIVER_EXTRA(cuCtxPopCurrent_v2)(&popped);
	return r;
}

static CUstream lone_stream(void)
{
	CUstream h = atomic_load(&lone_handle);

	return h == GONE_HANDLE ? NULL : h;
}

static CUresult record_join_event(void *arg)
{
	CUresult r;

	(void)arg;
	if (!DRIVER_EXTRA(cuEventCreate) || !DRIVER_EXTRA(cuEventRecord))
		return CUDA_ERROR_NOT_FOUND;
	r = DRIVER_EXTRA(cuEventCreate)(&join_event, CU_EVENT_DISABLE_TIMING);
	if (r != CUDA_SUCCESS) {
		join_event = NULL;
		return r;
	}
	r = DRIVER_EXTRA(cuEventRecord)(join_event, lone_stream());
	if (r != CUDA_SUCCESS && DRIVER_EXTRA(cuEventDestroy_v2)) {
		DRIVER_EXTRA(cuEventDestroy_v2)(join_event);
		join_event = NULL;
	}
	return r;
}

static CUresult sync_lone_stream(void *arg)
{
	(void)arg;
	if (!DRIVER_EXTRA(cuStreamSynchronize))
		return CUDA_ERROR_NOT_FOUND;
	return DRIVER_EXTRA(cuStreamSynchronize)(lone_stream());
}

/* The event has completed (or can no longer be waited for): plain rules from now on. The event
 * itself is kept: a thread may still be waiting for it outside the lock (one per process). */
static void finish(void)
{
	join_event = NULL;
	atomic_store(&state, LONE_OFF);
}

/* Wait on the host for the event, without the lock (the lone stream's queued work may wait for
 * work another thread is about to submit), then finish. Lock held on entry and on return. */
static void wait_and_finish(void)
{
	CUevent e = join_event;
	CUresult r = CUDA_SUCCESS;

	pthread_mutex_unlock(&lone_lock);
	if (e && DRIVER_EXTRA(cuEventSynchronize))
		r = DRIVER_EXTRA(cuEventSynchronize)(e);
	pthread_mutex_lock(&lone_lock);
	if (r != CUDA_SUCCESS)
		vmm_log(VMM_LOG_WARN, "lone stream: waiting for its last work failed (CUresult %d)",
			(int)r);
	finish();
}

/* ON -> JOINING (lock held). The store comes before the record: whatever a free or an
 * allocation did while it still read ON was submitted before the event. */
static void end_lone(const char *why)
{
	CUresult r;

	atomic_store(&state, LONE_JOINING);
	r = in_lone_ctx(record_join_event, NULL);
	vmm_log(VMM_LOG_INFO, "lone stream: ends at %s; later streams wait for its work so far", why);
	if (r == CUDA_SUCCESS)
		return;
	/* No event: the stream itself is waited for, once. */
	r = in_lone_ctx(sync_lone_stream, NULL);
	if (r != CUDA_SUCCESS)
		vmm_log(VMM_LOG_WARN, "lone stream: could neither record nor wait for its work "
			"(CUresult %d)", (int)r);
	finish();
}

/* UNSET -> ON with t as S, or OFF when t cannot be S (lock held). */
static void start(const struct target *t)
{
	CUcontext ctx = t->ctx;

	if (shim_config_disabled() || (t->kind != T_HANDLE && t->kind != T_LEGACY) ||
	    (t->kind == T_HANDLE &&
	     (!DRIVER_EXTRA(cuStreamGetCtx) ||
	      DRIVER_EXTRA(cuStreamGetCtx)(t->h, &ctx) != CUDA_SUCCESS || !ctx))) {
		atomic_store(&state, LONE_OFF);
		return;
	}
	atomic_store(&lone_handle, t->kind == T_HANDLE ? t->h : NULL);
	atomic_store(&lone_ctx, ctx);
	atomic_store(&lone_key, t->kind == T_HANDLE ? (vmm_stream)t->h : (vmm_stream)ctx);
	atomic_store(&state, LONE_ON);
	vmm_log(VMM_LOG_INFO, "lone stream: the first work goes to %s %p; frees are ordered on it",
		t->kind == T_HANDLE ? "stream" : "the default stream of context", t->kind == T_HANDLE ?
		(void *)t->h : (void *)ctx);
}

/* T waits for the event on the device; a stream that cannot be named, or a wait the driver
 * refuses, waits on the host instead (lock held, state JOINING). */
static void join(const struct target *t)
{
	CUstream w = t->kind == T_PER_THREAD ? CU_STREAM_PER_THREAD : t->h;
	CUresult r = CUDA_ERROR_NOT_FOUND;

	if (!join_event || !DRIVER_EXTRA(cuEventQuery)) {
		finish();
		return;
	}
	r = DRIVER_EXTRA(cuEventQuery)(join_event);
	if (r == CUDA_SUCCESS) {
		finish();
		return;
	}
	if (r == CUDA_ERROR_NOT_READY && t->kind != T_UNKNOWN && DRIVER_EXTRA(cuStreamWaitEvent) &&
	    DRIVER_EXTRA(cuStreamWaitEvent)(w, join_event, 0) == CUDA_SUCCESS)
		return;
	wait_and_finish();
}

void lone_stream_before_submit(CUstream s, bool per_thread, const char *what)
{
	int st = atomic_load(&state);
	struct target t;

	if (st == LONE_OFF)
		return;
	resolve(s, per_thread, &t);
	if (t.kind == T_LEGACY && !t.ctx)
		return; /* no context: the driver refuses the call, nothing is queued */
	if (st != LONE_UNSET && is_lone(&t))
		return;
	pthread_mutex_lock(&lone_lock);
	switch (atomic_load(&state)) {
	case LONE_UNSET:
		start(&t);
		break;
	case LONE_ON:
		if (is_lone(&t))
			break;
		end_lone(what);
		if (atomic_load(&state) == LONE_JOINING)
			join(&t);
		break;
	case LONE_JOINING:
		if (!is_lone(&t))
			join(&t);
		break;
	default:
		break;
	}
	pthread_mutex_unlock(&lone_lock);
}

bool lone_stream_key(vmm_stream *key)
{
	if (atomic_load(&state) != LONE_ON)
		return false;
	*key = atomic_load(&lone_key);
	return true;
}

void lone_stream_end_and_wait(const char *why)
{
	if (atomic_load(&state) == LONE_OFF)
		return;
	pthread_mutex_lock(&lone_lock);
	switch (atomic_load(&state)) {
	case LONE_ON:
		end_lone(why);
		if (atomic_load(&state) == LONE_JOINING)
			wait_and_finish();
		break;
	case LONE_JOINING:
		wait_and_finish();
		break;
	default:
		atomic_store(&state, LONE_OFF);
		break;
	}
	pthread_mutex_unlock(&lone_lock);
}

void lone_stream_context_ends(CUcontext ctx, int dev)
{
	CUcontext c = atomic_load(&lone_ctx);
	int st = atomic_load(&state), d;

	if ((st != LONE_ON && st != LONE_JOINING) || !c)
		return;
	if (ctx ? ctx != c : !hook_context_device(c, &d) || d != dev)
		return;
	lone_stream_end_and_wait(ctx ? "the destruction of its context" :
				       "a reset or release of its primary context");
}

void lone_stream_forget(CUstream s)
{
	if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD ||
	    atomic_load(&lone_handle) != s)
		return;
	pthread_mutex_lock(&lone_lock);
	if (atomic_load(&lone_handle) == s) {
		if (atomic_load(&state) == LONE_ON)
			end_lone("the destruction of the lone stream");
		atomic_store(&lone_handle, GONE_HANDLE);
	}
	pthread_mutex_unlock(&lone_lock);
}

/* Called before the heap exists: nothing was freed in the lone stream's order, so nothing needs
 * to be joined or waited for. */
void lone_stream_disable(void)
{
	pthread_mutex_lock(&lone_lock);
	finish();
	pthread_mutex_unlock(&lone_lock);
}
