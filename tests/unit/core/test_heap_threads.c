/* Many threads at once: allocations and frees of mixed sizes and tags on one device, contents
 * checked by each thread, accounting exact at the end. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>

#include "helpers.h"
#include "heap_offload.h"

#define THREADS 8
#define OPS 3000
#define SLOTS 48

static struct tctx T;
static atomic_int failures;

static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void *worker(void *arg)
{
	static const char *tags[] = { NULL, "t1", "t2" };
	uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)((intptr_t)arg + 1);
	vmm_devptr p[SLOTS] = { 0 };
	size_t n[SLOTS] = { 0 };

	for (int op = 0; op < OPS; op++) {
		int i = (int)(next_rand(&seed) % SLOTS);

		if (p[i]) {
			if (!t_check(p[i], n[i], p[i]) || vmm_free(T.core, p[i], NULL))
				atomic_fetch_add(&failures, 1);
			p[i] = 0;
		} else {
			uint64_t r = next_rand(&seed);
			size_t sz = r % 10 < 7 ? r % 8192 : r % 10 < 9 ? r % (2 * MiB) : r % (12 * MiB);

			if (vmm_malloc(T.core, 0, sz, 0, tags[r % 3], &p[i], NULL)) {
				atomic_fetch_add(&failures, 1);
				p[i] = 0;
				continue;
			}
			n[i] = sz;
			t_fill(p[i], sz, p[i]);
		}
	}
	for (int i = 0; i < SLOTS; i++) {
		if (p[i] && (!t_check(p[i], n[i], p[i]) || vmm_free(T.core, p[i], NULL)))
			atomic_fetch_add(&failures, 1);
	}
	return NULL;
}

Test(heap_threads, many_threads_at_once, .timeout = 120)
{
	pthread_t th[THREADS];
	vmm_stats s;

	t_simdev_env("8G", NULL, NULL);
	t_open(&T, NULL);
	for (intptr_t i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, worker, (void *)i);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&failures), 0, "a thread saw a failure or lost contents");
	s = t_stats(&T, 0, NULL);
	cr_assert_eq(s.live_count, 0);
	cr_assert_eq(s.live_bytes, 0);
	cr_assert_eq(s.alloc_calls, s.free_calls);
	cr_assert_eq(s.mapped_bytes, t_dev_used(&T, 0));
	cr_assert_eq(vmm_trim(T.core, -1, NULL), VMM_OK);
	cr_assert_eq(t_dev_used(&T, 0), 0);
	t_close(&T);
}

static atomic_int stop;

/* Allocates, checks and frees under tag "busy" until told to stop. */
static void *busy_worker(void *arg)
{
	uint64_t seed = 77 + (uint64_t)(intptr_t)arg;
	vmm_devptr p[16] = { 0 };
	size_t n[16] = { 0 };

	while (!atomic_load(&stop)) {
		int i = (int)(next_rand(&seed) % 16);

		if (p[i]) {
			if (!t_check(p[i], n[i], p[i]) || vmm_free(T.core, p[i], NULL))
				atomic_fetch_add(&failures, 1);
			p[i] = 0;
		} else {
			n[i] = next_rand(&seed) % (3 * MiB);
			if (vmm_malloc(T.core, 0, n[i], 0, "busy", &p[i], NULL)) {
				atomic_fetch_add(&failures, 1);
				p[i] = 0;
			} else {
				t_fill(p[i], n[i], p[i]);
			}
		}
	}
	for (int i = 0; i < 16; i++)
		if (p[i] && (!t_check(p[i], n[i], p[i]) || vmm_free(T.core, p[i], NULL)))
			atomic_fetch_add(&failures, 1);
	return NULL;
}

Test(heap_threads, one_tag_sleeps_while_others_allocate, .timeout = 120)
{
	vmm_sleep_opts s = { .tag = "sleepy", .device = 0 };
	pthread_t th[4];
	vmm_devptr q[8];
	vmm_error err;

	t_simdev_env("4G", NULL, NULL);
	t_open(&T, NULL);
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(vmm_malloc(T.core, 0, (size_t)(i + 1) * 3 * MiB, 0, "sleepy", &q[i], NULL),
			     VMM_OK);
		t_fill(q[i], (size_t)(i + 1) * 3 * MiB, q[i]);
	}
	for (intptr_t i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, busy_worker, (void *)i);
	for (int c = 0; c < 30; c++) {
		cr_assert_eq(vmm_sleep(T.core, &s, NULL, &err), VMM_OK, "cycle %d: %s", c, err.msg);
		cr_assert_eq(vmm_wake(T.core, &s, NULL, &err), VMM_OK, "cycle %d: %s", c, err.msg);
		for (int i = 0; i < 8; i++)
			cr_assert(t_check(q[i], (size_t)(i + 1) * 3 * MiB, q[i]), "cycle %d", c);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&failures), 0);
	cr_assert_eq(t_stats(&T, 0, "busy").live_count, 0);
	cr_assert_eq(t_stats(&T, 0, NULL).mapped_bytes, t_dev_used(&T, 0));
	t_close(&T);
}

