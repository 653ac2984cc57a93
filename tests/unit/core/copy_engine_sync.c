/* A plain synchronous copy engine (copy_engine.h) for the core's tests, linked only while the
 * real one (core/offload/) is not in the build: one stream, one range at a time, host buffers
 * from mmap. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "offload/copy_engine.h"

struct vmm_copy_engine {
	vmm_backend *be;
	vmm_stream stream;
};

vmm_status vmm_copy_engine_create(vmm_backend *be, int dev, vmm_copy_engine **out, vmm_error *err)
{
	vmm_copy_engine *ce = calloc(1, sizeof(*ce));
	vmm_status st;

	if (!ce)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no memory");
	ce->be = be;
	st = be->stream_create(be, dev, &ce->stream, err);
	if (st) {
		free(ce);
		return st;
	}
	*out = ce;
	return VMM_OK;
}

void vmm_copy_engine_destroy(vmm_copy_engine *ce)
{
	if (!ce)
		return;
	ce->be->stream_destroy(ce->be, ce->stream, NULL);
	free(ce);
}

uint64_t vmm_host_available_bytes(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kb = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb * 1024;
}

vmm_status vmm_host_buf_alloc(vmm_backend *be, size_t size, int provision_now, vmm_host_buf *out,
			      vmm_error *err)
{
	void *p;

	(void)be;
	if (size > vmm_host_available_bytes())
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "%zu bytes of host memory not available", size);
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "mmap of %zu bytes failed", size);
	if (provision_now)
		memset(p, 0, size);
	out->ptr = p;
	out->size = size;
	out->pinned = 0;
	return VMM_OK;
}

void vmm_host_buf_free(vmm_backend *be, vmm_host_buf *buf)
{
	(void)be;
	if (buf->ptr)
		munmap(buf->ptr, buf->size);
	buf->ptr = NULL;
	buf->size = 0;
}

static vmm_status copy(vmm_copy_engine *ce, const vmm_copy_range *r, size_t n, int out,
		       vmm_copy_stats *stats, vmm_error *err)
{
	struct timespec a, b;
	vmm_status st = VMM_OK;
	uint64_t bytes = 0;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (size_t i = 0; i < n && !st; i++) {
		st = out ? ce->be->copy_d2h_async(ce->be, r[i].host, r[i].dev, r[i].size, ce->stream,
						  err) :
			   ce->be->copy_h2d_async(ce->be, r[i].dev, r[i].host, r[i].size, ce->stream,
						  err);
		bytes += r[i].size;
	}
	if (!st)
		st = ce->be->stream_synchronize(ce->be, ce->stream, err);
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (stats) {
		stats->bytes = st ? 0 : bytes;
		stats->seconds = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
		stats->provision_seconds = 0;
	}
	return st;
}

vmm_status vmm_copy_out(vmm_copy_engine *ce, const vmm_copy_range *ranges, size_t n,
			vmm_copy_stats *stats, vmm_error *err)
{
	return copy(ce, ranges, n, 1, stats, err);
}

vmm_status vmm_copy_in(vmm_copy_engine *ce, const vmm_copy_range *ranges, size_t n,
		       vmm_copy_stats *stats, vmm_error *err)
{
	return copy(ce, ranges, n, 0, stats, err);
}

bool vmm_copy_engine_unsettled(vmm_copy_engine *ce)
{
	(void)ce;
	return false; /* every copy here is synchronous */
}

bool vmm_copy_engine_settle(vmm_copy_engine *ce)
{
	(void)ce;
	return true;
}
