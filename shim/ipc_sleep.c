/* Release and re-import of legacy-IPC memory around a group sleep (ipc_sleep.h). Runs on the
 * control thread, inside a sleep or wake, with the program's device work held at the gate, so
 * the program cannot touch an import while its mapping changes. */
#include "ipc_sleep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/log.h"
#include "../core/mono_wait.h"
#include "../core/offload/copy_engine.h"
#include "hooks_common.h"
#include "ipc_handle.h"
#include "ipc_open_reply.h"
#include "ipc_parked.h"
#include "protocol/peer_request.h"
#include "protocol/protocol.h"
#include "runtime.h"

size_t ipc_sleep_parse_group(const char *s, pid_t *out, size_t max)
{
	size_t n = 0;

	while (s && *s && n < max) {
		char *end;
		long v = strtol(s, &end, 10);

		if (end == s)
			break;
		if (v > 0)
			out[n++] = (pid_t)v;
		s = *end == ',' ? end + 1 : end;
	}
	return n;
}

static bool in_group(const pid_t *g, size_t n, pid_t pid)
{
	for (size_t i = 0; i < n; i++)
		if (g[i] == pid)
			return true;
	return false;
}

bool ipc_sleep_exports_releasable(const pid_t *group, size_t n)
{
	pid_t who[IPC_SLEEP_MAX_GROUP + 1];
	size_t k = ipc_registry_all_importers(who, IPC_SLEEP_MAX_GROUP + 1);

	if (k > IPC_SLEEP_MAX_GROUP)
		return false;
	for (size_t i = 0; i < k; i++)
		if (!in_group(group, n, who[i]))
			return false;
	return true;
}

static vmm_backend *backend(void)
{
	shim_runtime *rt = shim_runtime_peek();

	return rt ? rt->side[SHIM_CUDA].be : NULL;
}

/* A copy of the imports (malloc'd; *n of them), or NULL when there are none or no memory. */
static ipc_import *snapshot(size_t *n)
{
	size_t cap = ipc_registry_imports(NULL, 0);
	ipc_import *v;

	*n = 0;
	if (!cap || !(v = malloc(cap * sizeof(*v))))
		return NULL;
	*n = ipc_registry_imports(v, cap);
	if (*n > cap)
		*n = cap;
	return v;
}

size_t ipc_sleep_released_exporters(pid_t *out, size_t max)
{
	size_t n, k = 0;
	ipc_import *v = snapshot(&n);

	for (size_t i = 0; i < n; i++)
		if (v[i].released && !in_group(out, k, v[i].exporter) && k < max)
			out[k++] = v[i].exporter;
	free(v);
	return k;
}

/* One copy between the import's bytes and host memory, on a stream of its own, waited for. */
static vmm_status copy_import(vmm_backend *be, const ipc_import *m, void *host, bool out,
			      vmm_error *err)
{
	vmm_stream s;
	vmm_status st = be->stream_create(be, m->device, &s, err);

	if (st)
		return st;
	st = out ? be->copy_d2h_async(be, host, m->base, m->size, s, err) :
		   be->copy_h2d_async(be, m->base, host, m->size, s, err);
	if (!st)
		st = be->stream_synchronize(be, s, err);
	be->stream_destroy(be, s, NULL);
	return st;
}

/* This process's own copy of what m maps, before a group sleep releases it: the exporter's copy
 * goes with the exporter if it ends before the wake (natively, an import keeps the memory). The
 * host buffer is pinned before the copy (a pageable one ran at 1.3 GB/s on an H100, 7 Dec) and
 * checked against the host's free memory first: under overcommit a copy's first touch could
 * otherwise have the OOM killer end the program mid-sleep. A copy that fails fails the sleep,
 * which then changes nothing. */
static vmm_status back_up(vmm_backend *be, const ipc_import *m, vmm_host_buf *out,
			  vmm_error *err)
{
	vmm_error why;
	vmm_status st;

	vmm_error_clear(&why);
	if ((st = vmm_host_buf_alloc(be, m->size ? m->size : 1, 1, out, &why)))
		return vmm_fail(err, st, 0, "no host memory for a copy of the %zu bytes imported "
				"from pid %d: %s", m->size, (int)m->exporter, why.msg);
	if ((st = copy_import(be, m, out->ptr, true, err)))
		vmm_host_buf_free(be, out);
	return st;
}

/* Unmap m and release its handles; the range stays reserved. */
static vmm_status release_one(vmm_backend *be, const ipc_import *m, vmm_error *err)
{
	vmm_status st = be->unmap(be, m->span, m->span_size, err);

	if (st)
		return st;
	for (size_t i = 0; i < m->nhandles; i++)
		if (be->release(be, m->handles[i], NULL))
			vmm_log(VMM_LOG_WARN, "group sleep: releasing a handle imported from pid %d "
				"failed; its memory stays with the driver until exit",
				(int)m->exporter);
	ipc_registry_set_released(m->span, true, NULL, 0);
	return VMM_OK;
}

/* The exporter ended while the group slept, taking its copy of the memory with it. Fresh
 * memory goes in the range, filled from this process's own copy (back_up) before the import
 * counts as mapped: a copy that fails fails the wake, the copy kept for the next one. Without a
 * copy the program's pointers still do not fault, and the contents are said lost. */
static vmm_status replace_lost(vmm_backend *be, const ipc_import *m, vmm_error *err)
{
	int peers[1] = { m->opener_device };
	vmm_host_buf backup;
	vmm_phys h;
	vmm_status st;
	bool say;

	ipc_registry_take_backup(m->span, &backup);
	st = be->create(be, m->device, m->span_size, &h, err);
	if (!st && (st = be->map(be, m->span, m->span_size, h, err)))
		be->release(be, h, NULL);
	if (st) {
		ipc_registry_set_backup(m->span, &backup);
		return st;
	}
	if ((st = be->set_access(be, m->device, m->span, m->span_size, peers,
				 m->opener_device != m->device ? 1 : 0, err)) ||
	    (backup.ptr && (st = copy_import(be, m, backup.ptr, false, err))) ||
	    !ipc_registry_set_released(m->span, false, &h, 1)) {
		if (!ipc_unmap_twice(be, m->span, m->span_size))
			ipc_parked_add(m->device, m->span, m->span_size, &h, 1, 0, 0, m->exporter,
				       "group wake undo");
		else
			be->release(be, h, NULL);
		ipc_registry_set_backup(m->span, &backup);
		return st ? st : vmm_fail(err, VMM_E_INVALID, 0, "the import was closed meanwhile");
	}
	/* Said once: a wake that a later part undid comes here again at its next try. */
	say = ipc_registry_loss_first_said(m->span);
	if (say && backup.ptr)
		vmm_log(VMM_LOG_WARN, "group wake: pid %d, which exported the memory at 0x%llx (%zu "
			"bytes), ended while the group slept; its contents came back from this "
			"process's own copy, in new memory no other process shares",
			(int)m->exporter, (unsigned long long)m->base, m->size);
	else if (say)
		vmm_log(VMM_LOG_ERROR, "group wake: pid %d, which exported the memory at 0x%llx (%zu "
			"bytes), ended while the group slept; its contents are lost and new memory "
			"is mapped there", (int)m->exporter, (unsigned long long)m->base,
			m->span_size);
	vmm_host_buf_free(be, &backup);
	return VMM_OK;
}

/* Ask m's exporter for its pieces again and map them at m's range. */
static vmm_status restore_one(vmm_backend *be, const char *run_dir, const ipc_import *m,
			      int timeout_ms, vmm_error *err)
{
	static struct open_reply o; /* large; the control thread runs one operation at a time */
	vmm_phys hs[IPC_IMPORT_MAX_PIECES];
	size_t nh = 0, mapped = 0;
	peer_reply reply;
	char line[160], why[256];
	vmm_status st = VMM_OK;
	int peers[1] = { m->opener_device };

	if (ipc_process_start_time(m->exporter) != m->start_time)
		return replace_lost(be, m, err);
	snprintf(line, sizeof(line), "%s share_open export=%llu base=%llu\n", PROTO_MAGIC,
		 (unsigned long long)m->id, (unsigned long long)m->remote_base);
	if (peer_request(run_dir, m->exporter, line, timeout_ms, &reply, why, sizeof(why)))
		return vmm_fail(err, VMM_E_BUSY, 0, "asking pid %d for the memory mapped at 0x%llx "
				"again: %s", (int)m->exporter, (unsigned long long)m->base, why);
	if (!ipc_open_reply_parse(reply.text, &o) || reply.nfds != o.npieces ||
	    o.span_size != m->span_size || o.base - o.span != m->base - m->span) {
		st = vmm_fail(err, VMM_E_BUSY, 0, "pid %d did not give the memory mapped at 0x%llx "
			      "again: %s", (int)m->exporter, (unsigned long long)m->base,
			      o.error[0] ? o.error : "unexpected reply");
		peer_reply_free(&reply);
		return st;
	}
	for (size_t i = 0; i < o.npieces && !st; i++) {
		int d;

		if (!(st = be->import_fd(be, reply.fds[i], &hs[i], &d, err)))
			nh++;
	}
	peer_reply_free(&reply);
	for (size_t i = 0; i < o.npieces && !st; i++) {
		if (o.off[i] != mapped)
			st = vmm_fail(err, VMM_E_INVALID, 0, "pieces out of order");
		else if (!(st = be->map_at(be, m->span + o.off[i], o.size[i], o.hoff[i], hs[i],
					   err)))
			mapped += o.size[i];
	}
	if (!st)
		st = be->set_access(be, m->device, m->span, m->span_size, peers,
				   m->opener_device != m->device ? 1 : 0, err);
	if (!st && !ipc_registry_set_released(m->span, false, hs, nh))
		st = vmm_fail(err, VMM_E_INVALID, 0, "the import at 0x%llx was closed meanwhile",
			      (unsigned long long)m->base);
	if (!st) {
		vmm_host_buf gone;

		ipc_registry_take_backup(m->span, &gone);
		vmm_host_buf_free(be, &gone); /* the exporter's memory is back */
	}
	if (st && mapped && !ipc_unmap_twice(be, m->span, mapped)) {
		ipc_parked_add(m->device, m->span, mapped, hs, nh, 0, 0, m->exporter,
			       "group wake undo");
	} else if (st) {
		for (size_t i = 0; i < nh; i++)
			be->release(be, hs[i], NULL);
	}
	return st;
}

/* Release again the imports of v (those not released now: restored by this call). */
static void release_restored(vmm_backend *be, const ipc_import *v, size_t n)
{
	size_t k;
	ipc_import *now = snapshot(&k);

	for (size_t i = 0; i < k; i++)
		for (size_t j = 0; j < n; j++)
			if (now[i].span == v[j].span && v[j].released && !now[i].released &&
			    release_one(be, &now[i], NULL))
				vmm_log(VMM_LOG_ERROR, "group wake undo: the memory of pid %d at 0x%llx "
					"stays mapped", (int)now[i].exporter,
					(unsigned long long)now[i].base);
	free(now);
}

/* timeout_ms bounds all of v's restores together: each exporter is asked within what is left,
 * so that a stopped one costs the wake its timeout once, not once per import. *bytes (unless
 * NULL): what the restored imports map. */
static vmm_status restore_released(const ipc_import *v, size_t n, int timeout_ms,
				   uint64_t *bytes, vmm_error *err)
{
	shim_runtime *rt = shim_runtime_peek();
	vmm_backend *be = backend();
	long long deadline = vmm_now_ms() + timeout_ms;
	vmm_status st = VMM_OK;
	uint64_t sum = 0;

	if (bytes)
		*bytes = 0;
	if (!be || !rt)
		return vmm_fail(err, VMM_E_INVALID, 0, "no CUDA backend");
	ipc_parked_retry(be); /* a mapping left in a range to restore would block it */
	for (size_t i = 0; i < n && !st; i++) {
		long long left = deadline - vmm_now_ms();

		if (!v[i].released)
			continue;
		if (left < 1)
			st = vmm_fail(err, VMM_E_BUSY, 0, "the wake's %d ms passed before pid %d was "
				      "asked for the memory mapped at 0x%llx again", timeout_ms,
				      (int)v[i].exporter, (unsigned long long)v[i].base);
		else if (!(st = restore_one(be, rt->cfg.run_dir, &v[i], (int)left, err)))
			sum += v[i].size;
	}
	if (st)
		release_restored(be, v, n);
	else if (bytes)
		*bytes = sum;
	return st;
}

vmm_status ipc_sleep_release(const pid_t *group, size_t ng, size_t *count, uint64_t *bytes,
			     vmm_error *err)
{
	vmm_backend *be = backend();
	size_t n;
	ipc_import *v = snapshot(&n);
	vmm_status st = VMM_OK;
	uint64_t sum = 0;

	*count = 0;
	if (be)
		ipc_parked_retry(be);
	for (size_t i = 0; i < n; i++)
		v[i].released = false;  /* from here: released by this call */
	for (size_t i = 0; i < n && be && !st; i++) {
		vmm_host_buf backup;

		if (!in_group(group, ng, v[i].exporter) || !v[i].nhandles)
			continue;
		if ((st = back_up(be, &v[i], &backup, err)))
			break;
		if ((st = release_one(be, &v[i], err))) {
			vmm_host_buf_free(be, &backup);
			break;
		}
		ipc_registry_set_backup(v[i].span, &backup);
		v[i].released = true;
		++*count;
		sum += v[i].size;
	}
	if (bytes)
		*bytes = st ? 0 : sum;
	if (st) {
		vmm_error undo;

		vmm_error_clear(&undo);
		if (restore_released(v, n, 10000, NULL, &undo))
			vmm_log(VMM_LOG_ERROR, "group sleep undo: imported memory stays released: "
				"%s (a wake imports it again)", undo.msg);
		*count = ipc_sleep_released_exporters(&(pid_t){ 0 }, 1); /* then the caller stays asleep */
	}
	free(v);
	return st;
}

vmm_status ipc_sleep_restore(int timeout_ms, uint64_t *bytes, vmm_error *err)
{
	size_t n;
	ipc_import *v = snapshot(&n);
	vmm_status st = restore_released(v, n, timeout_ms > 0 ? timeout_ms : 10000, bytes, err);

	free(v);
	return st;
}
