/* The copy engine and host buffers on simdev: contents survive out and back for many ranges of
 * odd sizes and offsets, on several streams; raw host buffers are provisioned (and pinned) by the
 * first copy and reused by the next; pinning failures fall back to staging; driver failures
 * return errors with nothing left in flight; host OOM is refused up front. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "offload/copy_engine.h"
#include "helpers.h"

#define MiB ((size_t)1 << 20)

static struct tdev td;

static void setup(void)
{
	t_simdev_env("2G", "1", NULL);
	t_dev_open(&td);
}

static void teardown(void)
{
	t_dev_close(&td);
}

static vmm_copy_engine *engine(size_t chunk, int streams)
{
	vmm_copy_engine *ce = NULL;
	vmm_error err = { 0 };

	cr_assert_eq(vmm_copy_engine_create(td.be, 0, &ce, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_copy_engine_tune(ce, chunk, streams, &err), VMM_OK, "%s", err.msg);
	return ce;
}

/* n ranges of odd sizes at odd offsets inside [0, size), not overlapping, in a shuffled order. */
static size_t odd_ranges(vmm_copy_range *r, size_t n, vmm_devptr dev, char *host, size_t size)
{
	size_t slot = size / n, k = 0;

	for (size_t i = 0; i < n; i++) {
		size_t off = i * slot + (i * 4099) % 977;
		size_t len = 1 + (i * 7919 + 13) % (slot - 977 - 1);

		r[k++] = (vmm_copy_range){ .dev = dev + off, .host = host + off, .size = len };
	}
	for (size_t i = 0; i < k; i++) {   /* reverse pairs: order must not matter */
		size_t j = (i * 31) % k;
		vmm_copy_range t = r[i];

		r[i] = r[j];
		r[j] = t;
	}
	return k;
}

Test(copy, many_odd_ranges_round_trip, .init = setup, .fini = teardown)
{
	const size_t size = 40 * MiB, nr = 97;
	struct tmem m = t_mem_alloc(&td, 0, size);
	vmm_copy_engine *ce = engine(256 << 10, 4);   /* small chunks: many per range */
	char *orig = malloc(size), *back = malloc(size);
	vmm_copy_range r[97];
	vmm_host_buf hb;
	vmm_copy_stats cs;
	vmm_error err = { 0 };
	uint64_t want = 0;

	cr_assert(orig && back);
	t_pattern(orig, size, 1);
	t_write(&td, m.va, orig, size);
	cr_assert_eq(vmm_host_buf_alloc(td.be, size, 0, &hb, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_host_buf_pinned_bytes(&hb), 0);
	odd_ranges(r, nr, m.va, hb.ptr, size);
	for (size_t i = 0; i < nr; i++)
		want += r[i].size;

	cr_assert_eq(vmm_copy_out(ce, r, nr, &cs, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(cs.bytes, want);
	cr_expect_gt(cs.seconds, 0);
	for (size_t i = 0; i < nr; i++)
		cr_assert_eq(memcmp(r[i].host, orig + (r[i].dev - m.va), r[i].size), 0,
			     "range %zu differs on the host", i);
	cr_expect_eq(vmm_host_buf_pinned_bytes(&hb), hb.size, "the first copy pins the buffer");

	t_fill(&td, m.va, 0, size);
	cr_assert_eq(vmm_copy_in(ce, r, nr, &cs, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(cs.bytes, want);
	t_read(&td, back, m.va, size);
	/* The ranges are back; bytes between them stayed zero. */
	{
		char *expect = calloc(1, size);

		for (size_t i = 0; i < nr; i++)
			memcpy(expect + (r[i].dev - m.va), orig + (r[i].dev - m.va), r[i].size);
		cr_assert_eq(memcmp(back, expect, size), 0, "device contents after copy in");
		free(expect);
	}
	vmm_host_buf_free(td.be, &hb);
	cr_expect_null(hb.ptr);
	vmm_copy_engine_destroy(ce);
	t_mem_free(&td, &m);
	free(orig);
	free(back);
}

Test(copy, first_cycle_provisions_then_steady_state_reuses, .init = setup, .fini = teardown)
{
	const size_t size = 300 * MiB;   /* three segments of 128 MiB */
	struct tmem m = t_mem_alloc(&td, 0, size);
	vmm_copy_engine *ce = engine(0, 0);
	char *orig = malloc(size);
	vmm_host_buf hb;
	vmm_copy_range r;
	vmm_copy_stats c1, c2;
	vmm_error err = { 0 };

	t_pattern(orig, size, 2);
	t_write(&td, m.va, orig, size);
	cr_assert_eq(vmm_host_buf_alloc(td.be, size, 0, &hb, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(hb.pinned, 0);
	r = (vmm_copy_range){ .dev = m.va, .host = hb.ptr, .size = size };
	cr_assert_eq(vmm_copy_out(ce, &r, 1, &c1, &err), VMM_OK, "%s", err.msg);
	cr_expect_gt(c1.provision_seconds, 0, "the first copy provisions the host buffer");
	cr_expect_eq(c1.staged_bytes, 0);
	cr_expect_eq(vmm_host_buf_pinned_bytes(&hb), size);
	cr_assert_eq(memcmp(hb.ptr, orig, size), 0);

	t_pattern(orig, size, 3);
	t_write(&td, m.va, orig, size);
	cr_assert_eq(vmm_copy_out(ce, &r, 1, &c2, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(c2.provision_seconds, 0, "the second copy reuses the pinned buffer");
	cr_expect_eq(c2.provision_wait_seconds, 0);
	cr_expect_eq(c2.bytes, size);
	cr_assert_eq(memcmp(hb.ptr, orig, size), 0);
	vmm_host_buf_free(td.be, &hb);
	vmm_copy_engine_destroy(ce);
	t_mem_free(&td, &m);
	free(orig);
}

/* A reset took the registrations (vmm_host_buf_pins_lost): the buffer keeps its bytes, counts
 * nothing pinned, and the next copy pins it again rather than copying at pageable speed. */
Test(copy, pins_lost_in_a_reset_are_made_again_by_the_next_copy, .init = setup,
     .fini = teardown)
{
	const size_t size = 300 * MiB;
	struct tmem m = t_mem_alloc(&td, 0, size);
	vmm_copy_engine *ce = engine(0, 0);
	char *orig = malloc(size);
	vmm_host_buf hb;
	vmm_copy_range r;
	vmm_copy_stats cs;
	vmm_error err = { 0 };

	t_pattern(orig, size, 4);
	t_write(&td, m.va, orig, size);
	cr_assert_eq(vmm_host_buf_alloc(td.be, size, 1, &hb, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_host_buf_pinned_bytes(&hb), size);
	r = (vmm_copy_range){ .dev = m.va, .host = hb.ptr, .size = size };
	cr_assert_eq(vmm_copy_out(ce, &r, 1, &cs, &err), VMM_OK, "%s", err.msg);

	{
		size_t lost = vmm_host_buf_pins_lost(td.be);

		cr_expect_geq(lost, 1, "no pinned segment was taken back");
	}
	cr_expect_eq(vmm_host_buf_pinned_bytes(&hb), 0);
	cr_expect_eq(vmm_host_buf_pins_lost(td.be), 0, "nothing pinned is left to lose");
	cr_assert_eq(memcmp(hb.ptr, orig, size), 0, "the backup kept its bytes");

	t_fill(&td, m.va, 0, size);
	cr_assert_eq(vmm_copy_in(ce, &r, 1, &cs, &err), VMM_OK, "%s", err.msg);
	cr_expect_gt(cs.provision_seconds, 0, "the copy pinned the buffer again");
	cr_expect_eq(cs.staged_bytes, 0);
	cr_expect_eq(vmm_host_buf_pinned_bytes(&hb), size);
	{
		char *back = malloc(size);

		cr_assert(back);
		t_read(&td, back, m.va, size);
		cr_expect_eq(memcmp(back, orig, size), 0, "device contents after copy in");
		free(back);
	}
	vmm_host_buf_free(td.be, &hb);
	vmm_copy_engine_destroy(ce);
	t_mem_free(&td, &m);
	free(orig);
}

Test(copy, provision_now_pins_at_allocation, .init = setup, .fini = teardown)
{
	vmm_host_buf hb;
	vmm_error err = { 0 };

	cr_assert_eq(vmm_host_buf_alloc(td.be, 130 * MiB + 5, 1, &hb, &err), VMM_OK, "%s",
		     err.msg);
	cr_expect_eq(hb.pinned, 1);
	cr_expect_eq(hb.size, 130 * MiB + 5);
	cr_expect_eq((uintptr_t)hb.ptr % 4096, 0, "page aligned");
	cr_expect_geq(vmm_host_buf_pinned_bytes(&hb), hb.size);
	vmm_host_buf_free(td.be, &hb);
}

Test(copy, host_oom_is_refused_before_anything, .init = setup, .fini = teardown)
{
	vmm_host_buf hb = { .ptr = (void *)1 };
	vmm_error err = { 0 };
	uint64_t avail = vmm_host_available_bytes();

	cr_assert_gt(avail, 0, "MemAvailable is readable");
	cr_assert_eq(vmm_host_buf_alloc(td.be, (size_t)avail * 2, 0, &hb, &err), VMM_E_HOST_OOM);
	cr_expect_null(hb.ptr);
	cr_expect_neq(strstr(err.msg, "available"), NULL, "message names what is available: %s",
		      err.msg);
	cr_assert_eq(vmm_host_buf_alloc(td.be, SIZE_MAX - 4096, 0, &hb, &err), VMM_E_HOST_OOM);
	cr_assert_eq(vmm_host_buf_alloc(td.be, 0, 0, &hb, &err), VMM_E_INVALID);
}

/* simdev reads SIMDEV_FAIL once: these open the device themselves. */
Test(copy, unpinnable_host_memory_is_staged, .fini = teardown)
{
	const size_t size = 200 * MiB;   /* two segments; the first cannot be pinned */
	struct tmem m;
	vmm_copy_engine *ce;
	char *orig = malloc(size), *back = malloc(size);
	vmm_host_buf hb;
	vmm_copy_range r;
	vmm_copy_stats cs;
	vmm_error err = { 0 };

	t_simdev_env("2G", "1", "cuMemHostRegister:1");
	t_dev_open(&td);
	cr_assert_eq(vmm_host_buf_set_segment_bytes(128 * MiB, &err), VMM_OK, "%s", err.msg);
	m = t_mem_alloc(&td, 0, size);
	ce = engine(8 * MiB, 3);
	t_pattern(orig, size, 4);
	t_write(&td, m.va, orig, size);
	cr_assert_eq(vmm_host_buf_alloc(td.be, size, 0, &hb, &err), VMM_OK, "%s", err.msg);
	r = (vmm_copy_range){ .dev = m.va + 3, .host = (char *)hb.ptr + 3, .size = size - 7 };
	cr_assert_eq(vmm_copy_out(ce, &r, 1, &cs, &err), VMM_OK, "%s", err.msg);
	cr_expect_gt(cs.staged_bytes, 0, "the unpinned segment went through the ring");
	cr_expect_lt(cs.staged_bytes, size);
	/* Segments register in parallel: either one may be the one that failed. */
	cr_expect(vmm_host_buf_pinned_bytes(&hb) == size - 128 * MiB ||
		  vmm_host_buf_pinned_bytes(&hb) == 128 * MiB, "one segment is not pinned");
	cr_assert_eq(memcmp((char *)hb.ptr + 3, orig + 3, size - 7), 0);
	t_fill(&td, m.va, 0, size);
	cr_assert_eq(vmm_copy_in(ce, &r, 1, &cs, &err), VMM_OK, "%s", err.msg);
	cr_expect_gt(cs.staged_bytes, 0);
	t_read(&td, back, m.va, size);
	cr_assert_eq(memcmp(back + 3, orig + 3, size - 7), 0);
	cr_expect_eq(back[0] | back[1] | back[2] | back[size - 1], 0);
	vmm_host_buf_free(td.be, &hb);
	vmm_copy_engine_destroy(ce);
	t_mem_free(&td, &m);
	free(orig);
	free(back);
}

static void driver_failure(const char *fail, bool out)
{
	const size_t size = 24 * MiB;
	struct tmem m;
	vmm_copy_engine *ce;
	char *orig = malloc(size), *back = malloc(size);
	vmm_host_buf hb;
	vmm_copy_range r;
	vmm_copy_stats cs;
	vmm_error err = { 0 };
	vmm_status st;

	t_simdev_env("2G", "1", fail);
	t_dev_open(&td);
	m = t_mem_alloc(&td, 0, size);
	ce = engine(1 * MiB, 4);
	t_pattern(orig, size, 5);
	t_write(&td, m.va, orig, size);
	cr_assert_eq(vmm_host_buf_alloc(td.be, size, 0, &hb, &err), VMM_OK, "%s", err.msg);
	r = (vmm_copy_range){ .dev = m.va, .host = hb.ptr, .size = size };
	if (!out) {
		memcpy(hb.ptr, orig, size);
		t_fill(&td, m.va, 0, size);
	}
	st = out ? vmm_copy_out(ce, &r, 1, &cs, &err) : vmm_copy_in(ce, &r, 1, &cs, &err);
	cr_assert_eq(st, VMM_E_DRIVER, "%s: %s", fail, vmm_status_name(st));
	cr_expect_neq(err.msg[0], 0);
	cr_expect_eq(cs.bytes, 0);
	/* Nothing in flight: the engine works again at once and the data is intact. */
	st = out ? vmm_copy_out(ce, &r, 1, &cs, &err) : vmm_copy_in(ce, &r, 1, &cs, &err);
	cr_assert_eq(st, VMM_OK, "retry after %s: %s", fail, err.msg);
	if (out) {
		cr_assert_eq(memcmp(hb.ptr, orig, size), 0);
	} else {
		t_read(&td, back, m.va, size);
		cr_assert_eq(memcmp(back, orig, size), 0);
	}
	vmm_host_buf_free(td.be, &hb);
	vmm_copy_engine_destroy(ce);
	t_mem_free(&td, &m);
	free(orig);
	free(back);
}

/* simdev reads SIMDEV_FAIL once: these open the device themselves. */
Test(copy, d2h_failure_is_reported_and_retry_works, .fini = teardown)
{
	/* The test's own setup makes no async D2H; the engine's 7th chunk fails. */
	driver_failure("cuMemcpyDtoHAsync:7", true);
}

/* simdev reads SIMDEV_FAIL once: these open the device themselves. */
Test(copy, h2d_failure_is_reported_and_retry_works, .fini = teardown)
{
	/* setup's t_write and t_fill use 2 H2D copies; the engine's 5th chunk fails. */
	driver_failure("cuMemcpyHtoDAsync:7", false);
}

/* simdev reads SIMDEV_FAIL once: these open the device themselves. */
Test(copy, stream_sync_failure_is_reported, .fini = teardown)
{
	/* setup: t_write sync is call 1; the engine's first stream sync at the end fails. */
	driver_failure("cuStreamSynchronize:2", true);
}

/* A stream whose synchronize fails at every attempt may still be copying: the engine says so
 * (the caller must keep the memory), and says it no more once its streams synchronize again. */
Test(copy, a_stream_that_never_synchronizes_is_unsettled, .fini = teardown)
{
	const size_t size = 4 * MiB;
	vmm_copy_engine *ce;
	vmm_copy_range r;
	vmm_error err = { 0 };
	char *buf = malloc(size);
	struct tmem m;

	/* t_mem_alloc's fill syncs once (call 1); the engine's first stream then fails three times. */
	t_simdev_env("2G", "1", "cuStreamSynchronize:2,cuStreamSynchronize:3,cuStreamSynchronize:4");
	t_dev_open(&td);
	m = t_mem_alloc(&td, 0, size);
	ce = engine(1 * MiB, 2);
	cr_assert_not(vmm_copy_engine_unsettled(ce), "a new engine is settled");
	r = (vmm_copy_range){ .dev = m.va, .host = buf, .size = size };
	cr_assert_eq(vmm_copy_out(ce, &r, 1, NULL, &err), VMM_E_DRIVER, "the synchronize failed");
	cr_expect(vmm_copy_engine_unsettled(ce), "three failed synchronizes: copies may still run");
	cr_expect(vmm_copy_engine_settle(ce), "the streams synchronize now");
	cr_expect_not(vmm_copy_engine_unsettled(ce), "settled by a synchronize that succeeded");
	cr_assert_eq(vmm_copy_out(ce, &r, 1, NULL, &err), VMM_OK, "%s", err.msg);
	cr_expect_not(vmm_copy_engine_unsettled(ce), "settled after a clean transfer");
	vmm_copy_engine_destroy(ce);
	t_mem_free(&td, &m);
	free(buf);
}

/* simdev reads SIMDEV_FAIL once: these open the device themselves. */
Test(copy, stream_creation_failure_then_success, .fini = teardown)
{
	vmm_copy_engine *ce;
	vmm_copy_range r;
	vmm_error err = { 0 };
	char buf[100];
	struct tmem m;

	t_simdev_env("2G", "1", "cuStreamCreate:3");   /* test stream 1, engine streams 2, 3 */
	t_dev_open(&td);
	m = t_mem_alloc(&td, 0, 1);
	ce = engine(0, 4);
	r = (vmm_copy_range){ .dev = m.va, .host = buf, .size = sizeof(buf) };
	cr_assert_neq(vmm_copy_out(ce, &r, 1, NULL, &err), VMM_OK, "a stream could not be made");
	cr_assert_eq(vmm_copy_out(ce, &r, 1, NULL, &err), VMM_OK, "%s", err.msg);
	vmm_copy_engine_destroy(ce);
	t_mem_free(&td, &m);
}

Test(copy, bad_input_changes_nothing, .init = setup, .fini = teardown)
{
	struct tmem m = t_mem_alloc(&td, 0, 4 * MiB);
	vmm_copy_engine *ce = engine(0, 0);
	vmm_host_buf hb;
	vmm_copy_range r[2];
	vmm_copy_stats cs;
	vmm_error err = { 0 };
	vmm_copy_engine *none = NULL;

	cr_assert_eq(vmm_host_buf_alloc(td.be, MiB, 0, &hb, &err), VMM_OK, "%s", err.msg);
	memset(hb.ptr, 0x5a, MiB);
	t_fill(&td, m.va, 0x11, 4 * MiB);
	r[0] = (vmm_copy_range){ .dev = m.va, .host = hb.ptr, .size = 4096 };
	r[1] = (vmm_copy_range){ .dev = m.va, .host = (char *)hb.ptr + 4096, .size = MiB };
	cr_assert_eq(vmm_copy_out(ce, r, 2, &cs, &err), VMM_E_INVALID);
	cr_expect_neq(strstr(err.msg, "past"), NULL, "%s", err.msg);
	cr_expect_eq(((unsigned char *)hb.ptr)[0], 0x5a, "the valid range was not copied either");
	cr_expect_eq(vmm_host_buf_pinned_bytes(&hb), 0, "nothing was provisioned");
	r[1].host = NULL;
	cr_assert_eq(vmm_copy_in(ce, r, 2, &cs, &err), VMM_E_INVALID);
	cr_assert_eq(vmm_copy_out(ce, NULL, 1, &cs, &err), VMM_E_INVALID);
	cr_assert_eq(vmm_copy_out(ce, NULL, 0, &cs, &err), VMM_OK, "nothing to copy");
	cr_assert_eq(vmm_copy_engine_create(td.be, -1, &none, &err), VMM_E_INVALID);
	cr_assert_eq(vmm_copy_engine_tune(ce, 100, 0, &err), VMM_E_INVALID);
	cr_assert_eq(vmm_copy_engine_tune(ce, 0, 9, &err), VMM_E_INVALID);
	r[0].size = 4096;
	cr_assert_eq(vmm_copy_out(ce, r, 1, &cs, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_copy_engine_tune(ce, 0, 2, &err), VMM_E_BUSY, "tuning after start");
	cr_expect_eq(((unsigned char *)hb.ptr)[0], 0x11);
	vmm_host_buf_free(td.be, &hb);
	vmm_copy_engine_destroy(ce);
	t_mem_free(&td, &m);
}

struct par {
	vmm_copy_engine *ce;
	vmm_devptr dev;
	size_t size;
	uint64_t seed;
	int ok;
};

static void *par_worker(void *a)
{
	struct par *p = a;
	vmm_host_buf hb;
	char *want = malloc(p->size);
	vmm_copy_range r;
	vmm_error err = { 0 };

	p->ok = 0;
	if (!want || vmm_host_buf_alloc(td.be, p->size, 0, &hb, &err))
		return NULL;
	t_pattern(want, p->size, p->seed);
	r = (vmm_copy_range){ .dev = p->dev, .host = hb.ptr, .size = p->size };
	for (int i = 0; i < 5; i++) {
		if (vmm_copy_out(p->ce, &r, 1, NULL, &err) ||
		    memcmp(hb.ptr, want, p->size))
			break;
		if (i == 4)
			p->ok = 1;
	}
	vmm_host_buf_free(td.be, &hb);
	free(want);
	return NULL;
}

Test(copy, engines_and_callers_in_parallel, .init = setup, .fini = teardown)
{
	const size_t size = 6 * MiB;
	struct tmem m[4];
	struct par p[4];
	pthread_t th[4];
	vmm_copy_engine *shared = engine(MiB, 2);

	for (int i = 0; i < 4; i++) {
		char *b = malloc(size);

		m[i] = t_mem_alloc(&td, 0, size);
		t_pattern(b, size, 10 + (uint64_t)i);
		t_write(&td, m[i].va, b, size);
		free(b);
		/* Two threads share one engine, two have their own. */
		p[i] = (struct par){ .ce = i < 2 ? shared : engine(512 << 10, 3), .dev = m[i].va,
				     .size = size, .seed = 10 + (uint64_t)i };
	}
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, par_worker, &p[i]);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		cr_expect(p[i].ok, "thread %d", i);
		if (i >= 2)
			vmm_copy_engine_destroy(p[i].ce);
		t_mem_free(&td, &m[i]);
	}
	vmm_copy_engine_destroy(shared);
}

struct half {
	vmm_copy_engine *ce;
	vmm_copy_range r;
	int rc;
};

static void *half_worker(void *a)
{
	struct half *h = a;

	h->rc = (int)vmm_copy_out(h->ce, &h->r, 1, NULL, NULL);
	return NULL;
}

Test(copy, two_engines_share_one_raw_buffer, .init = setup, .fini = teardown)
{
	/* Both halves touch the first segment: one engine provisions it, the other waits. */
	const size_t size = 130 * MiB, half = 65 * MiB + 4096;
	struct tmem m = t_mem_alloc(&td, 0, size);
	char *orig = malloc(size);
	struct half h[2];
	pthread_t th[2];
	vmm_host_buf hb;
	vmm_error err = { 0 };

	t_pattern(orig, size, 20);
	t_write(&td, m.va, orig, size);
	cr_assert_eq(vmm_host_buf_alloc(td.be, size, 0, &hb, &err), VMM_OK, "%s", err.msg);
	h[0] = (struct half){ .ce = engine(4 * MiB, 2),
			      .r = { .dev = m.va, .host = hb.ptr, .size = half } };
	h[1] = (struct half){ .ce = engine(3 * MiB, 3),
			      .r = { .dev = m.va + half, .host = (char *)hb.ptr + half,
				     .size = size - half } };
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, half_worker, &h[i]);
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		cr_expect_eq(h[i].rc, VMM_OK, "half %d", i);
		vmm_copy_engine_destroy(h[i].ce);
	}
	cr_assert_eq(memcmp(hb.ptr, orig, size), 0);
	cr_expect_eq(vmm_host_buf_pinned_bytes(&hb), size);
	vmm_host_buf_free(td.be, &hb);
	t_mem_free(&td, &m);
	free(orig);
}
