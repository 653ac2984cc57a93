/* Legacy CUDA IPC (cuIpcGetMemHandle, cuIpcOpenMemHandle/_v2, cuIpcCloseMemHandle) on the shim's
 * memory, which is VMM memory the driver's legacy IPC refuses. The exporter's handle names it and
 * the allocation (ipc_handle.h); the importer's shim asks the exporter's control socket for the
 * physical handles as file descriptors (over a connection kept for the next open, peer_kept.h;
 * share_open.c there), imports them, maps
 * them in a range it reserves and returns the allocation's base there. Opening a handle again
 * returns the same pointer and counts an open; the last close unmaps (cuda.h). Pointers that are
 * not the shim's and handles that are not the shim's are the driver's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../core/log.h"
#include "../core/mono_wait.h"
#include "../core/vmm_share.h"
#include "hooks_common.h"
#include "ipc_handle.h"
#include "ipc_keep.h"
#include "ipc_open_reply.h"
#include "ipc_parked.h"
#include "ipc_registry.h"
#include "ipc_sleep.h"
#include "lifecycle.h"
#include "protocol/peer_kept.h"
#include "protocol/peer_request.h"
#include "protocol/protocol.h"

/* How long an open waits for the exporting process to answer. */
#define IPC_OPEN_TIMEOUT_MS 10000

/* Where one open's time went, for its info line (a few clock reads per open: the open is a
 * socket round trip and several driver calls, so this costs nothing measurable). The named
 * phases are measured, not derived, so they add up to at most the total. PH_ENTER: from the
 * hook's start to the request (the arguments, the current device, the reopen lookup); PH_FDS:
 * closing the received descriptors (the imported handles hold the memory then). */
enum open_phase {
	PH_ENTER, PH_CHECK, PH_REQUEST, PH_IMPORT, PH_RESERVE, PH_MAP, PH_ACCESS, PH_FDS, PH_REST,
	PH_COUNT
};
static const char *const phase_names[PH_COUNT] = { "enter", "check", "request", "import",
						   "reserve", "map", "access", "fds", "rest" };

struct open_timing {
	double ms[PH_COUNT];
	struct timespec start, mark; /* the open's start; the end of the last phase measured */
};

static void timing_start(struct open_timing *t)
{
	memset(t, 0, sizeof(*t));
	clock_gettime(CLOCK_MONOTONIC, &t->start);
	t->mark = t->start;
}

/* Add the time since the last mark to phase p and move the mark. */
static void timing_add(struct open_timing *t, enum open_phase p)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	t->ms[p] += vmm_ms_between(&t->mark, &now);
	t->mark = now;
}

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	vmm_core *core = hook_cuda_core();
	vmm_share_info si;
	vmm_alloc_info info;
	ipc_handle h;
	vmm_error err;
	vmm_status st;

	if (!core || !vmm_lookup(core, (vmm_devptr)dptr, &info))
		return CALL_REAL(cuIpcGetMemHandle, (pHandle, dptr));
	if (!pHandle)
		return CUDA_ERROR_INVALID_VALUE;
	gate_enter();
	vmm_error_clear(&err);
	st = vmm_share_export(core, (vmm_devptr)dptr, &si, &err);
	gate_leave();
	if (!st && !ipc_handle_make(&h, si.id, si.base, si.size))
		st = vmm_fail(&err, VMM_E_INVALID, 0, "cannot read this process's start time");
	if (st) {
		vmm_log(VMM_LOG_ERROR, "cuIpcGetMemHandle(0x%llx): %s", (unsigned long long)dptr,
			err.msg);
		return st == VMM_E_UNSUPPORTED ? CUDA_ERROR_NOT_SUPPORTED : hook_cu_status(st, &err);
	}
	memset(pHandle, 0, sizeof(*pHandle));
	memcpy(pHandle->reserved, &h, sizeof(h));
	/* An importer is likely to follow: export the physical handles ahead (ipc_keep.h). */
	ipc_keep_queue(core, si.base, si.id);
	vmm_log(VMM_LOG_DEBUG, "cuIpcGetMemHandle(0x%llx): export %llu of 0x%llx (%zu bytes)",
		(unsigned long long)dptr, (unsigned long long)si.id,
		(unsigned long long)si.base, si.size);
	return CUDA_SUCCESS;
}

/* Undo a partial import, or close one: unmap what was mapped, release the handles, give the
 * range back. Where the unmap is refused, all three wait (ipc_parked.h). */
static void unmap_import(vmm_backend *be, const ipc_import *m, size_t mapped_bytes,
			 const char *what)
{
	ipc_parked_retry(be);
	if (mapped_bytes && !ipc_unmap_twice(be, m->span, mapped_bytes)) {
		ipc_parked_add(m->device, m->span, mapped_bytes, m->handles, m->nhandles, m->span,
			       m->span_size, m->exporter, what);
		return;
	}
	for (size_t i = 0; i < m->nhandles; i++)
		be->release(be, m->handles[i], NULL);
	if (m->span && !ipc_parked_adopt_range(m->span, m->span_size))
		be->unreserve(be, m->device, m->span, m->span_size, NULL);
}

/* Import the pieces behind fds into a range of our own. */
static CUresult map_import(vmm_backend *be, const struct open_reply *o, const int *fds,
			   int cur, unsigned int flags, ipc_import *m, struct open_timing *t)
{
	size_t mapped = 0;
	vmm_error err;
	int dev = -1, peers[1];

	vmm_error_clear(&err);
	for (size_t i = 0; i < o->npieces; i++) {
		int d;

		if (be->import_fd(be, fds[i], &m->handles[i], &d, &err))
			goto fail;
		m->nhandles++;
		if (dev >= 0 && d != dev) {
			vmm_fail(&err, VMM_E_INVALID, 0, "the pieces are on different devices");
			goto fail;
		}
		dev = d;
	}
	timing_add(t, PH_IMPORT);
	m->device = dev;
	if (be->reserve(be, dev, o->span_size, 0, &m->span, &err)) {
		m->span = 0;
		goto fail;
	}
	m->span_size = o->span_size;
	timing_add(t, PH_RESERVE);
	for (size_t i = 0; i < o->npieces; i++) {
		if (o->off[i] != mapped || be->map_at(be, m->span + o->off[i], o->size[i], o->hoff[i],
						      m->handles[i], &err))
			goto fail;
		mapped += o->size[i];
	}
	timing_add(t, PH_MAP);
	peers[0] = cur;
	/* The opener's device gets access too when it is another one (as the lazy peer flag
	 * asks; without it the driver would need peer access enabled, which we grant). */
	(void)flags;
	if (be->set_access(be, dev, m->span, m->span_size, peers, cur != dev ? 1 : 0, &err))
		goto fail;
	timing_add(t, PH_ACCESS);
	m->base = m->span + (o->base - o->span);
	return CUDA_SUCCESS;
fail:
	vmm_log(VMM_LOG_ERROR, "cuIpcOpenMemHandle: mapping export %llu of pid %d failed: %s",
		(unsigned long long)m->id, (int)m->exporter, err.msg);
	unmap_import(be, m, mapped, "cuIpcOpenMemHandle undo");
	return err.status == VMM_E_OOM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_MAP_FAILED;
}

/* The open's one info line: where it was mapped and where its time went (docs/monitoring.md).
 * exporter_fds is the exporter's own figure, part of request, and exported whether it exported
 * (1) or sent dups of the descriptors it kept since the get (0); both absent from older
 * exporters. kept_conn: the request went over the connection kept from an earlier open (1), or a
 * new one (0). */
static void log_open(const ipc_import *m, const struct open_timing *t, const struct open_reply *o,
		     bool kept_conn)
{
	char phases[256], extra[96] = "";
	size_t len = 0;

	for (int p = 0; p < PH_COUNT; p++) {
		len += (size_t)snprintf(phases + len, len < sizeof(phases) ? sizeof(phases) - len : 0,
					" %s=%.3f", phase_names[p], t->ms[p]);
	}
	if (o->export_ms >= 0 && o->exported >= 0)
		snprintf(extra, sizeof(extra), " exporter_fds=%.3f exported=%d", o->export_ms,
			 o->exported);
	else if (o->export_ms >= 0)
		snprintf(extra, sizeof(extra), " exporter_fds=%.3f", o->export_ms);
	vmm_log(VMM_LOG_INFO, "cuIpcOpenMemHandle: export %llu of pid %d at 0x%llx (%zu pieces) "
		"open_phases_ms total=%.3f%s%s kept_conn=%d", (unsigned long long)m->id,
		(int)m->exporter, (unsigned long long)m->base, m->nhandles,
		vmm_ms_between(&t->start, &t->mark), phases, extra, kept_conn ? 1 : 0);
}

/* The start-time check of a new connection, timed for the open's check phase (a read of
 * /proc/PID/stat: tens of microseconds in a process of many threads). */
static __thread double check_ms;

static bool exporter_still_there(pid_t pid, uint64_t start_time)
{
	struct timespec a, b;
	bool same;

	clock_gettime(CLOCK_MONOTONIC, &a);
	same = ipc_process_start_time(pid) == start_time;
	clock_gettime(CLOCK_MONOTONIC, &b);
	check_ms += vmm_ms_between(&a, &b);
	return same;
}

/* Ask the exporter over the kept connection (keep=true); an exporter older than that answers
 * the word with an error, and is asked again the old way. 0, -1, or PEER_KEPT_REFUSED. */
static int request_exporter(shim_runtime *rt, const ipc_handle *h, peer_reply *reply,
			    bool *kept_conn, char *why, size_t whylen)
{
	char line[192], plain[192];

	snprintf(line, sizeof(line), "%s share_open export=%llu base=%llu keep=true\n",
		 PROTO_MAGIC, (unsigned long long)h->id, (unsigned long long)h->base);
	snprintf(plain, sizeof(plain), "%s share_open export=%llu base=%llu\n", PROTO_MAGIC,
		 (unsigned long long)h->id, (unsigned long long)h->base);
	return peer_request_kept_or_plain(rt->cfg.run_dir, (pid_t)h->pid, h->start_time,
					  exporter_still_there, line, plain, IPC_OPEN_TIMEOUT_MS,
					  reply, kept_conn, why, whylen);
}

/* Ask the exporting process (still the one that made the handle: checked on each new
 * connection; a kept one ends with it) for the descriptors of the memory behind it: true with its
 * reply parsed, each descriptor in reply->fds. */
static bool ask_exporter(shim_runtime *rt, const ipc_handle *h, peer_reply *reply,
			 struct open_reply *o, struct open_timing *t, bool *kept_conn)
{
	char why[256];
	int rc;

	check_ms = 0;
	rc = request_exporter(rt, h, reply, kept_conn, why, sizeof(why));
	timing_add(t, PH_REQUEST);
	t->ms[PH_REQUEST] -= check_ms;
	t->ms[PH_CHECK] += check_ms;
	if (rc == PEER_KEPT_REFUSED ||
	    (rc && ipc_process_start_time((pid_t)h->pid) != h->start_time)) {
		vmm_log(VMM_LOG_INFO, "cuIpcOpenMemHandle: the exporting process %u has ended",
			h->pid);
		return false;
	}
	if (rc) {
		vmm_log(VMM_LOG_ERROR, "cuIpcOpenMemHandle: asking pid %u for its memory: %s",
			h->pid, why);
		return false;
	}
	if (!ipc_open_reply_parse(reply->text, o) || reply->nfds != o->npieces) {
		vmm_log(VMM_LOG_ERROR, "cuIpcOpenMemHandle: pid %u did not give its memory: %s",
			h->pid, o->error[0] ? o->error : "unexpected reply");
		peer_reply_free(reply);
		return false;
	}
	return true;
}

static CUresult open_ours(CUdeviceptr *pdptr, const ipc_handle *h, unsigned int flags)
{
	shim_runtime *rt;
	vmm_backend *be;
	struct open_reply o;
	peer_reply reply;
	ipc_import m;
	struct open_timing t;
	bool kept_conn = false;
	CUresult r;
	int cur;

	timing_start(&t);
	if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
		return CUDA_ERROR_INVALID_VALUE;
	if (h->pid == (uint32_t)getpid())
		return CUDA_ERROR_INVALID_CONTEXT; /* the driver refuses to open its own handles */
	if (!hook_current_device(&cur))
		return CUDA_ERROR_INVALID_CONTEXT;
	rt = shim_runtime_cuda();
	be = rt ? rt->side[SHIM_CUDA].be : NULL;
	if (!be || !be->import_fd || !be->map_at) {
		vmm_log(VMM_LOG_ERROR, "cuIpcOpenMemHandle: a handle of the shim in pid %u, and "
			"this process cannot import memory (shim disabled?)", h->pid);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (ipc_registry_reopen((pid_t)h->pid, h->start_time, h->id, &m)) {
		*pdptr = (CUdeviceptr)m.base;
		return CUDA_SUCCESS;
	}
	timing_add(&t, PH_ENTER);
	if (!ask_exporter(rt, h, &reply, &o, &t, &kept_conn))
		return CUDA_ERROR_INVALID_HANDLE;
	memset(&m, 0, sizeof(m));
	m.exporter = (pid_t)h->pid;
	m.start_time = h->start_time;
	m.id = h->id;
	m.remote_base = h->base;
	m.opener_device = cur;
	m.size = h->size;
	timing_add(&t, PH_REST);
	gate_enter();
	ipc_parked_retry(be); /* an earlier close's range that would not unmap */
	r = map_import(be, &o, reply.fds, cur, flags, &m, &t);
	gate_leave();
	timing_add(&t, PH_REST);
	peer_reply_free(&reply); /* the descriptors: the imported handles hold the memory now */
	timing_add(&t, PH_FDS);
	if (r)
		return r;
	if (!ipc_registry_add(&m)) {
		unmap_import(be, &m, m.span_size, "cuIpcOpenMemHandle undo");
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	timing_add(&t, PH_REST);
	log_open(&m, &t, &o, kept_conn);
	*pdptr = (CUdeviceptr)m.base;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
				       unsigned int Flags)
{
	ipc_handle h;

	if (!ipc_handle_parse(handle.reserved, &h))
		return CALL_REAL(cuIpcOpenMemHandle_v2, (pdptr, handle, Flags));
	return open_ours(pdptr, &h, Flags);
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	ipc_handle h;

	if (!ipc_handle_parse(handle.reserved, &h))
		return CALL_REAL(cuIpcOpenMemHandle, (pdptr, handle, Flags));
	return open_ours(pdptr, &h, Flags);
}

int hook_ipc_close_device(int dev)
{
	shim_runtime *rt = shim_runtime_peek();
	ipc_import_summary *sum;
	ipc_import m;
	size_t n;
	int closed = 0;

	if (!rt || !rt->side[SHIM_CUDA].be || !(sum = malloc(IPC_REGISTRY_MAX * sizeof(*sum))))
		return 0;
	n = ipc_registry_summaries(sum, IPC_REGISTRY_MAX);
	for (size_t i = 0; i < n && i < IPC_REGISTRY_MAX; i++) {
		bool last = false;

		if (sum[i].device != dev)
			continue;
		/* Each close drops an open; the last one unmaps. Not in the gate: a reset of a
		 * process held asleep must not wait for its wake. */
		while (!last && ipc_registry_close(sum[i].base, &last, &m))
			;
		if (!last)
			continue; /* closed meanwhile by the program */
		unmap_import(rt->side[SHIM_CUDA].be, &m, m.released ? 0 : m.span_size,
			     "a reset of the primary context");
		closed++;
	}
	free(sum);
	return closed;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	shim_runtime *rt = shim_runtime_peek();
	ipc_import m;
	bool last;

	if (!ipc_registry_close((vmm_devptr)dptr, &last, &m))
		return CALL_REAL(cuIpcCloseMemHandle, (dptr));
	if (last && rt && rt->side[SHIM_CUDA].be) {
		gate_enter();
		/* Released by a group sleep: only the range is left to give back. */
		unmap_import(rt->side[SHIM_CUDA].be, &m, m.released ? 0 : m.span_size,
			     "cuIpcCloseMemHandle");
		gate_leave();
	}
	return CUDA_SUCCESS;
}
