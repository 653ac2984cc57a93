/* The legacy-IPC registry (ipc_registry.h): two small tables under one lock. */
#include "ipc_registry.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "ipc_parked.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static struct {
	uint64_t id;
	pid_t pid;
} importers[IPC_REGISTRY_MAX];
static size_t nimporters;

static ipc_import *imports[IPC_REGISTRY_MAX];
static size_t nimports;

void ipc_registry_importer(uint64_t id, pid_t pid)
{
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nimporters; i++) {
		if (importers[i].id == id && importers[i].pid == pid) {
			pthread_mutex_unlock(&lock);
			return;
		}
	}
	if (nimporters < IPC_REGISTRY_MAX) {
		importers[nimporters].id = id;
		importers[nimporters++].pid = pid;
	}
	pthread_mutex_unlock(&lock);
}

size_t ipc_registry_importers(uint64_t id, pid_t *out, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nimporters; i++) {
		/* A process that has ended maps nothing any more: forget it. */
		if (kill(importers[i].pid, 0) && errno == ESRCH) {
			importers[i--] = importers[--nimporters];
			continue;
		}
		if (importers[i].id == id && n++ < max)
			out[n - 1] = importers[i].pid;
	}
	pthread_mutex_unlock(&lock);
	return n;
}

bool ipc_registry_reopen(pid_t exporter, uint64_t start_time, uint64_t id, ipc_import *out)
{
	bool found = false;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nimports && !found; i++) {
		ipc_import *m = imports[i];

		if (m->exporter == exporter && m->start_time == start_time && m->id == id) {
			m->opens++;
			*out = *m;
			found = true;
		}
	}
	pthread_mutex_unlock(&lock);
	return found;
}

bool ipc_registry_add(const ipc_import *imp)
{
	ipc_import *m = malloc(sizeof(*m));
	bool ok = false;

	if (!m)
		return false;
	*m = *imp;
	m->opens = 1;
	memset(&m->backup, 0, sizeof(m->backup));
	pthread_mutex_lock(&lock);
	if (nimports < IPC_REGISTRY_MAX) {
		imports[nimports++] = m;
		ok = true;
	}
	pthread_mutex_unlock(&lock);
	if (!ok)
		free(m);
	return ok;
}

bool ipc_registry_close(vmm_devptr base, bool *last, ipc_import *out)
{
	vmm_host_buf gone = { 0 };
	bool found = false;

	*last = false;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nimports && !found; i++) {
		ipc_import *m = imports[i];

		if (m->base != base)
			continue;
		found = true;
		if (--m->opens == 0) {
			*out = *m;
			memset(&out->backup, 0, sizeof(out->backup)); /* freed with the entry */
			*last = true;
			imports[i] = imports[--nimports];
			gone = m->backup;
			free(m);
		}
	}
	pthread_mutex_unlock(&lock);
	vmm_host_buf_free(NULL, &gone); /* a driver call (unpinning): not under the lock */
	return found;
}

size_t ipc_registry_imports(ipc_import *out, size_t max)
{
	size_t n;

	pthread_mutex_lock(&lock);
	for (n = 0; n < nimports && n < max; n++)
		out[n] = *imports[n];
	n = nimports;
	pthread_mutex_unlock(&lock);
	return n;
}

size_t ipc_registry_summaries(ipc_import_summary *out, size_t max)
{
	size_t n;

	pthread_mutex_lock(&lock);
	for (n = 0; n < nimports && n < max; n++)
		out[n] = (ipc_import_summary){ .exporter = imports[n]->exporter,
					       .id = imports[n]->id,
					       .device = imports[n]->device,
					       .base = imports[n]->base,
					       .span_size = imports[n]->span_size,
					       .opens = imports[n]->opens };
	n = nimports;
	pthread_mutex_unlock(&lock);
	return n;
}

uint64_t ipc_registry_imported_bytes(int dev)
{
	uint64_t bytes = 0;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nimports; i++)
		if (imports[i]->device == dev && !imports[i]->released)
			bytes += imports[i]->span_size;
	pthread_mutex_unlock(&lock);
	return bytes + ipc_parked_bytes(dev);
}

size_t ipc_registry_all_importers(pid_t *out, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nimporters; i++) {
		bool seen = false;

		if (kill(importers[i].pid, 0) && errno == ESRCH) {
			importers[i--] = importers[--nimporters];
			continue;
		}
		for (size_t k = 0; k < n && k < max && !seen; k++)
			seen = out[k] == importers[i].pid;
		if (!seen && n++ < max)
			out[n - 1] = importers[i].pid;
	}
	pthread_mutex_unlock(&lock);
	return n;
}

/* The import whose range is span, or NULL; the lock held. */
static ipc_import *at_span(vmm_devptr span)
{
	for (size_t i = 0; i < nimports; i++)
		if (imports[i]->span == span)
			return imports[i];
	return NULL;
}

bool ipc_registry_set_released(vmm_devptr span, bool released, const vmm_phys *handles,
			       size_t n)
{
	ipc_import *m;

	pthread_mutex_lock(&lock);
	m = at_span(span);
	if (m) {
		m->released = released;
		m->nhandles = released ? 0 : n;
		if (!released)
			memcpy(m->handles, handles, n * sizeof(*handles));
	}
	pthread_mutex_unlock(&lock);
	return m != NULL;
}

void ipc_registry_set_backup(vmm_devptr span, const vmm_host_buf *backup)
{
	vmm_host_buf gone = *backup;
	ipc_import *m;

	pthread_mutex_lock(&lock);
	m = at_span(span);
	if (m) {
		gone = m->backup;
		m->backup = *backup;
	}
	pthread_mutex_unlock(&lock);
	vmm_host_buf_free(NULL, &gone); /* the one replaced, or this one: no import to keep it */
}

void ipc_registry_take_backup(vmm_devptr span, vmm_host_buf *out)
{
	ipc_import *m;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&lock);
	m = at_span(span);
	if (m) {
		*out = m->backup;
		memset(&m->backup, 0, sizeof(m->backup));
	}
	pthread_mutex_unlock(&lock);
}

bool ipc_registry_loss_first_said(vmm_devptr span)
{
	bool first = false;
	ipc_import *m;

	pthread_mutex_lock(&lock);
	m = at_span(span);
	if (m) {
		first = !m->loss_said;
		m->loss_said = true;
	}
	pthread_mutex_unlock(&lock);
	return first;
}

void ipc_registry_after_fork(void)
{
	ipc_parked_after_fork();
	pthread_mutex_init(&lock, NULL);
	nimporters = 0;
	/* The mappings were not inherited by the child in any usable way; forget them. A copy
	 * taken for a group sleep is forgotten, not freed: its pinned pages are the parent's
	 * registration, which the child must not undo (as the heap's own backups). */
	for (size_t i = 0; i < nimports; i++)
		free(imports[i]);
	nimports = 0;
}
