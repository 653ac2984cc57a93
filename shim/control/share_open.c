/* share_open: another shimmed process opens a legacy IPC handle of ours (shim/hooks_ipc.c on its
 * side). The export is looked up by id and base (a freed allocation's id is gone), the descriptors
 * of the physical handles under it travel with the reply (duplicates of those kept since the get,
 * ipc_keep.h, else exported now), and the importer's
 * pid is recorded (shim_share_importers) for whoever needs to know who maps what. Same uid only:
 * root may drive a process, but memory goes only to its own user's processes. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../core/heap.h"
#include "../../core/log.h"
#include "../../core/mono_wait.h"
#include "../../core/vmm_share.h"
#include "../ipc_registry.h"
#include "../runtime.h"
#include "control_internal.h"
#include "../protocol/fd_pass.h"

/* How long a share_open waits for the heap's lock when the program's allocator holds it (then
 * HOT_GRACE more unless that allocator waits for its device): under the importer's 10 s
 * (IPC_OPEN_TIMEOUT_MS), so that it hears busy rather than nothing. */
#define SHARE_OPEN_WAIT_MS 7000

void control_share_close_fds(const int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
}

/* The ok reply for the export's pieces (their descriptors into fds) and the importer recorded. */
static void put_share(const proto_request *req, long pid, const vmm_share_info *info,
		      const vmm_share_piece *pieces, size_t n, double fds_ms, bool exported,
		      proto_writer *w, int *fds)
{
	proto_header(w, "ok");
	proto_record_begin(w, "share");
	proto_put_int(w, "device", info->device);
	proto_put_u64(w, "base", info->base);
	proto_put_u64(w, "size", info->size);
	proto_put_u64(w, "span", info->span);
	proto_put_u64(w, "span_size", info->span_size);
	proto_put_u64(w, "pieces", n);
	/* export_ms keeps its name for older importers: it is the descriptors' time, exported or
	 * not. */
	proto_put_double(w, "export_ms", fds_ms);
	proto_put_bool(w, "exported", exported);
	proto_record_end(w);
	for (size_t i = 0; i < n; i++) {
		proto_record_begin(w, "piece");
		proto_put_u64(w, "offset", pieces[i].offset);
		proto_put_u64(w, "size", pieces[i].size);
		proto_put_u64(w, "handle_offset", pieces[i].handle_offset);
		proto_record_end(w);
		fds[i] = pieces[i].fd;
	}
	proto_end(w);
	ipc_registry_importer(req->share_id, (pid_t)pid);
	vmm_log(VMM_LOG_DEBUG, "share_open: export %llu (0x%llx, %zu bytes) to pid %ld in %zu "
		"pieces", (unsigned long long)req->share_id, (unsigned long long)info->base,
		info->size, pid, n);
}

/* The core whose memory uid's process (pid) may open: NULL when it may not (another uid) or
 * there is none (no device memory managed yet). answer: write the refusal to w, and log one of
 * another uid; without, the caller answers (control_share_open_now: the usual way). */
static vmm_core *share_core(unsigned uid, long pid, bool answer, proto_writer *w)
{
	shim_runtime *rt = shim_runtime_peek();
	char msg[160];

	if (uid != (unsigned)geteuid()) {
		if (!answer)
			return NULL;
		snprintf(msg, sizeof(msg), "uid %u may not map memory of uid %u", uid,
			 (unsigned)geteuid());
		vmm_log(VMM_LOG_WARN, "share_open from pid %ld refused: %s", pid, msg);
		proto_error_response(w, PROTO_ERR_PERMISSION, msg);
		return NULL;
	}
	if (!rt || !rt->side[SHIM_CUDA].core) {
		if (answer)
			proto_error_response(w, PROTO_ERR_NOT_READY, "no device memory managed here");
		return NULL;
	}
	return rt->side[SHIM_CUDA].core;
}

void control_share_open(const proto_request *req, unsigned uid, long pid, proto_writer *w,
			int *fds, size_t *nfds, bool *exported)
{
	vmm_core *core = share_core(uid, pid, true, w);
	vmm_share_piece pieces[VMM_SHARE_MAX_PIECES];
	vmm_share_info info;
	vmm_error err;
	vmm_status st;
	struct timespec t0, t1;
	size_t n = 0;

	*nfds = 0;
	*exported = false;
	if (!core)
		return;
	vmm_error_clear(&err);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* The heap's lock within SHARE_OPEN_WAIT_MS (and its grace): past that the importer hears
	 * busy before its own timeout, and this worker is free again. */
	vmm_bounded_reads_begin(SHARE_OPEN_WAIT_MS);
	st = vmm_share_fds(core, (vmm_devptr)req->share_base, req->share_id, &info, pieces,
			   VMM_SHARE_MAX_PIECES, &n, exported, &err);
	vmm_bounded_reads_end();
	if (st) {
		vmm_log(VMM_LOG_INFO, "share_open of export %llu from pid %ld: %s",
			(unsigned long long)req->share_id, pid, err.msg);
		proto_error_response(w, err.status == VMM_E_NOT_OURS ? PROTO_ERR_INVALID :
				     control_error_word(err.status), err.msg);
		return;
	}
	/* The lookup and the descriptors (an export per physical handle, or a dup of the kept
	 * ones), under the heap's lock: the importer logs it as part of its request's time
	 * (hooks_ipc.c, exporter_fds). */
	clock_gettime(CLOCK_MONOTONIC, &t1);
	put_share(req, pid, &info, pieces, n, vmm_ms_between(&t0, &t1), *exported, w, fds);
	*nfds = n;
}

bool control_share_open_now(const proto_request *req, unsigned uid, long pid, proto_writer *w,
			    int *fds, size_t max, size_t *nfds)
{
	vmm_core *core = share_core(uid, pid, false, w);
	vmm_share_piece pieces[VMM_SHARE_MAX_PIECES];
	vmm_share_info info;
	vmm_error err;
	struct timespec t0, t1;
	size_t n = 0;

	*nfds = 0;
	if (max > VMM_SHARE_MAX_PIECES)
		max = VMM_SHARE_MAX_PIECES;
	if (!core)
		return false; /* refused the usual way, with its log line */
	vmm_error_clear(&err);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (vmm_share_fds_now(core, (vmm_devptr)req->share_base, req->share_id, &info, pieces,
			      max, &n, &err))
		return false;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	put_share(req, pid, &info, pieces, n, vmm_ms_between(&t0, &t1), false, w, fds);
	*nfds = n;
	return true;
}
