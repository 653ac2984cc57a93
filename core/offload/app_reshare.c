/* The program's shared VMM handles across a group sleep (app_vmm.h, vmm_app_group_release):
 * which handles the next sleep releases, how an import comes back (the kept duplicate within the
 * sleep's own undo, a new descriptor from its exporter at wake), and the exporter's side of that
 * fetch. The sleep and wake themselves are app_offload.c's. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../log.h"
#include "app_internal.h"

void vmm_app_set_refetch(vmm_app_registry *reg, vmm_app_refetch_fn fn)
{
	if (!reg)
		return;
	pthread_mutex_lock(&reg->lock);
	reg->refetch = fn;
	pthread_mutex_unlock(&reg->lock);
}

void vmm_app_defer_imports(vmm_app_registry *reg, bool on)
{
	if (!reg)
		return;
	pthread_mutex_lock(&reg->lock);
	reg->defer_imports = on;
	pthread_mutex_unlock(&reg->lock);
}

/* May the group release h in the role the entry names? Only while awake, shared through kept
 * descriptors none of which the program holds open (it may have opened one since vmmctl
 * looked). */
static bool releasable(const struct app_handle *h, const vmm_app_release *e)
{
	if (!h || h->asleep || !h->nshare_fds || h->stale)
		return false;
	if (e->exporter ? !h->imported || !e->exporter_value : h->imported)
		return false;
	return !app_share_program_holds(h);
}

void vmm_app_group_release(vmm_app_registry *reg, const vmm_app_release *list, size_t n,
			   size_t *skipped)
{
	size_t bad = 0;

	if (!reg)
		return;
	pthread_mutex_lock(&reg->lock);
	for (size_t i = 0; i < reg->nh; i++)
		reg->hs[i]->group_release = false;
	for (size_t i = 0; i < n; i++) {
		struct app_handle *h = app_find(reg, list[i].app);

		if (!releasable(h, &list[i])) {
			bad++;
			continue;
		}
		h->group_release = true;
		h->exporter = list[i].exporter;
		h->exporter_value = list[i].exporter_value;
		h->exporter_start = list[i].exporter_start;
	}
	pthread_mutex_unlock(&reg->lock);
	if (bad)
		vmm_log(VMM_LOG_INFO, "group sleep: %zu shared handle(s) named for release stay "
			"resident (unknown, asleep, or held open by the program)", bad);
	if (skipped)
		*skipped = bad;
}

/* Keep a close-on-exec duplicate of fd with h (the registry locked). */
static void keep_dup(vmm_app_registry *reg, struct app_handle *h, int fd)
{
	bool no_memory;

	if (app_share_fd_add(reg, h, fd, &no_memory) < 0)
		vmm_log(VMM_LOG_WARN, "app handle %#llx: %s to keep its descriptor",
			(unsigned long long)h->app, no_memory ? "no host memory" : "no descriptor");
}

/* The exporter ended while the group slept, taking the memory it had released with it: fresh
 * memory goes where the import was mapped, so that the program's pointers do not fault, and the
 * wake fills it from this process's own copy (app_offload.c, copy_back). Only a discarding sleep
 * took none. */
static vmm_status replace_lost(vmm_app_registry *reg, struct app_handle *h, vmm_error *err)
{
	vmm_status st = reg->be->create(reg->be, h->dev, h->size, &h->real, err);

	if (st) {
		h->real = 0;
		return st;
	}
	h->refill = h->has_backup;
	if (h->refill)
		vmm_log(VMM_LOG_WARN, "group wake: pid %d, which exported the memory of app handle "
			"%#llx (%zu bytes), ended while the group slept; new memory is mapped there "
			"and filled from this process's own copy", (int)h->exporter,
			(unsigned long long)h->app, h->size);
	else
		vmm_log(VMM_LOG_ERROR, "group wake: pid %d, which exported the memory of app handle "
			"%#llx (%zu bytes), ended during a group sleep that discarded; new memory "
			"is mapped there, its contents gone", (int)h->exporter,
			(unsigned long long)h->app, h->size);
	return VMM_OK;
}

vmm_status app_share_reimport(vmm_app_registry *reg, struct app_handle *h, vmm_error *err)
{
	bool fetched = !h->nshare_fds;
	int fd = fetched ? -1 : h->share_fds[0], dev = -1;
	vmm_status st;

	h->refill = false;
	if (fetched) {
		if (!reg->refetch || !h->exporter)
			return vmm_fail(err, VMM_E_UNSUPPORTED, 0, "app handle %#llx: no way to ask "
					"its exporter for the memory again",
					(unsigned long long)h->app);
		st = reg->refetch(h->exporter, h->exporter_start, h->exporter_value,
				  reg->wake_deadline, &fd, err);
		if (st == VMM_E_NOT_OURS)
			return replace_lost(reg, h, err);
		if (st)
			return st;
	}
	st = reg->be->import_fd(reg->be, fd, &h->real, &dev, err);
	if (!st && fetched)
		keep_dup(reg, h, fd);   /* a later group sleep matches it with the exporter's */
	if (fetched)
		close(fd);
	if (st)
		h->real = 0;
	return st;
}

void app_share_publish(vmm_app_registry *reg, struct app_handle **hs, size_t n)
{
	for (size_t i = 0; i < n && reg->be->export_fd; i++) {
		struct app_handle *h = hs[i];
		int fd = -1;

		if (h->imported || !h->exported || !h->group_released)
			continue;
		app_share_unpublish(reg, h->app);
		if (reg->be->export_fd(reg->be, h->dev, h->real, &fd, NULL)) {
			vmm_log(VMM_LOG_WARN, "app handle %#llx: not exported ahead for its importers "
				"(they ask for it at their wake)", (unsigned long long)h->app);
			continue;
		}
		keep_dup(reg, h, fd);
		close(fd);
		if (h->nshare_fds)
			app_share_ready_add(reg, h, h->share_fds[h->nshare_fds - 1]);
	}
}

/* A duplicate of the descriptor made ahead for app, or -1. */
static int ready_fd(vmm_app_registry *reg, vmm_phys app, uint64_t *size)
{
	int fd = -1;

	pthread_mutex_lock(&reg->ready_lock);
	for (size_t i = 0; i < reg->nready && fd < 0; i++)
		if (reg->ready[i].app == app) {
			fd = fcntl(reg->ready[i].fd, F_DUPFD_CLOEXEC, 3);
			if (size)
				*size = reg->ready[i].size;
		}
	pthread_mutex_unlock(&reg->ready_lock);
	return fd;
}

void app_share_released(vmm_app_registry *reg, struct app_handle **hs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!hs[i]->group_release)
			continue;
		app_share_unpublish(reg, hs[i]->app);
		app_share_fds_close(hs[i]);
		hs[i]->group_released = true;
	}
}

vmm_status vmm_app_share_export(vmm_app_registry *reg, vmm_phys app, int *fd, uint64_t *size,
				vmm_error *err)
{
	struct app_handle *h;
	vmm_status st;

	if (!reg || !fd)
		return vmm_fail(err, VMM_E_INVALID, 0, "no app registry");
	if (!reg->be->export_fd)
		return vmm_fail(err, VMM_E_UNSUPPORTED, 0, "the %s backend cannot export memory",
				reg->be->name);
	if ((*fd = ready_fd(reg, app, size)) >= 0)
		return VMM_OK;   /* made ahead at the wake: the registry's lock may be busy */
	pthread_mutex_lock(&reg->lock);
	h = app_find(reg, app);
	if (!h || h->imported || !h->exported)
		st = vmm_fail(err, VMM_E_INVALID, 0, "no exported app handle %#llx",
			      (unsigned long long)app);
	else if (h->asleep || !h->real)
		st = vmm_fail(err, VMM_E_BUSY, 0, "app handle %#llx is asleep",
			      (unsigned long long)app);
	else if (!(st = reg->be->export_fd(reg->be, h->dev, h->real, fd, err)))
		keep_dup(reg, h, *fd);
	if (!st && size)
		*size = h->size;
	pthread_mutex_unlock(&reg->lock);
	return st;
}
