/* Idle pieces given back on the core's thread (heap_trim.c, VMMSHIM_IDLE_TRIM): after a sync
 * ahead, the 2 MiB pieces that have stayed wholly free for idle_trim_s go back to the driver
 * while the program goes on; a piece the program uses again is never given back under it, and
 * with the setting off nothing goes. Kernels are simdev's slow writers, so that each free is
 * followed by a sync ahead (heap_ahead.c). */
#include <criterion/criterion.h>
#include <cuda.h>
#include <time.h>

#include "counted_heap.h"
#include "helpers.h"
#include "slow_writer.h"

#define CU_OK(call) cr_assert_eq((call), CUDA_SUCCESS, "%s failed", #call)
#define PIECES (20 * MiB)   /* below whole_handle_min: made of 2 MiB pieces */

static CUstream stream;

static void open_trim(struct tctx *t, double idle_s)
{
	vmm_config cfg;

	vmm_config_defaults(&cfg);
	cfg.sync_ahead_min = 8 * MiB;
	cfg.idle_trim_s = idle_s;
	t_simdev_env("1G", NULL, NULL);
	stream = t_open_counted(t, &cfg);
}

/* Free x after a short kernel wrote it, and wait (10 s at most) until the core's thread has
 * synced ahead `syncs` times in all. */
static void free_and_sync_ahead(struct tctx *t, vmm_devptr x, size_t size, uint64_t syncs)
{
	struct writer w = { .ptr = (void *)(uintptr_t)x, .size = size, .value = 7, .ms = 1 };

	t_launch_writer(stream, &w);
	cr_assert_eq(vmm_free(t->core, x, NULL), VMM_OK);
	for (int i = 0; i < 2000 && t_stats(t, 0, NULL).syncs_ahead < syncs; i++)
		nanosleep(&(struct timespec){ 0, 5 * 1000000 }, NULL);
	cr_assert_geq(t_stats(t, 0, NULL).syncs_ahead, syncs, "no sync ahead within 10 s");
	CU_OK(cuStreamSynchronize(stream));
}

static void pause_ms(long ms)
{
	nanosleep(&(struct timespec){ ms / 1000, (ms % 1000) * 1000000 }, NULL);
}

/* kept (filled), a and b allocated; a freed and synced ahead (its pieces seen free), then a
 * pause of pause_ms, then b freed and synced ahead (the round that may give a's pieces back). */
struct scene {
	vmm_devptr kept, a, b;
	uint64_t mapped_before;
};

static void scene_start(struct tctx *t, struct scene *s)
{
	cr_assert_eq(vmm_malloc(t->core, 0, 4 * MiB, 0, NULL, &s->kept, NULL), VMM_OK);
	t_fill(s->kept, 4 * MiB, 11);
	cr_assert_eq(vmm_malloc(t->core, 0, PIECES, 0, NULL, &s->a, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t->core, 0, 16 * MiB, 0, NULL, &s->b, NULL), VMM_OK);
	s->mapped_before = t_stats(t, 0, NULL).mapped_bytes;
	free_and_sync_ahead(t, s->a, PIECES, 1);
}

/* Wait (2 s at most) for the thread's round after the second sync to end. */
static uint64_t trimmed_after(struct tctx *t, uint64_t at_least)
{
	for (int i = 0; i < 400 && t_stats(t, 0, NULL).pieces_trimmed < at_least; i++)
		pause_ms(5);
	return t_stats(t, 0, NULL).pieces_trimmed;
}

Test(heap_trim, idle_pieces_go_back_to_the_driver_and_live_data_stays)
{
	struct scene s;
	struct tctx t;
	vmm_stats st;

	open_trim(&t, 0.05);
	scene_start(&t, &s);
	pause_ms(120);
	free_and_sync_ahead(&t, s.b, 16 * MiB, 2);
	cr_expect_geq(trimmed_after(&t, 9), 9, "a's pieces, idle for 120 ms, were not given back");
	st = t_stats(&t, 0, NULL);
	cr_expect_leq(st.mapped_bytes + 18 * MiB, s.mapped_before,
		      "mapped %llu bytes after the trim, %llu before a was freed",
		      (unsigned long long)st.mapped_bytes, (unsigned long long)s.mapped_before);
	cr_expect(t_check(s.kept, 4 * MiB, 11), "the live allocation lost its contents");
	/* The memory is made again on demand, and holds what is written to it. */
	cr_assert_eq(vmm_malloc(t.core, 0, PIECES, 0, NULL, &s.a, NULL), VMM_OK);
	t_fill(s.a, PIECES, 12);
	cr_expect(t_check(s.a, PIECES, 12));
	cr_assert_eq(vmm_free(t.core, s.a, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, s.kept, NULL), VMM_OK);
	t_close(&t);
}

Test(heap_trim, a_piece_used_again_is_not_given_back)
{
	vmm_devptr again;
	struct scene s;
	struct tctx t;

	open_trim(&t, 0.05);
	scene_start(&t, &s);
	/* a's memory is taken again, in place, before it has been idle long enough. */
	cr_assert_eq(vmm_malloc(t.core, 0, PIECES, 0, NULL, &again, NULL), VMM_OK);
	cr_expect_eq(again, s.a, "the freed block was not reused in place");
	t_fill(again, PIECES, 13);
	pause_ms(120);
	free_and_sync_ahead(&t, s.b, 16 * MiB, 2);
	pause_ms(100);
	cr_expect(t_check(again, PIECES, 13), "a piece in use was given back under its data");
	cr_expect(t_check(s.kept, 4 * MiB, 11));
	/* b's pieces were seen free only now: not idle yet. */
	cr_expect_eq(t_stats(&t, 0, NULL).pieces_trimmed, 0);
	cr_assert_eq(vmm_free(t.core, again, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, s.kept, NULL), VMM_OK);
	t_close(&t);
}

Test(heap_trim, nothing_goes_with_the_setting_off)
{
	struct scene s;
	struct tctx t;

	open_trim(&t, 0);
	scene_start(&t, &s);
	pause_ms(120);
	free_and_sync_ahead(&t, s.b, 16 * MiB, 2);
	pause_ms(100);
	cr_expect_eq(t_stats(&t, 0, NULL).pieces_trimmed, 0);
	cr_expect_eq(t_stats(&t, 0, NULL).mapped_bytes, s.mapped_before,
		     "free memory was given back with the setting off");
	cr_assert_eq(vmm_free(t.core, s.kept, NULL), VMM_OK);
	t_close(&t);
}
