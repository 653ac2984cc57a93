/* Trims (heap_trim.c): the quarantine's device synchronization is made without the heap's lock,
 * so that the program's own frees and allocations go on while a trim (a sharing peer's, say)
 * waits for the device; what it waited for still goes back to the driver; a second trim meanwhile
 * does not wait too; and the core's destroy waits for a trim in its synchronization instead of
 * freeing the heap under it.
 * Kernels are simdev's slow writers, whose submissions the heap counts. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "backend/backend.h"
#include "counted_heap.h"
#include "helpers.h"
#include "mono_wait.h"

#define BIG (64 * MiB)

static CUstream stream;

/* The heap over simdev (devices: NULL for one), without syncing ahead (its thread would free
 * the quarantine first). */
static void open_on(struct tctx *t, const char *devices)
{
	vmm_config cfg;

	t_simdev_env("1G", devices, NULL);
	vmm_config_defaults(&cfg);
	cfg.sync_ahead_min = 0;
	stream = t_open_counted(t, &cfg);
}

static void open_plain(struct tctx *t)
{
	open_on(t, NULL);
}


struct trim_call {
	pthread_t thread;
	vmm_core *core;
	vmm_status st;
};

/* The backend's synchronize, noting when one is under way (the trim thread's). */
static vmm_status (*real_synchronize)(vmm_backend *, int, vmm_error *);
static atomic_int syncing;

static vmm_status noted_synchronize(vmm_backend *be, int dev, vmm_error *err)
{
	vmm_status st;

	atomic_fetch_add(&syncing, 1);
	st = real_synchronize(be, dev, err);
	atomic_fetch_sub(&syncing, 1);
	return st;
}

static void *trim_main(void *arg)
{
	struct trim_call *c = arg;

	c->st = vmm_trim(c->core, 0, NULL);
	return NULL;
}

/* A trim on a thread of its own, returning once it is in its synchronization (10 s at most). */
static void trim_start(struct trim_call *c, struct tctx *t)
{
	real_synchronize = t->be->synchronize;
	t->be->synchronize = noted_synchronize;
	c->core = t->core;
	cr_assert_eq(pthread_create(&c->thread, NULL, trim_main, c), 0);
	for (int i = 0; i < 10000 && !atomic_load(&syncing); i++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	cr_assert(atomic_load(&syncing), "the trim never began its synchronization");
}

Test(heap_trim, the_programs_free_goes_on_while_a_trim_waits_for_the_device)
{
	struct writer w = { .value = 7, .ms = 600 };
	struct trim_call c;
	struct tctx t;
	vmm_devptr y;
	double t0, took;

	open_plain(&t);
	cr_assert_eq(vmm_malloc(t.core, 0, 4 * MiB, 0, NULL, &y, NULL), VMM_OK);
	t_freed_while_written(&t, stream, &w, BIG);
	trim_start(&c, &t);
	t0 = vmm_now_s();
	cr_assert_eq(vmm_free(t.core, y, NULL), VMM_OK);
	took = vmm_now_s() - t0;
	cr_expect(!atomic_load(&w.done), "the kernel ended before the free: nothing was tested");
	cr_expect_lt(took, 0.2, "the program's free waited %.0f ms for the trim's sync",
		     took * 1000);
	pthread_join(c.thread, NULL);
	cr_expect_eq(c.st, VMM_OK);
	cr_expect(atomic_load(&w.done), "the trim returned before the kernel ended");
	/* What the sync covered went back: x's 64 MiB; y, freed after it began, may stay. */
	cr_expect_leq(t_stats(&t, 0, NULL).mapped_bytes, 4 * MiB, "mapped %zu after the trim",
		      (size_t)t_stats(&t, 0, NULL).mapped_bytes);
	t_close(&t);
}

/* A sharing waiter asks for trims again and again: while one waits for the device, the next
 * gives back what is free at once instead of waiting too (each holds a worker of the control
 * server meanwhile). */
Test(heap_trim, a_second_trim_does_not_wait_for_the_device_again)
{
	struct writer w = { .value = 9, .ms = 600 };
	struct trim_call c;
	struct tctx t;
	double t0, took;

	open_plain(&t);
	t_freed_while_written(&t, stream, &w, BIG);
	trim_start(&c, &t);
	t0 = vmm_now_s();
	cr_expect_eq(vmm_trim(t.core, 0, NULL), VMM_OK);
	took = vmm_now_s() - t0;
	cr_expect(!atomic_load(&w.done), "the kernel ended before the second trim: nothing tested");
	cr_expect_lt(took, 0.2, "the second trim waited %.0f ms for the device", took * 1000);
	pthread_join(c.thread, NULL);
	cr_expect_eq(c.st, VMM_OK);
	cr_expect_eq(t_stats(&t, 0, NULL).mapped_bytes, 0, "the first trim gave x back");
	t_close(&t);
}

/* The one sync at a time is per device: another device's trim meanwhile still makes its own
 * quarantine free and gives it back. */
Test(heap_trim, a_trim_of_another_device_is_not_held_back)
{
	struct writer w = { .value = 10, .ms = 600 };
	struct trim_call c;
	struct tctx t;
	vmm_devptr z;

	open_on(&t, "2");
	cr_assert_eq(vmm_malloc(t.core, 1, BIG, 0, NULL, &z, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, z, NULL), VMM_OK);
	t_freed_while_written(&t, stream, &w, BIG);
	trim_start(&c, &t);
	cr_expect_eq(vmm_trim(t.core, 1, NULL), VMM_OK);
	cr_expect(!atomic_load(&w.done), "the kernel ended before device 1's trim: nothing tested");
	cr_expect_eq(t_stats(&t, 1, NULL).mapped_bytes, 0, "device 1 kept %zu bytes",
		     (size_t)t_stats(&t, 1, NULL).mapped_bytes);
	pthread_join(c.thread, NULL);
	t_close(&t);
}

Test(heap_trim, the_core_is_destroyed_while_a_trim_waits_for_the_device)
{
	struct writer w = { .value = 8, .ms = 300 };
	struct trim_call c;
	struct tctx t;

	open_plain(&t);
	t_freed_while_written(&t, stream, &w, BIG);
	trim_start(&c, &t);
	/* The destroy waits for the trim, which would otherwise take the lock of a freed heap (a
	 * crash here, a report under ASan). */
	t_close(&t);
	pthread_join(c.thread, NULL);
	cr_expect_eq(c.st, VMM_OK);
	cr_expect(atomic_load(&w.done));
}
