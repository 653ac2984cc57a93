/* simdev internals shared by the simulated libcuda.so.1 and libascendcl.so. Each library links
 * its own copy (a static library of hidden symbols), so each has its own devices, counters and
 * stats file. Nothing here is exported. */
#ifndef SIMDEV_INTERNAL_H
#define SIMDEV_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

#define SIM_MAX_DEVICES 16
#define SIM_GRANULARITY ((size_t)2 << 20)
#define SIM_DEFAULT_MEMORY ((size_t)16 << 30)

/* One per exported function: how often it was called. Linked into a list on first call. */
struct sim_counter {
	const char *name;
	atomic_ulong calls;
	atomic_int linked;
	struct sim_counter *next;
};

struct sim_config {
	size_t memory;  /* capacity per device, bytes */
	int devices;    /* number of devices */
	const char *stats_path;
};

/* Reads the environment once (at first use), then counts the call and says whether SIMDEV_FAIL
 * asks this call to fail. */
bool sim_enter(struct sim_counter *c);
const struct sim_config *sim_config(void);
/* Defined by each library: "cuda" or "acl" (acl prefers SIMDEV_ACL_STATS for its stats file). */
extern const char sim_lib_name[];

/* Count the call of exported function `fname_`; return `failcode` from the caller when an injected
 * failure is due. */
#define SIM_BEGIN(fname_, failcode)                                              \
	do {                                                                   \
		static struct sim_counter sim_ctr_ = { .name = (fname_) };       \
		if (sim_enter(&sim_ctr_))                                      \
			return (failcode);                                     \
	} while (0)

/* ---- physical memory, address space, mappings (sim_mem.c) ---- */

/* Physical memory: a memfd. Charged to its device from create to destruction. */
struct sim_phys {
	int fd;
	size_t size;
	int dev;
	unsigned maps;    /* mappings that use it */
	bool released;    /* the owner released its handle; freed once maps == 0 */
	bool imported;    /* made by import: the exporter's memory, not charged again */
	unsigned long long handle_types;
	uint64_t id;
};

struct sim_reservation {
	uintptr_t va;
	size_t size;
};

/* A VMM mapping: [va, va+size) shows phys at offset. Access per device (CU_MEM_ACCESS_FLAGS_*). */
struct sim_mapping {
	uintptr_t va;
	size_t size;
	size_t offset;
	struct sim_phys *phys;
	unsigned char access[SIM_MAX_DEVICES];
};

enum sim_native_kind {
	SIM_NATIVE_DEVICE,
	SIM_NATIVE_MANAGED,
	SIM_NATIVE_HOST,
	SIM_NATIVE_REGISTERED,
};

/* A native allocation (cuMemAlloc and friends) or a host range the driver knows. */
struct sim_native {
	uintptr_t va;
	size_t size;     /* what was asked */
	size_t span;     /* what is mapped (device kinds: rounded to the granularity) */
	enum sim_native_kind kind;
	int dev;
	void *ctx;
	void *pool;      /* the memory pool of a stream-ordered allocation, else NULL */
	struct sim_phys *phys; /* device kinds */
	uint64_t id;
	void *graph;     /* allocated during stream capture: owned by this graph */
	bool freeing;    /* a stream-ordered free is queued */
	bool ipc;        /* opened with cuIpcOpenMemHandle: closed, not freed */
};

/* What an address belongs to. */
struct sim_region {
	uintptr_t base;
	size_t size;
	int dev;
	struct sim_mapping *map;   /* VMM memory: the mapping */
	struct sim_native *native; /* native memory */
};

extern pthread_mutex_t sim_lock; /* guards every table below; never held while user code runs */

size_t sim_round_up(size_t n, size_t to);
int sim_device_count(void);
/* Charge/uncharge device bytes against the capacity; false when it would exceed it. */
bool sim_charge(int dev, size_t bytes);
void sim_uncharge(int dev, size_t bytes);
size_t sim_used(int dev);
uint64_t sim_next_id(void);

/* Physical handles (caller holds sim_lock). */
struct sim_phys *sim_phys_create(int dev, size_t size, int *err_oom);
struct sim_phys *sim_phys_lookup(uint64_t handle);
uint64_t sim_phys_handle(struct sim_phys *p);
void sim_phys_put(struct sim_phys *p); /* frees it when released and unmapped */
struct sim_phys *sim_phys_import(int fd, int dev);

/* Address space (caller holds sim_lock). */
void *sim_va_reserve(size_t size, size_t align, uintptr_t hint);
int sim_reservation_add(uintptr_t va, size_t size);
struct sim_reservation *sim_reservation_find(uintptr_t va, size_t size);
struct sim_reservation *sim_reservation_exact(uintptr_t va);
bool sim_reservation_has_mappings(struct sim_reservation *r);
void sim_reservation_remove(struct sim_reservation *r);

struct sim_mapping *sim_mapping_at(uintptr_t p);
bool sim_mapping_overlaps(uintptr_t va, size_t size);
struct sim_mapping *sim_mapping_add(uintptr_t va, size_t size, size_t offset, struct sim_phys *ph);
void sim_mapping_remove(struct sim_mapping *m); /* caller already restored the reservation */
size_t sim_mapping_count(void);
struct sim_mapping *sim_mapping_get(size_t i);
int sim_mapping_protect(struct sim_mapping *m); /* apply the access bits to the host protection */
int sim_va_unmap_to_reservation(uintptr_t va, size_t size);

struct sim_native *sim_native_add(struct sim_native *n);
struct sim_native *sim_native_at(uintptr_t p);
struct sim_native *sim_native_exact(uintptr_t p);
void sim_native_remove(struct sim_native *n);
size_t sim_native_count(void);
struct sim_native *sim_native_get(size_t i);

/* Device memory of `size` bytes with full access, charged rounded to the granularity. */
struct sim_native *sim_native_device_alloc(int dev, size_t size, enum sim_native_kind kind,
					   int *err_oom);
void sim_native_device_free(struct sim_native *n);

bool sim_find(uintptr_t p, struct sim_region *out);
bool sim_in_reservation(uintptr_t p);

/* Peer access between devices for native memory: peer[from][to]. */
extern bool sim_peer_enabled[SIM_MAX_DEVICES][SIM_MAX_DEVICES];
/* 0 when device `dev` may access [p, p+n) (all of it device memory) for reading (write=false)
 * or writing; 1 when p is not device memory (host memory); -1 when access is illegal. */
int sim_access(int dev, uintptr_t p, size_t n, bool write);

#pragma GCC visibility pop

#endif /* SIMDEV_INTERNAL_H */
