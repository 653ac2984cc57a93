/* Test helpers (helpers.h). */
#include "helpers.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

void t_simdev_env(const char *memory, const char *devices, const char *fail)
{
	if (memory)
		setenv("SIMDEV_MEMORY", memory, 1);
	if (devices)
		setenv("SIMDEV_DEVICES", devices, 1);
	if (fail)
		setenv("SIMDEV_FAIL", fail, 1);
}

void t_dev_open(struct tdev *t)
{
	vmm_error err = { 0 };
	vmm_status st;

	memset(t, 0, sizeof(*t));
	st = vmm_backend_cuda_open(&t->be, &err);
	cr_assert_eq(st, VMM_OK, "opening the CUDA backend on simdev: %s", err.msg);
	st = t->be->stream_create(t->be, 0, &t->s, &err);
	cr_assert_eq(st, VMM_OK, "test stream: %s", err.msg);
}

void t_dev_close(struct tdev *t)
{
	if (t->s)
		t->be->stream_destroy(t->be, t->s, NULL);
	if (t->be)
		t->be->close(t->be);
	memset(t, 0, sizeof(*t));
}

struct tmem t_mem_alloc(struct tdev *t, int dev, size_t size)
{
	vmm_backend *be = t->be;
	struct tmem m = { 0 };
	vmm_error err = { 0 };
	size_t g = 0;

	cr_assert_eq(be->granularity(be, dev, &g, &err), VMM_OK, "%s", err.msg);
	m.size = (size + g - 1) / g * g;
	cr_assert_eq(be->reserve(be, dev, m.size, g, &m.va, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(be->create(be, dev, m.size, &m.h, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(be->map(be, m.va, m.size, m.h, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(be->set_access(be, dev, m.va, m.size, NULL, 0, &err), VMM_OK, "%s", err.msg);
	return m;
}

void t_mem_free(struct tdev *t, struct tmem *m)
{
	vmm_backend *be = t->be;

	if (!m->va)
		return;
	be->unmap(be, m->va, m->size, NULL);
	be->release(be, m->h, NULL);
	be->unreserve(be, 0, m->va, m->size, NULL);
	memset(m, 0, sizeof(*m));
}

void t_write(struct tdev *t, vmm_devptr dst, const void *src, size_t n)
{
	vmm_error err = { 0 };

	cr_assert_eq(t->be->copy_h2d_async(t->be, dst, src, n, t->s, &err), VMM_OK, "%s",
		     err.msg);
	cr_assert_eq(t->be->stream_synchronize(t->be, t->s, &err), VMM_OK, "%s", err.msg);
}

void t_read(struct tdev *t, void *dst, vmm_devptr src, size_t n)
{
	vmm_error err = { 0 };

	cr_assert_eq(t->be->copy_d2h_async(t->be, dst, src, n, t->s, &err), VMM_OK, "%s",
		     err.msg);
	cr_assert_eq(t->be->stream_synchronize(t->be, t->s, &err), VMM_OK, "%s", err.msg);
}

void t_fill(struct tdev *t, vmm_devptr dst, int byte, size_t n)
{
	void *z = malloc(n);

	cr_assert(z);
	memset(z, byte, n);
	t_write(t, dst, z, n);
	free(z);
}

void t_pattern(void *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	unsigned char *b = p;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(b + i, &x, 8);
	}
	for (; i < n; i++)
		b[i] = (unsigned char)(x >> (8 * (i % 8)));
}

uint64_t t_dev_used(struct tdev *t, int dev)
{
	size_t f = 0, tot = 0;

	if (t->be->mem_info(t->be, dev, &f, &tot, NULL))
		return UINT64_MAX;
	return tot - f;
}
