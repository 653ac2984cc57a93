/* The contexts the program creates and destroys (cuCtxCreate_v2/_v3/_v4, cuCtxDestroy_v2), told
 * to the backend's context list (backend.h) so that a sleep, and the reuse of freed memory, wait
 * for their work too: no driver call lists a process's contexts, and synchronizing one context
 * leaves the others running. Destroyed contexts and streams (and reset or released primary
 * contexts) are also told to lone-stream ordering (lone_stream.h), whose stream and event they
 * may hold. Recorded even before the runtime exists (a program usually creates
 * its context before its first allocation). Primary and green contexts need no list: the
 * backend synchronizes the primary context, and that covers the device's green contexts. A
 * reset or the last release of a primary context frees the program's memory there, as natively
 * (below). */
#include <stdatomic.h>
#include <stdint.h>

#include "../core/backend/backend.h"
#include "../core/backend/contexts.h"
#include "../core/log.h"
#include "alloc_trace.h"
#include "control/control.h"
#include "hooks_common.h"
#include "lone_stream.h"
#include "share/share.h"

/* List a context the driver just made; a context that cannot be listed (no host memory) would
 * not be drained by a sleep, so it is destroyed again and the creation fails. */
static CUresult created(CUresult r, CUcontext *pctx, CUdevice dev)
{
	if (r != CUDA_SUCCESS || !pctx || !*pctx)
		return r;
	if (vmm_context_created(VMM_CTX_CUDA, *pctx, (int)dev) == 0)
		return r;
	vmm_log(VMM_LOG_ERROR, "no host memory to record a new context: its creation is refused");
	CALL_REAL(cuCtxDestroy_v2, (*pctx));
	*pctx = NULL;
	return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return created(CALL_REAL(cuCtxCreate_v2, (pctx, flags, dev)), pctx, dev);
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
				unsigned int flags, CUdevice dev)
{
	return created(CALL_REAL(cuCtxCreate_v3, (pctx, paramsArray, numParams, flags, dev)), pctx,
		       dev);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
				unsigned int flags, CUdevice dev)
{
	return created(CALL_REAL(cuCtxCreate_v4, (pctx, ctxCreateParams, flags, dev)), pctx, dev);
}

/* A synchronization in progress on ctx finishes first; one that starts meanwhile waits for the
 * destroy instead of naming a context that is going away. */
CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
	CUresult r;

	lone_stream_context_ends("the destruction of a context");
	vmm_context_destroy_begin(VMM_CTX_CUDA, ctx);
	r = CALL_REAL(cuCtxDestroy_v2, (ctx));
	vmm_context_destroy_end(VMM_CTX_CUDA, ctx, r == CUDA_SUCCESS);
	return r;
}

/* How long a reset waits for a sleep or wake in progress before it goes on beside it. */
#define RESET_WAIT_MS 30000
/* How long a release that leaves the context active waits: long enough for a brief look at the
 * state to end, not for a sleep or wake (which uses the context: the release then leaves it be)
 * nor for a status look that waits for the heaps' figures (seconds, control/dispatch.c). */
#define RELEASE_WAIT_MS 50
/* How long it tries again once it has marked the device: the holder may have let go in between,
 * before it looked at the marks. */
#define RELEASE_RETRY_MS 5

struct reset_call {
	CUdevice dev;
	CUresult (*real)(CUdevice dev); /* the form the program called (_v2 or the old one) */
};

static int real_reset(void *arg)
{
	struct reset_call *c = arg;

	return c->real ? (int)c->real(c->dev) : (int)CUDA_ERROR_NOT_FOUND;
}

/* The reset freed an allocation: VMMSHIM_ALLOC_TRACE records it as a free of the program's. */
static void trace_reset_free(vmm_devptr base)
{
	alloc_trace_free(base, false);
}

static bool release_check_later(CUdevice dev);
static void release_check_clear(CUdevice dev);

/* The end of a primary context's life (a reset, its last release): reset(arg) ends it, or it has
 * ended already. The driver frees the context's allocations, but the shim's memory is made with
 * the virtual-memory API and outlives it (tests/gpu/PROBE.md (j)): the core frees the program's
 * allocations itself, and the legacy IPC handles the program opened there are closed (their
 * mappings are the virtual-memory API's too), unless the program made contexts of its own on the
 * device (their allocations outlive it natively, and the core cannot tell them apart). The
 * core's own streams, staging buffers and pins went with the context; no sleep or wake runs
 * meanwhile. what: "a reset of", "the last release of". A sleep or wake in progress is waited
 * for up to RESET_WAIT_MS, then the end goes on beside it; a possible end (leave_if_busy: a
 * release that may not be the last) waits RELEASE_WAIT_MS only, then leaves the device to be
 * looked at again once whatever holds the control plane lets go (release_check_later). */
static CUresult primary_gone(CUdevice dev, int (*reset)(void *arg), void *arg, const char *what,
			     bool leave_if_busy)
{
	int wait_ms = leave_if_busy ? RELEASE_WAIT_MS : RESET_WAIT_MS;
	vmm_core *core = hook_cuda_core();
	bool exclusive, own;
	int closed;
	CUresult r;

	if (!core)
		return (CUresult)reset(arg);
	exclusive = control_exclusive_begin(wait_ms);
	if (!exclusive && leave_if_busy) {
		if (!release_check_later(dev))
			return CUDA_SUCCESS; /* no device to mark (out of the mask's range) */
		/* Marked first, then tried again: a holder that let go before the mark had already
		 * looked at the marks; one that lets go after it looks at this one. */
		if (!control_exclusive_begin(RELEASE_RETRY_MS)) {
			vmm_log(VMM_LOG_INFO, "%s device %d's primary context leaves it to the sleep, "
				"wake or status look in progress: looked at again once that one ends",
				what, (int)dev);
			return CUDA_SUCCESS;
		}
		release_check_clear(dev);
		exclusive = true;
	}
	if (!exclusive)
		vmm_log(VMM_LOG_WARN, "%s device %d's primary context waited %d ms for a sleep or "
			"wake in progress and goes on beside it", what, (int)dev, wait_ms);
	own = ctx_list_count(vmm_program_contexts(VMM_CTX_CUDA), (int)dev) > 0;
	r = (CUresult)vmm_device_reset(core, (int)dev, !own, reset, arg, trace_reset_free);
	if (r == CUDA_SUCCESS && own)
		vmm_log(VMM_LOG_INFO, "%s device %d's primary context leaves the program's "
			"allocations there allocated: it has contexts of its own on the device",
			what, (int)dev);
	if (r == CUDA_SUCCESS && !own && (closed = hook_ipc_close_device((int)dev)))
		vmm_log(VMM_LOG_INFO, "device %d: %s its primary context closed %d legacy IPC "
			"handles the program had opened, as the driver does", (int)dev, what, closed);
	if (exclusive)
		control_exclusive_end();
	if (r == CUDA_SUCCESS && !own)
		share_note_freed(); /* a sharing process waiting for memory looks again */
	return r;
}

/* cudaDeviceReset, cuDevicePrimaryCtxReset: lone-stream ordering waits for its last work first,
 * while the context can still be waited for. */
static CUresult primary_reset(CUdevice dev, CUresult (*real)(CUdevice dev))
{
	struct reset_call call = { dev, real };

	lone_stream_context_ends("a reset of a primary context");
	return primary_gone(dev, real_reset, &call, "a reset of", false);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	return primary_reset(dev, REAL(cuDevicePrimaryCtxReset_v2));
}

/* The pre-11.0 form: the CUDA runtime may reach a reset through it (cuGetProcAddress for an old
 * version), and it frees as much. */
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
	return primary_reset(dev, REAL(cuDevicePrimaryCtxReset));
}

DRIVER_EXTRA_SLOT(cuDevicePrimaryCtxGetState);

/* The context went already: the reset's work without the reset. */
static int already_gone(void *arg)
{
	(void)arg;
	return 0;
}

/* The core's own retain of the context (made for a thread with no context) was all that kept it:
 * let go of that too, and the context ends (0); else nothing changed. */
struct own_retain {
	vmm_backend *be;
	CUdevice dev;
};

static int own_retain_was_last(void *arg)
{
	struct own_retain *o = arg;

	return o->be->release_own_context(o->be, (int)o->dev) == 0 ? 0 : 1;
}

/* The program's release left the context active: was it the program's last all the same, the
 * core's own retain being what keeps it? leave_if_busy as primary_gone's. */
static void own_retain_check(vmm_backend *be, CUdevice dev)
{
	primary_gone(dev, own_retain_was_last, &(struct own_retain){ be, dev }, "the last release of",
		     true);
}

/* The last release of a primary context destroys it (CUDA's documentation; inactive afterwards on
 * the H100): natively its allocations go with it, and so do the shim's streams and the host
 * backups' registrations made there. So it is a reset that has already happened. When the
 * context stays active, the core's own retain may be what keeps it (a sleep from the control
 * server, the heap's syncs ahead): the program's release was its last all the same, and the core
 * lets go of its retain to see (own_retain_was_last), unless a sleep or wake is using it: a
 * release that is not the last must not wait for one (most are not; natively none waits). */
static CUresult primary_release(CUdevice dev, CUresult (*real)(CUdevice dev))
{
	__typeof__(&cuDevicePrimaryCtxGetState) state = DRIVER_EXTRA(cuDevicePrimaryCtxGetState);
	vmm_core *core = hook_cuda_core();
	vmm_backend *be = core ? vmm_core_backend(core) : NULL;
	unsigned int flags = 0;
	int active = 1;
	CUresult r;

	lone_stream_context_ends("a release of a primary context");
	r = real ? real(dev) : CUDA_ERROR_NOT_FOUND;
	if (r != CUDA_SUCCESS || !state || state(dev, &flags, &active) != CUDA_SUCCESS)
		return r;
	if (!active)
		primary_gone(dev, already_gone, NULL, "the last release of", false);
	else if (be && be->release_own_context)
		own_retain_check(be, dev);
	return r;
}

/* Devices whose primary context a release left to the sleep, wake or status look in progress
 * (bit per device): once that one has let go of the control plane and nothing of the device is
 * asleep, the core lets go of its own retain to see whether the program's release was the last,
 * as primary_release would have. Left for later while the device sleeps: ending the context then
 * would free allocations whose contents are on the host (the wake looks again). Left for later
 * too while the allocator waits for its device with its heap held (release_after_wait): that
 * allocation's return looks again (context_release_after_alloc), so the look does not wait for
 * another holder of the control plane, which may never come. */
static _Atomic uint64_t release_pending, release_after_wait;
#define PENDING_DEVICES 64 /* the masks' bits */

static void release_check_devices(uint64_t devices)
{
	vmm_core *core = hook_cuda_core();
	vmm_backend *be = core ? vmm_core_backend(core) : NULL;

	for (int d = 0; devices && d < PENDING_DEVICES; d++) {
		if (!(devices & (1ull << d)))
			continue;
		devices &= ~(1ull << d);
		if (!be || !be->release_own_context)
			continue;
		if (vmm_is_asleep(core, d, NULL)) {
			release_check_later((CUdevice)d);
			continue;
		}
		/* Ending the context now would wait for the allocator too, on a thread of the
		 * control server's maybe, for as long as the device's queue. */
		if (vmm_lock_wait_ms(core) > 0) {
			release_check_later((CUdevice)d);
			atomic_fetch_or(&release_after_wait, 1ull << d);
			continue;
		}
		own_retain_check(be, (CUdevice)d);
	}
}

static void release_check_pending(void)
{
	release_check_devices(atomic_exchange(&release_pending, 0));
}

void context_release_after_alloc(void)
{
	vmm_core *core;
	uint64_t devices;

	if (!atomic_load_explicit(&release_after_wait, memory_order_relaxed))
		return;
	core = hook_cuda_core();
	if (core && vmm_lock_wait_ms(core) > 0)
		return; /* another allocation still waits: its return looks */
	devices = atomic_exchange(&release_after_wait, 0);
	atomic_fetch_and(&release_pending, ~devices);
	release_check_devices(devices);
}

/* false: the device is out of the mask's range (not marked). */
static bool release_check_later(CUdevice dev)
{
	if (dev < 0 || dev >= PENDING_DEVICES)
		return false;
	control_set_when_unlocked(release_check_pending);
	atomic_fetch_or(&release_pending, 1ull << dev);
	return true;
}

static void release_check_clear(CUdevice dev)
{
	atomic_fetch_and(&release_pending, ~(1ull << dev));
	atomic_fetch_and(&release_after_wait, ~(1ull << dev));
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	return primary_release(dev, REAL(cuDevicePrimaryCtxRelease_v2));
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return primary_release(dev, REAL(cuDevicePrimaryCtxRelease));
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
	lone_stream_forget(hStream);
	return CALL_REAL(cuStreamDestroy_v2, (hStream));
}
