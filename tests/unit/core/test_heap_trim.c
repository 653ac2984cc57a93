/* Trims (heap_trim.c): the quarantine's device synchronization is made without the heap's lock,
 * so that the program's own frees and allocations go on while a trim (a sharing peer's, say)
 * waits for the device; what it waited for still goes back to the driver; a second trim meanwhile
 * does not wait too; and the core's destroy waits for a trim in its synchronization instead of
 * freeing the heap under it.
 * Kernels are simdev's slow writers, whose submissions the heap counts. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <time.h>

#include "backend/backend.h"
#include "counted_heap.h"
#include "helpers.h"
#include "mono_wait.h"

#define BIG (64 * MiB)

static CUstream stream;

/* The heap over simdev, without syncing ahead (its thread would free the quarantine first). */
static void open_plain(struct tctx *t)
{
	vmm_config cfg;

	t_simdev_env("1G", NULL, NULL);
	vmm_config_defaults(&cfg);
	cfg.sync_ahead_min = 0;
	stream = t_open_counted(t, &cfg);
}

/* A block of BIG that w writes over w->ms, freed while it does (quarantined). */
static void freed_while_written(struct tctx *t, struct writer *w)
{
	vmm_devptr x;

	cr_assert_eq(vmm_malloc(t->core, 0, BIG, 0, NULL, &x, NULL), VMM_OK);
	w->ptr = (void *)(uintptr_t)x;
	w->size = BIG;
	t_launch_writer(stream, w);
	cr_assert_eq(vmm_free(t->core, x, NULL), VMM_OK);
}

struct trim_call {
	pthread_t thread;
	vmm_core *core;
	vmm_status st;
};

static void *trim_main(void *arg)
{
	struct trim_call *c = arg;

	c->st = vmm_trim(c->core, 0, NULL);
	return NULL;
}

static void trim_start(struct trim_call *c, vmm_core *core)
{
	c->core = core;
	cr_assert_eq(pthread_create(&c->thread, NULL, trim_main, c), 0);
	/* Into its synchronization: the writer runs for hundreds of ms more. */
	nanosleep(&(struct timespec){ 0, 50 * 1000000 }, NULL);
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
	freed_while_written(&t, &w);
	trim_start(&c, t.core);
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
	freed_while_written(&t, &w);
	trim_start(&c, t.core);
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

Test(heap_trim, the_core_is_destroyed_while_a_trim_waits_for_the_device)
{
	struct writer w = { .value = 8, .ms = 300 };
	struct trim_call c;
	struct tctx t;

	open_plain(&t);
	freed_while_written(&t, &w);
	trim_start(&c, t.core);
	/* The destroy waits for the trim, which would otherwise take the lock of a freed heap (a
	 * crash here, a report under ASan). */
	t_close(&t);
	pthread_join(c.thread, NULL);
	cr_expect_eq(c.st, VMM_OK);
	cr_expect(atomic_load(&w.done));
}
