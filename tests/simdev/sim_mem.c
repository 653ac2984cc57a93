/* Device memory as host memory: physical handles and native allocations hold memory of the store
 * (sim_store.c), reserved address space is PROT_NONE anonymous memory, a mapping puts the memory
 * over part of a reservation. Touching reserved but unmapped memory, or a mapping without access,
 * faults like a GPU would. */
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim_internal.h"

pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
bool sim_peer_enabled[SIM_MAX_DEVICES][SIM_MAX_DEVICES];

/* A growable array of pointers; tables are small enough for linear search in tests. */
struct ptrvec {
	void **v;
	size_t n, cap;
};

static struct ptrvec phys, reservations, mappings, natives;

static int vec_push(struct ptrvec *pv, void *p)
{
	if (pv->n == pv->cap) {
		size_t cap = pv->cap ? pv->cap * 2 : 64;
		void **v = realloc(pv->v, cap * sizeof(*v));
		if (!v)
			return -1;
		pv->v = v;
		pv->cap = cap;
	}
	pv->v[pv->n++] = p;
	return 0;
}

static void vec_remove(struct ptrvec *pv, void *p)
{
	for (size_t i = 0; i < pv->n; i++)
		if (pv->v[i] == p) {
			pv->v[i] = pv->v[--pv->n];
			return;
		}
}

/* ---- physical handles ---- */

struct sim_phys *sim_phys_of(struct sim_mem *m, unsigned long long handle_types)
{
	struct sim_phys *p = calloc(1, sizeof(*p));
	if (!p || vec_push(&phys, p)) {
		free(p);
		return NULL;
	}
	*p = (struct sim_phys){ .mem = m, .size = m->size, .dev = m->dev, .refs = 1,
				.handle_types = handle_types, .id = m->id };
	return p;
}

struct sim_phys *sim_phys_create(int dev, size_t size, int *err_oom)
{
	enum sim_err e;
	struct sim_mem *m = sim_mem_create(dev, size, &e);
	struct sim_phys *p = m ? sim_phys_of(m, 0) : NULL;
	if (m && !p)
		sim_mem_put(m);
	*err_oom = !p;
	return p;
}

struct sim_phys *sim_phys_lookup(uint64_t handle)
{
	for (size_t i = 0; i < phys.n; i++)
		if ((uint64_t)(uintptr_t)phys.v[i] == handle &&
		    ((struct sim_phys *)phys.v[i])->refs)
			return phys.v[i];
	return NULL;
}

uint64_t sim_phys_handle(struct sim_phys *p)
{
	return (uint64_t)(uintptr_t)p;
}

static void phys_maybe_free(struct sim_phys *p)
{
	if (p->refs || p->maps)
		return;
	vec_remove(&phys, p);
	sim_mem_put(p->mem);
	free(p);
}

void sim_phys_retain(struct sim_phys *p)
{
	p->refs++;
}

void sim_phys_release(struct sim_phys *p)
{
	if (p->refs)
		p->refs--;
	phys_maybe_free(p);
}

/* ---- address space ---- */

void *sim_va_reserve(size_t size, size_t align, uintptr_t hint)
{
	const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	if (hint && hint % align == 0) {
		void *p = mmap((void *)hint, size, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0);
		if (p == (void *)hint)
			return p;
		if (p != MAP_FAILED)
			munmap(p, size);
	}
	if (size + align < size)
		return NULL;
	char *p = mmap(NULL, size + align, PROT_NONE, flags, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	uintptr_t start = sim_round_up((uintptr_t)p, align);
	if (start > (uintptr_t)p)
		munmap(p, start - (uintptr_t)p);
	size_t tail = (uintptr_t)p + size + align - (start + size);
	if (tail)
		munmap((void *)(start + size), tail);
	return (void *)start;
}

int sim_reservation_add(uintptr_t va, size_t size)
{
	struct sim_reservation *r = malloc(sizeof(*r));
	if (!r || vec_push(&reservations, r)) {
		free(r);
		return -1;
	}
	r->va = va;
	r->size = size;
	return 0;
}

struct sim_reservation *sim_reservation_find(uintptr_t va, size_t size)
{
	for (size_t i = 0; i < reservations.n; i++) {
		struct sim_reservation *r = reservations.v[i];
		if (va >= r->va && size <= r->size && va - r->va <= r->size - size)
			return r;
	}
	return NULL;
}

struct sim_reservation *sim_reservation_exact(uintptr_t va)
{
	for (size_t i = 0; i < reservations.n; i++) {
		struct sim_reservation *r = reservations.v[i];
		if (r->va == va)
			return r;
	}
	return NULL;
}

bool sim_reservation_has_mappings(struct sim_reservation *r)
{
	for (size_t i = 0; i < mappings.n; i++) {
		struct sim_mapping *m = mappings.v[i];
		if (m->va >= r->va && m->va < r->va + r->size)
			return true;
	}
	return false;
}

void sim_reservation_remove(struct sim_reservation *r)
{
	munmap((void *)r->va, r->size);
	vec_remove(&reservations, r);
	free(r);
}

int sim_va_unmap_to_reservation(uintptr_t va, size_t size)
{
	void *p = mmap((void *)va, size, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	return p == MAP_FAILED ? -1 : 0;
}

/* ---- mappings ---- */

struct sim_mapping *sim_mapping_at(uintptr_t p)
{
	for (size_t i = 0; i < mappings.n; i++) {
		struct sim_mapping *m = mappings.v[i];
		if (p >= m->va && p - m->va < m->size)
			return m;
	}
	return NULL;
}

bool sim_mapping_overlaps(uintptr_t va, size_t size)
{
	for (size_t i = 0; i < mappings.n; i++) {
		struct sim_mapping *m = mappings.v[i];
		if (va < m->va + m->size && m->va < va + size)
			return true;
	}
	return false;
}

struct sim_mapping *sim_mapping_add(uintptr_t va, size_t size, size_t offset, struct sim_phys *ph)
{
	struct sim_mapping *m = calloc(1, sizeof(*m));
	if (!m || vec_push(&mappings, m)) {
		free(m);
		return NULL;
	}
	if (sim_mem_map(ph->mem, va, size, offset, PROT_NONE)) {
		vec_remove(&mappings, m);
		free(m);
		return NULL;
	}
	m->va = va;
	m->size = size;
	m->offset = offset;
	m->phys = ph;
	ph->maps++;
	return m;
}

void sim_mapping_remove(struct sim_mapping *m)
{
	vec_remove(&mappings, m);
	m->phys->maps--;
	phys_maybe_free(m->phys);
	free(m);
}

size_t sim_mapping_count(void)
{
	return mappings.n;
}

struct sim_mapping *sim_mapping_get(size_t i)
{
	return mappings.v[i];
}

/* The CPU stands for every device: it may read when some device may read, write when some may
 * write. Per-device rights are checked by copies and by simdev_check_access. */
int sim_mapping_protect(struct sim_mapping *m)
{
	int prot = PROT_NONE;
	for (int d = 0; d < SIM_MAX_DEVICES; d++) {
		if (m->access[d] & 1)
			prot |= PROT_READ;
		if (m->access[d] & 2)
			prot |= PROT_WRITE;
	}
	return mprotect((void *)m->va, m->size, prot);
}

/* ---- native allocations ---- */

struct sim_native *sim_native_add(struct sim_native *n)
{
	struct sim_native *c = malloc(sizeof(*c));
	if (!c || vec_push(&natives, c)) {
		free(c);
		return NULL;
	}
	*c = *n;
	c->id = sim_next_id();
	return c;
}

struct sim_native *sim_native_at(uintptr_t p)
{
	for (size_t i = 0; i < natives.n; i++) {
		struct sim_native *n = natives.v[i];
		size_t len = n->size ? n->size : 1;
		if (p >= n->va && p - n->va < len)
			return n;
	}
	return NULL;
}

struct sim_native *sim_native_exact(uintptr_t p)
{
	for (size_t i = 0; i < natives.n; i++) {
		struct sim_native *n = natives.v[i];
		if (n->va == p)
			return n;
	}
	return NULL;
}

void sim_native_remove(struct sim_native *n)
{
	vec_remove(&natives, n);
	free(n);
}

size_t sim_native_count(void)
{
	return natives.n;
}

struct sim_native *sim_native_get(size_t i)
{
	return natives.v[i];
}

struct sim_native *sim_native_device_alloc(int dev, size_t size, enum sim_native_kind kind,
					   int *err_oom)
{
	size_t span = sim_round_up(size ? size : 1, SIM_GRANULARITY);
	enum sim_err e;
	struct sim_mem *mem = sim_mem_create(dev, span, &e);
	*err_oom = 1;
	if (!mem)
		return NULL;
	void *va = sim_va_reserve(span, SIM_GRANULARITY, 0);
	if (!va)
		goto fail_mem;
	if (sim_mem_map(mem, (uintptr_t)va, span, 0, PROT_READ | PROT_WRITE))
		goto fail_va;
	struct sim_native tmpl = { .va = (uintptr_t)va, .size = size, .span = span, .kind = kind,
				   .dev = dev, .mem = mem };
	struct sim_native *n = sim_native_add(&tmpl);
	if (!n)
		goto fail_va;
	*err_oom = 0;
	return n;
fail_va:
	munmap(va, span);
fail_mem:
	sim_mem_put(mem);
	return NULL;
}

void sim_native_device_free(struct sim_native *n)
{
	struct sim_mem *mem = n->mem;
	munmap((void *)n->va, n->span);
	sim_native_remove(n);
	sim_mem_put(mem);
}

/* ---- lookups ---- */

bool sim_find(uintptr_t p, struct sim_region *out)
{
	struct sim_mapping *m = sim_mapping_at(p);
	if (m) {
		*out = (struct sim_region){ .base = m->va, .size = m->size, .dev = m->phys->dev,
					    .map = m };
		return true;
	}
	struct sim_native *n = sim_native_at(p);
	if (n) {
		*out = (struct sim_region){ .base = n->va, .size = n->size, .dev = n->dev,
					    .native = n };
		return true;
	}
	return false;
}

static bool is_device_kind(const struct sim_native *n)
{
	return n->kind == SIM_NATIVE_DEVICE || n->kind == SIM_NATIVE_MANAGED;
}

bool sim_in_reservation(uintptr_t p)
{
	return sim_reservation_find(p, 1) != NULL;
}

int sim_access(int dev, uintptr_t p, size_t n, bool write)
{
	struct sim_region r;
	if (!sim_find(p, &r))
		return sim_in_reservation(p) ? -1 : 1;
	if (r.native && !is_device_kind(r.native))
		return 1;
	if (dev < 0 || dev >= SIM_MAX_DEVICES)
		return -1;
	if (n == 0)
		n = 1;
	uintptr_t end = p + n;
	while (p < end) {
		if (!sim_find(p, &r))
			return -1;
		if (r.map) {
			unsigned need = write ? 3 : 1;
			if ((r.map->access[dev] & need) != need)
				return -1;
		} else if (!is_device_kind(r.native)) {
			return -1;
		} else if (r.native->kind == SIM_NATIVE_DEVICE && r.native->dev != dev &&
			   !sim_peer_enabled[dev][r.native->dev]) {
			return -1;
		}
		size_t len = r.native ? r.native->span : r.size;
		p = r.base + len;
	}
	return 0;
}
