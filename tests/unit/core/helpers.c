/* Test helpers for the core's unit tests (see helpers.h). */
#include "helpers.h"
#include "heap_offload.h"

#include <criterion/criterion.h>
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void t_simdev_env(const char *memory, const char *devices, const char *fail)
{
	if (memory)
		setenv("SIMDEV_MEMORY", memory, 1);
	if (devices)
		setenv("SIMDEV_DEVICES", devices, 1);
	if (fail)
		setenv("SIMDEV_FAIL", fail, 1);
}

typedef CUresult (*retain_fn)(CUmemGenericAllocationHandle *, void *);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);

/* The handle mapped at va, asked of the driver (its reference given back at once): false when
 * nothing is mapped there, or the driver has no such call. */
static bool handle_at(vmm_devptr va, CUmemGenericAllocationHandle *h)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	retain_fn retain = lib ? (retain_fn)dlsym(lib, "cuMemRetainAllocationHandle") : NULL;
	release_fn release = lib ? (release_fn)dlsym(lib, "cuMemRelease") : NULL;

	if (!retain || !release || retain(h, (void *)(uintptr_t)va) != CUDA_SUCCESS)
		return false;
	release(*h);
	return true;
}

size_t t_handles_over(vmm_devptr p, size_t size)
{
	const vmm_devptr gran = 2 * MiB;
	CUmemGenericAllocationHandle prev = 0;
	size_t n = 0;

	for (vmm_devptr va = p & ~(gran - 1); va < p + size; va += gran) {
		CUmemGenericAllocationHandle h;

		cr_assert(handle_at(va, &h), "0x%llx is mapped", (unsigned long long)va);
		n += !n || h != prev;
		prev = h;
	}
	return n;
}

bool t_mapped(vmm_devptr p, size_t size)
{
	const vmm_devptr gran = 2 * MiB;

	for (vmm_devptr va = p & ~(gran - 1); va < p + size; va += gran) {
		CUmemGenericAllocationHandle h;

		if (!handle_at(va, &h))
			return false;
	}
	return true;
}

char *t_read_log(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n;

	cr_assert(f, "no log file at %s", path);
	n = fread(buf, 1, cap - 1, f);
	buf[n] = 0;
	fclose(f);
	unlink(path);
	return buf;
}

int t_run_child(int (*scenario)(void), const char *const *env, long long *live)
{
	char stats[] = "/tmp/vmm-core-child-stats-XXXXXX";
	char line[128];
	int fd = mkstemp(stats), status;
	pid_t pid;
	FILE *f;

	cr_assert_geq(fd, 0);
	close(fd);
	pid = fork();
	if (pid == 0) {
		unsetenv("SIMDEV_FAIL");
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		setenv("SIMDEV_STATS", stats, 1);
		exit(scenario());
	}
	cr_assert_gt(pid, 0);
	waitpid(pid, &status, 0);
	*live = -1;
	f = fopen(stats, "r");
	while (f && fgets(line, sizeof(line), f))
		sscanf(line, "live_bytes %lld", live);
	if (f)
		fclose(f);
	unlink(stats);
	return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

vmm_devptr t_import_view(struct tctx *t, const vmm_share_info *want, bool *fresh)
{
	vmm_share_piece pieces[VMM_SHARE_MAX_PIECES];
	vmm_share_info info;
	vmm_devptr va;
	vmm_error err;
	size_t n;
	int dev = 0;

	cr_assert_eq(vmm_share_fds(t->core, want->base, want->id, &info, pieces,
				   VMM_SHARE_MAX_PIECES, &n, fresh, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(info.span, want->span);
	cr_assert_eq(t->be->reserve(t->be, 0, info.span_size, 0, &va, &err), VMM_OK, "%s", err.msg);
	for (size_t i = 0; i < n; i++) {
		vmm_phys h;

		cr_assert_eq(t->be->import_fd(t->be, pieces[i].fd, &h, &dev, &err), VMM_OK, "%s",
			     err.msg);
		close(pieces[i].fd);
		cr_assert_eq(t->be->map_at(t->be, va + pieces[i].offset, pieces[i].size,
					   pieces[i].handle_offset, h, &err), VMM_OK, "%s", err.msg);
		t->be->release(t->be, h, &err); /* the mapping holds it */
	}
	cr_assert_eq(t->be->set_access(t->be, 0, va, info.span_size, NULL, 0, &err), VMM_OK);
	return va + (info.base - info.span);
}

void t_import_drop(struct tctx *t, const vmm_share_info *want, vmm_devptr view)
{
	vmm_devptr va = view - (want->base - want->span);
	vmm_error err;

	t->be->unmap(t->be, va, want->span_size, &err);
	t->be->unreserve(t->be, 0, va, want->span_size, &err);
}

vmm_status t_try_open(struct tctx *t, const vmm_config *cfg, vmm_error *err)
{
	vmm_status st;

	const char *kind = getenv("VMM_TEST_BACKEND");

	memset(t, 0, sizeof(*t));
	if (kind && !strcmp(kind, "acl"))
		st = vmm_backend_acl_open(&t->be, err);
	else
		st = vmm_backend_cuda_open(&t->be, err);
	if (st)
		return st;
	st = vmm_core_create(t->be, cfg, &t->core, err);
	if (st) {
		t->be->close(t->be);
		t->be = NULL;
	}
	return st;
}

void t_open(struct tctx *t, const vmm_config *cfg)
{
	vmm_error err = { 0 };
	vmm_status st = t_try_open(t, cfg, &err);

	cr_assert_eq(st, VMM_OK, "opening the core on simdev: %s: %s", vmm_status_name(st),
		     err.msg);
}

void t_close(struct tctx *t)
{
	if (t->core)
		vmm_core_destroy(t->core);
	if (t->be)
		t->be->close(t->be);
	memset(t, 0, sizeof(*t));
}

uint64_t t_dev_used(struct tctx *t, int dev)
{
	size_t f = 0, tot = 0;

	/* One retry: under fault injection only one call in a row fails. */
	if (t->be->mem_info(t->be, dev, &f, &tot, NULL) &&
	    t->be->mem_info(t->be, dev, &f, &tot, NULL))
		return UINT64_MAX;
	return tot - f;
}

/* simdev's functions, found in the libcuda.so.1 the backend loaded. */
static void *simdev_fn(const char *name)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *fn = lib ? dlsym(lib, name) : NULL;

	cr_assert(fn, "simdev's %s not found (open the backend first)", name);
	return fn;
}

void t_dev_peak_reset(void)
{
	((void (*)(void))simdev_fn("simdev_memory_peak_reset"))();
}

uint64_t t_dev_peak(void)
{
	size_t live = 0, peak = 0;

	((void (*)(size_t *, size_t *))simdev_fn("simdev_memory_bytes"))(&live, &peak);
	return peak;
}

uint64_t t_dev_total(struct tctx *t, int dev)
{
	size_t f = 0, tot = 0;

	if (t->be->mem_info(t->be, dev, &f, &tot, NULL) &&
	    t->be->mem_info(t->be, dev, &f, &tot, NULL))
		return 0;
	return tot;
}

vmm_stats t_stats(struct tctx *t, int dev, const char *tag)
{
	vmm_stats s;
	vmm_error err = { 0 };
	vmm_status st = vmm_stats_get(t->core, dev, tag, &s, &err);

	cr_assert_eq(st, VMM_OK, "stats: %s", err.msg);
	return s;
}

uint64_t t_handles_held(struct tctx *t, int dev)
{
	vmm_stats s = t_stats(t, dev, NULL);

	return s.handles_created - s.handles_released;
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* Word offsets that hold the pattern: all of a small range; for a large one 4096 spread words
 * plus the first and last 64 bytes. */
static size_t stride_of(size_t n)
{
	size_t words = n / 8, stride = 1;

	if (words > 8192)
		stride = words / 4096;
	return stride;
}

void t_fill(vmm_devptr p, size_t n, uint64_t seed)
{
	volatile uint64_t *w = (volatile uint64_t *)(uintptr_t)p;
	size_t words = n / 8, stride = stride_of(n);

	for (size_t i = 0; i < words; i += stride)
		w[i] = mix(seed + i);
	for (size_t i = words > 8 ? words - 8 : 0; i < words; i++)
		w[i] = mix(seed + i);
	for (size_t i = 0; i < words && i < 8; i++)
		w[i] = mix(seed + i);
	for (size_t i = words * 8; i < n; i++)
		((volatile uint8_t *)(uintptr_t)p)[i] = (uint8_t)seed;
}

bool t_check(vmm_devptr p, size_t n, uint64_t seed)
{
	volatile uint64_t *w = (volatile uint64_t *)(uintptr_t)p;
	size_t words = n / 8, stride = stride_of(n);

	for (size_t i = 0; i < words; i += stride)
		if (w[i] != mix(seed + i))
			return false;
	for (size_t i = words > 8 ? words - 8 : 0; i < words; i++)
		if (w[i] != mix(seed + i))
			return false;
	for (size_t i = words * 8; i < n; i++)
		if (((volatile uint8_t *)(uintptr_t)p)[i] != (uint8_t)seed)
			return false;
	return true;
}

void t_scatter(struct tctx *t, int n, vmm_devptr *kept)
{
	vmm_devptr *freed = calloc((size_t)n, sizeof(*freed));

	cr_assert(freed);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(vmm_malloc(t->core, 0, 4 * MiB, 0, NULL, &freed[i], NULL), VMM_OK);
		cr_assert_eq(vmm_malloc(t->core, 0, 2 * MiB, 0, NULL, &kept[i], NULL), VMM_OK);
		t_fill(kept[i], 2 * MiB, (unsigned char)(i + 1));
	}
	for (int i = 0; i < n; i++)
		cr_assert_eq(vmm_free(t->core, freed[i], NULL), VMM_OK);
	free(freed);
}

void t_wait_flag(atomic_bool *flag, const char *what)
{
	for (int i = 0; i < 10000 && !atomic_load(flag); i++)
		usleep(1000);
	cr_assert(atomic_load(flag), "%s", what);
}

void t_sleep(struct tctx *t, bool discard)
{
	vmm_sleep_opts all = { .tag = NULL, .device = -1, .discard = discard };
	vmm_transfer_result r;
	vmm_error err;

	cr_assert_eq(vmm_sleep(t->core, &all, &r, &err), VMM_OK, "sleep: %s", err.msg);
}

void t_wake(struct tctx *t)
{
	vmm_sleep_opts all = { .tag = NULL, .device = -1 };
	vmm_transfer_result r;
	vmm_error err;

	cr_assert_eq(vmm_wake(t->core, &all, &r, &err), VMM_OK, "wake: %s", err.msg);
}
