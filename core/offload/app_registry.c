/* The records of the program's own VMM handles and mappings (app_vmm.h): what the shim reports
 * after each successful call, kept sorted so that lookups stay cheap with thousands of handles
 * (PyTorch's expandable segments map one handle per segment page), and the descriptors it
 * exports or imports them through (vmm_app_share_keep, kept by app_share.c). */
#include <stdlib.h>
#include <string.h>

#include "../log.h"
#include "../sorted_search.h"
#include "app_internal.h"

/* Program-side values the registry hands out itself: far from any pointer-like driver value. */
#define OWN_VALUE_BASE ((vmm_phys)0xA5F0000000000000ull)

vmm_status vmm_app_registry_create(vmm_backend *be, vmm_app_registry **out, vmm_error *err)
{
	vmm_app_registry *reg;

	if (!out)
		return vmm_fail(err, VMM_E_INVALID, 0, "no registry pointer to fill");
	*out = NULL;
	if (!be)
		return vmm_fail(err, VMM_E_INVALID, 0, "app registry: no backend");
	reg = calloc(1, sizeof(*reg));
	if (!reg)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for the app registry");
	reg->be = be;
	reg->next_value = OWN_VALUE_BASE;
	pthread_mutex_init(&reg->lock, NULL);
	pthread_mutex_init(&reg->ready_lock, NULL);
	*out = reg;
	return VMM_OK;
}

static void handle_free(vmm_app_registry *reg, struct app_handle *h)
{
	if (h->backup.ptr)
		vmm_host_buf_free(reg->be, &h->backup);
	app_share_unpublish(reg, h->app);
	app_share_fds_close(h);
	free(h->prop);
	free(h);
}

void vmm_app_registry_destroy(vmm_app_registry *reg)
{
	if (!reg)
		return;
	for (size_t i = 0; i < reg->nh; i++)
		handle_free(reg, reg->hs[i]);
	for (int d = 0; d < VMM_MAX_DEVICES; d++)
		vmm_copy_engine_destroy(reg->ce[d]);
	free(reg->hs);
	free(reg->ready);
	pthread_mutex_destroy(&reg->ready_lock);
	free(reg->maps);
	pthread_mutex_destroy(&reg->lock);
	free(reg);
}

/* First index whose app value is >= v. */
static size_t h_lower(vmm_app_registry *reg, vmm_phys v)
{
	size_t lo = 0, hi = reg->nh;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (reg->hs[mid]->app < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct app_handle *app_find(vmm_app_registry *reg, vmm_phys app)
{
	size_t i = h_lower(reg, app);

	return i < reg->nh && reg->hs[i]->app == app ? reg->hs[i] : NULL;
}

static void h_remove(vmm_app_registry *reg, struct app_handle *h)
{
	size_t i = h_lower(reg, h->app);

	if (i < reg->nh && reg->hs[i] == h) {
		memmove(reg->hs + i, reg->hs + i + 1, (reg->nh - i - 1) * sizeof(*reg->hs));
		reg->nh--;
	}
	handle_free(reg, h);
}

/* First mapping index whose va is >= va. */
static size_t m_lower(vmm_app_registry *reg, vmm_devptr va)
{
	return VMM_SORTED_LOWER_BOUND(reg->maps, reg->nm, va, va);
}

/* The mapping holding va, or NULL. */
static struct app_map *m_at(vmm_app_registry *reg, vmm_devptr va)
{
	size_t i = m_lower(reg, va + 1);

	if (i == 0)
		return NULL;
	i--;
	return va - reg->maps[i].va < reg->maps[i].size ? &reg->maps[i] : NULL;
}

static int by_offset(const void *a, const void *b)
{
	const struct app_map *x = *(struct app_map *const *)a, *y = *(struct app_map *const *)b;

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

struct app_map **app_maps_of(vmm_app_registry *reg, struct app_handle *h, size_t *n)
{
	struct app_map **v;
	size_t k = 0;

	*n = 0;
	if (!h->nmaps)
		return NULL;
	v = malloc(h->nmaps * sizeof(*v));
	if (!v)
		return NULL;
	for (size_t i = 0; i < reg->nm && k < h->nmaps; i++)
		if (reg->maps[i].h == h)
			v[k++] = &reg->maps[i];
	qsort(v, k, sizeof(*v), by_offset);
	*n = k;
	return v;
}

bool app_unreleasable(vmm_app_registry *reg, struct app_handle *h)
{
	if (h->exported)
		return !h->group_release;
	if (reg->be->map_at || !h->nmaps)
		return false;
	for (size_t i = 0; i < reg->nm; i++)
		if (reg->maps[i].h == h && (reg->maps[i].offset || reg->maps[i].size != h->size))
			return true;
	return false;
}

static bool value_taken(vmm_app_registry *reg, vmm_phys v)
{
	return app_find(reg, v) != NULL;
}

vmm_phys vmm_app_created_value(vmm_app_registry *reg, vmm_phys real, size_t size, int device,
			       const void *prop, size_t prop_size)
{
	struct app_handle *h, *old;
	vmm_phys value = real;
	size_t i;

	if (!reg || !real || !size)
		return 0;
	h = calloc(1, sizeof(*h));
	if (!h)
		return 0;
	if (prop && prop_size) {
		h->prop = malloc(prop_size);
		if (!h->prop) {
			free(h);
			return 0;
		}
		memcpy(h->prop, prop, prop_size);
		h->prop_size = prop_size;
	}
	h->real = real;
	h->size = size;
	h->dev = device;
	h->refs = 1;
	pthread_mutex_lock(&reg->lock);
	old = app_find(reg, real);
	if (old && old->real == real && !old->nmaps) {
		/* A record the program no longer reaches (its release went unreported): the driver
		 * gave the value out again, so the old one is gone. */
		h_remove(reg, old);
		old = NULL;
	}
	if (old) {
		do
			value = reg->next_value++;
		while (value_taken(reg, value));
	}
	if (reg->nh == reg->caph) {
		size_t c = reg->caph ? reg->caph * 2 : 64;
		struct app_handle **nhs = realloc(reg->hs, c * sizeof(*nhs));

		if (!nhs) {
			pthread_mutex_unlock(&reg->lock);
			free(h->prop);
			free(h);
			vmm_log(VMM_LOG_WARN, "app handle %#llx not tracked: no host memory",
				(unsigned long long)real);
			return 0;
		}
		reg->hs = nhs;
		reg->caph = c;
	}
	h->app = value;
	i = h_lower(reg, value);
	memmove(reg->hs + i + 1, reg->hs + i, (reg->nh - i) * sizeof(*reg->hs));
	reg->hs[i] = h;
	reg->nh++;
	pthread_mutex_unlock(&reg->lock);
	return value;
}

void vmm_app_created(vmm_app_registry *reg, vmm_phys handle, size_t size, int device,
		     const void *prop, size_t prop_size)
{
	vmm_phys v = vmm_app_created_value(reg, handle, size, device, prop, prop_size);

	/* The program is about to hold the real value, which another of its handles already
	 * stands for: only the caller can hand out v instead. */
	if (v && v != handle)
		vmm_log(VMM_LOG_ERROR,
			"app handle value %#llx is taken by a handle re-created at a wake: give the "
			"program %#llx (vmm_app_created_value), or its calls reach the wrong handle",
			(unsigned long long)handle, (unsigned long long)v);
}

void vmm_app_exported(vmm_app_registry *reg, vmm_phys handle)
{
	struct app_handle *h;

	if (!reg)
		return;
	pthread_mutex_lock(&reg->lock);
	h = app_find(reg, handle);
	if (h)
		h->exported = true;
	pthread_mutex_unlock(&reg->lock);
}

void vmm_app_imported(vmm_app_registry *reg, vmm_phys handle, int device)
{
	vmm_phys v;

	/* Recorded like a created handle of one granule, then marked: sizes come from mappings. */
	v = vmm_app_created_value(reg, handle, 1, device, NULL, 0);
	if (!v)
		return;
	pthread_mutex_lock(&reg->lock);
	{
		struct app_handle *h = app_find(reg, v);

		if (h) {
			h->exported = h->imported = true;
			h->size = 0;
		}
	}
	pthread_mutex_unlock(&reg->lock);
	if (v != handle)
		vmm_log(VMM_LOG_ERROR, "imported app handle %#llx collides with a re-created one",
			(unsigned long long)handle);
}

/* One reference fewer; the last one makes the handle the mappings' alone, and gone without them. */
static void drop_ref(vmm_app_registry *reg, struct app_handle *h)
{
	if (--h->refs)
		return;
	h->app_released = true;
	if (!h->nmaps)
		h_remove(reg, h);
}

void vmm_app_released(vmm_app_registry *reg, vmm_phys handle)
{
	struct app_handle *h;

	if (!reg)
		return;
	pthread_mutex_lock(&reg->lock);
	h = app_find(reg, handle);
	if (h && h->refs)
		drop_ref(reg, h);
	pthread_mutex_unlock(&reg->lock);
}

vmm_phys vmm_app_retained(vmm_app_registry *reg, vmm_devptr va, bool *driver_ref)
{
	struct app_map *m;
	vmm_phys v = 0;

	*driver_ref = false;
	if (!reg)
		return 0;
	pthread_mutex_lock(&reg->lock);
	m = m_at(reg, va);
	if (m) {
		struct app_handle *h = m->h;

		*driver_ref = h->refs == 0 && h->real != 0;
		h->refs++;
		h->app_released = false;
		v = h->app;
	}
	pthread_mutex_unlock(&reg->lock);
	return v;
}

enum vmm_app_release_action vmm_app_release_ref(vmm_app_registry *reg, vmm_phys handle,
						vmm_phys *real)
{
	enum vmm_app_release_action a = VMM_APP_RELEASE_DRIVER;
	struct app_handle *h;

	*real = handle;
	if (!reg)
		return a;
	pthread_mutex_lock(&reg->lock);
	h = app_find(reg, handle);
	if (h) {
		*real = h->real;
		if (!h->refs) {
			a = VMM_APP_RELEASE_INVALID;
		} else if (h->refs > 1 || !h->real) {
			/* Asleep: the driver holds nothing; the last reference of a mapped
			 * handle makes wake release it again once mapped. */
			drop_ref(reg, h);
			a = VMM_APP_RELEASE_COUNTED;
		}
	}
	pthread_mutex_unlock(&reg->lock);
	return a;
}

bool vmm_app_prop_of(vmm_app_registry *reg, vmm_phys handle, void *prop, size_t prop_size)
{
	struct app_handle *h;
	bool ok = false;

	if (!reg || !prop)
		return false;
	pthread_mutex_lock(&reg->lock);
	h = app_find(reg, handle);
	if (h && h->prop && h->prop_size == prop_size) {
		memcpy(prop, h->prop, prop_size);
		ok = true;
	}
	pthread_mutex_unlock(&reg->lock);
	return ok;
}

void vmm_app_mapped(vmm_app_registry *reg, vmm_devptr va, size_t size, size_t offset,
		    vmm_phys handle)
{
	struct app_handle *h;
	size_t i;

	if (!reg || !size)
		return;
	pthread_mutex_lock(&reg->lock);
	h = app_find(reg, handle);
	if (!h) {
		/* Imported from another process, or created before the shim knew: not ours to move. */
		pthread_mutex_unlock(&reg->lock);
		vmm_log(VMM_LOG_DEBUG, "app mapping at %#llx of an unknown handle: not tracked",
			(unsigned long long)va);
		return;
	}
	if (reg->nm == reg->capm) {
		size_t c = reg->capm ? reg->capm * 2 : 64;
		struct app_map *nm = realloc(reg->maps, c * sizeof(*nm));

		if (!nm) {
			pthread_mutex_unlock(&reg->lock);
			vmm_log(VMM_LOG_WARN, "app mapping at %#llx not tracked: no host memory",
				(unsigned long long)va);
			return;
		}
		reg->maps = nm;
		reg->capm = c;
	}
	i = m_lower(reg, va);
	memmove(reg->maps + i + 1, reg->maps + i, (reg->nm - i) * sizeof(*reg->maps));
	reg->maps[i] = (struct app_map){ .va = va, .size = size, .offset = offset, .h = h };
	reg->nm++;
	h->nmaps++;
	if (h->imported && offset + size > h->size)
		h->size = offset + size;
	pthread_mutex_unlock(&reg->lock);
}

void vmm_app_unmapped(vmm_app_registry *reg, vmm_devptr va, size_t size)
{
	size_t i;

	if (!reg || !size)
		return;
	pthread_mutex_lock(&reg->lock);
	i = m_lower(reg, va);
	/* cuMemUnmap takes whole mappings: drop every mapping that starts inside the range. */
	while (i < reg->nm && reg->maps[i].va < va + size) {
		struct app_handle *h = reg->maps[i].h;

		memmove(reg->maps + i, reg->maps + i + 1, (reg->nm - i - 1) * sizeof(*reg->maps));
		reg->nm--;
		if (--h->nmaps == 0 && h->app_released)
			h_remove(reg, h);
	}
	pthread_mutex_unlock(&reg->lock);
}

static void access_change(vmm_app_registry *reg, vmm_devptr va, size_t size,
			  vmm_access_mask set, vmm_access_mask clear)
{
	size_t i;

	if (!reg || !size)
		return;
	pthread_mutex_lock(&reg->lock);
	i = m_lower(reg, va);
	if (i > 0 && reg->maps[i - 1].va + reg->maps[i - 1].size > va)
		i--;
	for (; i < reg->nm && reg->maps[i].va < va + size; i++)
		reg->maps[i].rw = (reg->maps[i].rw & ~clear) | set;
	pthread_mutex_unlock(&reg->lock);
}

void vmm_app_access_set(vmm_app_registry *reg, vmm_devptr va, size_t size, vmm_access_mask rw)
{
	access_change(reg, va, size, rw, ~(vmm_access_mask)0);
}

void vmm_app_access_revoke(vmm_app_registry *reg, vmm_devptr va, size_t size,
			   vmm_access_mask mask)
{
	access_change(reg, va, size, 0, mask);
}

vmm_phys vmm_app_real_handle(vmm_app_registry *reg, vmm_phys app_handle)
{
	struct app_handle *h;
	vmm_phys real = app_handle;

	if (!reg)
		return app_handle;
	pthread_mutex_lock(&reg->lock);
	h = app_find(reg, app_handle);
	if (h)
		real = h->real;
	pthread_mutex_unlock(&reg->lock);
	return real;
}

vmm_phys vmm_app_program_handle(vmm_app_registry *reg, vmm_phys real)
{
	vmm_phys v = real;

	if (!reg || !real)
		return real;
	pthread_mutex_lock(&reg->lock);
	for (size_t i = 0; i < reg->nh; i++)
		if (reg->hs[i]->real == real) {
			v = reg->hs[i]->app;
			break;
		}
	pthread_mutex_unlock(&reg->lock);
	return v;
}

bool vmm_app_contains(vmm_app_registry *reg, vmm_devptr va)
{
	bool in;

	if (!reg)
		return false;
	pthread_mutex_lock(&reg->lock);
	in = m_at(reg, va) != NULL;
	pthread_mutex_unlock(&reg->lock);
	return in;
}

bool vmm_app_is_asleep(vmm_app_registry *reg, int device)
{
	bool asleep = false;

	if (!reg)
		return false;
	pthread_mutex_lock(&reg->lock);
	for (size_t i = 0; i < reg->nh && !asleep; i++)
		asleep = reg->hs[i]->asleep && (device < 0 || reg->hs[i]->dev == device);
	pthread_mutex_unlock(&reg->lock);
	return asleep;
}

void vmm_app_stats_get(vmm_app_registry *reg, int dev, vmm_app_stats *out)
{
	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	if (!reg)
		return;
	pthread_mutex_lock(&reg->lock);
	for (size_t i = 0; i < reg->nh; i++) {
		struct app_handle *h = reg->hs[i];

		if (dev >= 0 && h->dev != dev)
			continue;
		if (!h->imported) {
			out->handles++;
			out->handle_bytes += h->size;
		}
		if (h->asleep)
			out->asleep_bytes += h->size;
		if (h->backup.ptr)
			out->host_backup_bytes += h->backup.size;
		if (h->asleep)
			continue;   /* released (a group sleep releases shared ones too) */
		if (app_unreleasable(reg, h))
			out->unreleasable_bytes += h->size;
		if (h->exported)   /* imported handles are marked exported too */
			out->shared_bytes += h->size;
	}
	for (size_t i = 0; i < reg->nm; i++)
		if ((dev < 0 || reg->maps[i].h->dev == dev) && !reg->maps[i].h->asleep)
			out->mapped_bytes += reg->maps[i].size;
	pthread_mutex_unlock(&reg->lock);
}

void vmm_app_share_keep(vmm_app_registry *reg, vmm_phys handle, int fd)
{
	struct app_handle *h;
	bool no_memory = false;
	int dup_fd = -1;

	if (!reg || fd < 0)
		return;
	pthread_mutex_lock(&reg->lock);
	h = app_find(reg, handle);
	if (!h) {
		pthread_mutex_unlock(&reg->lock);
		return;
	}
	dup_fd = app_share_fd_add(reg, h, fd, &no_memory);
	if (dup_fd >= 0 && !h->imported)   /* importers fetch it without waiting for our lock */
		app_share_ready_add(reg, h, dup_fd);
	pthread_mutex_unlock(&reg->lock);
	if (dup_fd < 0)
		vmm_log(VMM_LOG_WARN, "app handle %#llx: descriptor %d not kept (%s); a group sleep "
			"cannot tell who shares it", (unsigned long long)handle, fd,
			no_memory ? "no host memory" : "dup failed");
}
