/* The H200 cost model of driver_model.h.
 *
 * Per call, by the size of each handle it touches (one H200, driver 580, medians of 20-30 calls;
 * between the sizes measured, interpolated on log2 of the size):
 *
 *   handle        create   map   set access   unmap   release
 *   2 MiB          8.5     0.8     22.4       14.4      9.4    us
 *   64 MiB         8.9     0.7     44.8       21.9     28.0
 *   1 GiB         17.6     0.9     70.5       30.3    307.4   (release: x size beyond 1 GiB)
 *
 * A set access or unmap over a range of several handles costs the sum over its handles; for
 * 2 MiB handles in such a range the per-handle figures measured on a 1 GiB range of 512 handles
 * are used instead (set access 15.2 ms / 512 = 29.7 us; unmap + release 17.4 ms / 512, less the
 * release, = 24.6 us). What the model assumes: the cost is per handle and does not depend on
 * what else the driver or the GPU is doing; calls made on several threads at once (the core
 * releases on up to 4) cost as much as one after another (`us`), or, at best, the releases are
 * spread evenly (us - release_us * 3/4). Synchronizations are counted, not costed: on an idle
 * context one costs 0.5 us, during training it costs whatever work is queued. Measured beside
 * running kernels (tests/gpu/PROBE.md (f)), moves and re-creations cost 1.2-1.5x these figures
 * and do not slow the kernels; the model leaves that factor out because it scales every policy
 * alike. */
#include "driver_model.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MiB (1ull << 20)
#define GiB (1ull << 30)

enum op { OP_CREATE, OP_MAP, OP_ACCESS, OP_UNMAP, OP_RELEASE };

static const double cost_table[5][3] = {
	{ 8.5, 8.9, 17.6 },    /* create */
	{ 0.8, 0.7, 0.9 },     /* map */
	{ 22.4, 44.8, 70.5 },  /* set access, a range of one handle */
	{ 14.4, 21.9, 30.3 },  /* unmap, one handle */
	{ 9.4, 28.0, 307.4 },  /* release */
};

static double cost(enum op op, uint64_t size)
{
	const double *t = cost_table[op];
	double l = log2((double)size / (double)(2 * MiB)); /* 0 at 2 MiB, 5 at 64 MiB, 9 at 1 GiB */

	if (size > GiB)
		return op == OP_RELEASE ? t[2] * (double)size / (double)GiB : t[2];
	if (l <= 0)
		return t[0];
	if (l <= 5)
		return t[0] + (t[1] - t[0]) * l / 5;
	return t[1] + (t[2] - t[1]) * (l - 5) / 4;
}

/* The size of each live mapping by its address (open addressing), and of each handle. */
#define SLOTS (1u << 18)
struct slot {
	uint64_t key, size;
};
static struct slot maps[SLOTS], handles[SLOTS];

static uint64_t slot_of(uint64_t k)
{
	return (k * 0x9E3779B97F4A7C15ull) >> 46;
}

static void put(struct slot *t, uint64_t k, uint64_t size)
{
	for (uint64_t i = slot_of(k);; i = (i + 1) & (SLOTS - 1)) {
		if (!t[i].key || t[i].key == k) {
			t[i].key = k;
			t[i].size = size;
			return;
		}
	}
}

static uint64_t get(const struct slot *t, uint64_t k)
{
	for (uint64_t i = slot_of(k); t[i].key; i = (i + 1) & (SLOTS - 1))
		if (t[i].key == k)
			return t[i].size;
	return 0;
}

/* Deletion by backward shift keeps the probe chains whole. */
static void del(struct slot *t, uint64_t k)
{
	uint64_t i = slot_of(k);

	while (t[i].key && t[i].key != k)
		i = (i + 1) & (SLOTS - 1);
	if (!t[i].key)
		return;
	for (uint64_t j = i;;) {
		j = (j + 1) & (SLOTS - 1);
		if (!t[j].key)
			break;
		uint64_t h = slot_of(t[j].key);

		if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
			t[i] = t[j];
			i = j;
		}
	}
	t[i].key = 0;
}

static struct {
	vmm_status (*create)(vmm_backend *, int, size_t, vmm_phys *, vmm_error *);
	vmm_status (*release)(vmm_backend *, vmm_phys, vmm_error *);
	vmm_status (*map)(vmm_backend *, vmm_devptr, size_t, vmm_phys, vmm_error *);
	vmm_status (*unmap)(vmm_backend *, vmm_devptr, size_t, vmm_error *);
	vmm_status (*set_access)(vmm_backend *, int, vmm_devptr, size_t, const int *, int,
				 vmm_error *);
	vmm_status (*sync)(vmm_backend *, int, vmm_error *);
	pthread_mutex_t lock;
	struct driver_counts c;
} m = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Whether this thread synchronized the device since its driver_model_op_begin: what it spends
 * in the driver from then on is spent while the GPU has nothing queued (after_sync_us). */
static __thread bool op_open, op_synced;
static bool realtime;

void driver_model_realtime(bool on)
{
	realtime = on;
}

void driver_model_op_begin(void)
{
	op_open = true;
	op_synced = false;
}

static double now_us(void);

/* Real time: the driver, one call at a time, first come first served (a ticket lock: a
 * mutex would let a thread that calls again at once go first, and starve the other). */
static _Atomic uint64_t drv_next, drv_serving;

/* A call begins: wait for the driver (in real time); returns when it began. */
static double drv_enter(void)
{
	if (realtime) {
		uint64_t me = atomic_fetch_add(&drv_next, 1);

		while (atomic_load(&drv_serving) != me)
			sched_yield();
	}
	return now_us();
}

/* The call that began at t0 has taken what it took here; in real time it takes the rest of its
 * modelled us, and then lets the next call in. */
static void drv_leave(double t0, double us)
{
	if (!realtime)
		return;
	for (double end = t0 + us; now_us() < end;)
		;
	atomic_fetch_add(&drv_serving, 1);
}

/* Add us of modelled driver time (m.lock held). */
static void charge(double us)
{
	m.c.us += us;
	if (!op_open)
		m.c.own_thread_us += us;
	if (op_open && op_synced)
		m.c.after_sync_us += us;
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Add the wall time since t0 to the time measured inside calls. */
static void took(double t0)
{
	double us = now_us() - t0;

	pthread_mutex_lock(&m.lock);
	m.c.call_us += us;
	pthread_mutex_unlock(&m.lock);
}

/* The cost of a set access (or unmap) over [va, va+size): per handle mapped there (2 MiB
 * handles in a range of several at the figures of the 512-handle range). */
static double range_cost(enum op op, vmm_devptr va, size_t size, uint64_t *handles)
{
	uint64_t n = 0;
	double us = 0;

	for (vmm_devptr p = va; p < va + size; n++) {
		uint64_t s = get(maps, p);

		if (!s) {
			n = 1; /* not mappings we saw: count it as one handle */
			us = cost(op, size);
			break;
		}
		p += s;
	}
	for (vmm_devptr p = va; n > 1 && p < va + size;) {
		uint64_t s = get(maps, p);

		us += s == 2 * MiB ? (op == OP_ACCESS ? 29.7 : 24.6) : cost(op, s);
		p += s;
	}
	if (n == 1 && !us)
		us = cost(op, size);
	*handles += n;
	return us;
}

static vmm_status w_create(vmm_backend *be, int dev, size_t size, vmm_phys *h, vmm_error *err)
{
	double t0 = drv_enter();
	vmm_status st = m.create(be, dev, size, h, err);

	took(t0);
	pthread_mutex_lock(&m.lock);
	m.c.creates++;
	charge(cost(OP_CREATE, size));
	if (!st)
		put(handles, *h + 1, size);
	pthread_mutex_unlock(&m.lock);
	drv_leave(t0, cost(OP_CREATE, size));
	return st;
}

static vmm_status w_release(vmm_backend *be, vmm_phys h, vmm_error *err)
{
	uint64_t size;
	vmm_status st;
	double us, t0;

	pthread_mutex_lock(&m.lock);
	size = get(handles, h + 1);
	us = cost(OP_RELEASE, size ? size : 2 * MiB);
	m.c.releases++;
	charge(us);
	m.c.release_us += us;
	del(handles, h + 1);
	pthread_mutex_unlock(&m.lock);
	t0 = drv_enter();
	st = m.release(be, h, err);
	took(t0);
	drv_leave(t0, us);
	return st;
}

static vmm_status w_map(vmm_backend *be, vmm_devptr va, size_t size, vmm_phys h, vmm_error *err)
{
	double t0 = drv_enter();
	vmm_status st = m.map(be, va, size, h, err);

	took(t0);
	pthread_mutex_lock(&m.lock);
	m.c.maps++;
	charge(cost(OP_MAP, size));
	if (!st)
		put(maps, va, size);
	pthread_mutex_unlock(&m.lock);
	drv_leave(t0, cost(OP_MAP, size));
	return st;
}

static vmm_status w_unmap(vmm_backend *be, vmm_devptr va, size_t size, vmm_error *err)
{
	vmm_status st;
	double t0, us;

	pthread_mutex_lock(&m.lock);
	m.c.unmap_calls++;
	us = range_cost(OP_UNMAP, va, size, &m.c.unmapped);
	charge(us);
	pthread_mutex_unlock(&m.lock);
	t0 = drv_enter();
	st = m.unmap(be, va, size, err);
	took(t0);
	drv_leave(t0, us);
	if (!st) {
		pthread_mutex_lock(&m.lock);
		for (vmm_devptr p = va; p < va + size;) {
			uint64_t s = get(maps, p);

			if (!s)
				break;
			del(maps, p);
			p += s;
		}
		pthread_mutex_unlock(&m.lock);
	}
	return st;
}

static vmm_status w_access(vmm_backend *be, int dev, vmm_devptr va, size_t size, const int *peers,
			   int npeers, vmm_error *err)
{
	vmm_status st;
	double t0, us;

	pthread_mutex_lock(&m.lock);
	m.c.access_calls++;
	us = range_cost(OP_ACCESS, va, size, &m.c.access_handles);
	charge(us);
	pthread_mutex_unlock(&m.lock);
	t0 = drv_enter();
	st = m.set_access(be, dev, va, size, peers, npeers, err);
	took(t0);
	drv_leave(t0, us);
	return st;
}

static vmm_status w_sync(vmm_backend *be, int dev, vmm_error *err)
{
	vmm_status st;
	double t0;

	pthread_mutex_lock(&m.lock);
	m.c.syncs++;
	pthread_mutex_unlock(&m.lock);
	t0 = now_us();
	st = m.sync(be, dev, err);

	took(t0);
	if (!st)
		op_synced = true;
	return st;
}

void driver_model_attach(vmm_backend *be)
{
	memset(&m.c, 0, sizeof(m.c));
	memset(maps, 0, sizeof(maps));
	memset(handles, 0, sizeof(handles));
	m.create = be->create;
	m.release = be->release;
	m.map = be->map;
	m.unmap = be->unmap;
	m.set_access = be->set_access;
	m.sync = be->synchronize;
	be->create = w_create;
	be->release = w_release;
	be->map = w_map;
	be->unmap = w_unmap;
	be->set_access = w_access;
	be->synchronize = w_sync;
}

void driver_model_detach(vmm_backend *be)
{
	be->create = m.create;
	be->release = m.release;
	be->map = m.map;
	be->unmap = m.unmap;
	be->set_access = m.set_access;
	be->synchronize = m.sync;
}

struct driver_counts driver_model_get(void)
{
	struct driver_counts c;

	pthread_mutex_lock(&m.lock);
	c = m.c;
	pthread_mutex_unlock(&m.lock);
	return c;
}

struct driver_counts driver_counts_sub(struct driver_counts b, struct driver_counts a)
{
	return (struct driver_counts){
		.creates = b.creates - a.creates, .maps = b.maps - a.maps,
		.unmap_calls = b.unmap_calls - a.unmap_calls, .unmapped = b.unmapped - a.unmapped,
		.access_calls = b.access_calls - a.access_calls,
		.access_handles = b.access_handles - a.access_handles,
		.releases = b.releases - a.releases, .syncs = b.syncs - a.syncs,
		.us = b.us - a.us, .release_us = b.release_us - a.release_us,
		.after_sync_us = b.after_sync_us - a.after_sync_us,
		.own_thread_us = b.own_thread_us - a.own_thread_us,
		.call_us = b.call_us - a.call_us,
	};
}
