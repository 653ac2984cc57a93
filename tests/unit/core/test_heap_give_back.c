/* A large request that would have many scattered free 2 MiB pieces moved to it gives them back
 * to the driver and makes their bytes again, as one handle (heap_grow.c, plan_give_back); a few
 * pieces it moves. Between the give-back and the new handle the driver may refuse (another
 * process took the memory, a driver error): the request must then end as a clean OOM or succeed
 * by another way, with every live allocation intact, the heap's accounting equal to the
 * driver's, and the heap usable after. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "helpers.h"

#define PAIRS 64

/* The calls of cuMemCreate that setup() makes: 64 kept pieces and 64 freed allocations of two
 * pieces each. The faults below are numbered after them; setup checks the count. */
#define SETUP_CREATES 192

struct scattered {
	struct tctx t;
	vmm_devptr kept[PAIRS];
};

/* 4 MiB freed between 2 MiB kept, 64 times: 256 MiB free in 2 MiB pieces on a 512 MiB device,
 * no free range over 4 MiB. `fail` names the driver calls that will fail (SIMDEV_FAIL). */
static void setup(struct scattered *s, const char *fail)
{
	t_simdev_env("512M", NULL, fail);
	t_open(&s->t, NULL);
	t_scatter(&s->t, PAIRS, s->kept);
	cr_assert_eq(t_stats(&s->t, 0, NULL).handles_created, SETUP_CREATES,
		     "the fault numbers below assume %d creates, not %llu", SETUP_CREATES,
		     (unsigned long long)t_stats(&s->t, 0, NULL).handles_created);
}

/* What a user checks after any outcome: the kept data, the live allocations, and the heap's
 * mapped bytes equal to what the driver holds, at most max_used. */
static void check_intact(struct scattered *s, uint64_t live, size_t max_used)
{
	vmm_stats st = t_stats(&s->t, 0, NULL);

	for (int i = 0; i < PAIRS; i++)
		cr_assert(t_check(s->kept[i], 2 * MiB, (unsigned char)(i + 1)), "kept %d intact", i);
	cr_assert_eq(st.live_count, live);
	cr_assert_eq(st.mapped_bytes, t_dev_used(&s->t, 0), "mapped %llu, the driver holds %llu",
		     (unsigned long long)st.mapped_bytes, (unsigned long long)t_dev_used(&s->t, 0));
	cr_assert_leq(t_dev_used(&s->t, 0), max_used, "%llu MiB held",
		      (unsigned long long)(t_dev_used(&s->t, 0) / MiB));
}

static void use_and_free(struct scattered *s, vmm_devptr p, size_t n)
{
	t_fill(p, n, 0x5a);
	cr_assert(t_check(p, n, 0x5a));
	cr_assert_eq(vmm_free(s->t.core, p, NULL), VMM_OK);
}

Test(heap_give_back, a_large_request_gives_scattered_free_pieces_back_and_is_one_handle)
{
	struct scattered s;
	vmm_devptr big;
	uint64_t released;

	setup(&s, NULL);
	released = t_stats(&s.t, 0, NULL).handles_released;
	/* 200 MiB would have 100 pieces moved to it: they go back, and it is made as one handle of
	 * their memory; the device's memory does not grow. */
	cr_assert_eq(vmm_malloc(s.t.core, 0, 200 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(t_handles_over(big, 200 * MiB), 1);
	cr_assert_eq(t_stats(&s.t, 0, NULL).handles_released - released, 100);
	cr_assert_eq(t_stats(&s.t, 0, NULL).pieces_given_back, 100, "the stats say so");
	cr_assert_eq(t_dev_used(&s.t, 0), 384 * MiB, "no more than before: %llu MiB",
		     (unsigned long long)(t_dev_used(&s.t, 0) / MiB));
	cr_assert_eq(t_stats(&s.t, 0, NULL).peak_mapped_bytes, 384 * MiB);
	t_fill(big, 200 * MiB, 0xee);
	check_intact(&s, PAIRS + 1, 384 * MiB);
	cr_assert(t_check(big, 200 * MiB, 0xee));
	t_close(&s.t);
}

Test(heap_give_back, a_refused_new_handle_after_a_give_back_is_made_on_the_next_try)
{
	struct scattered s;
	vmm_devptr big;
	uint64_t released;
	char fail[64];

	/* The first create after setup is the give-back's new handle. */
	snprintf(fail, sizeof(fail), "cuMemCreate:%d", SETUP_CREATES + 1);
	setup(&s, fail);
	released = t_stats(&s.t, 0, NULL).handles_released;
	cr_assert_eq(vmm_malloc(s.t.core, 0, 200 * MiB, 0, NULL, &big, NULL), VMM_OK);
	/* 100 pieces went back before the refusal; the retry gave back the 28 left as well. */
	cr_assert_geq(t_stats(&s.t, 0, NULL).handles_released - released, 100);
	check_intact(&s, PAIRS + 1, 384 * MiB);
	use_and_free(&s, big, 200 * MiB);
	check_intact(&s, PAIRS, 384 * MiB);
	t_close(&s.t);
}

Test(heap_give_back, a_driver_that_refuses_every_new_handle_gets_a_clean_oom)
{
	struct scattered s;
	vmm_devptr big;
	vmm_error err;
	vmm_status st;
	char fail[256];
	int n = 0;

	/* Every create the request could make fails: the give-back's, and the ladder's retries. */
	for (int k = 1; k <= 8; k++)
		n += snprintf(fail + n, sizeof(fail) - n, "%scuMemCreate:%d", k > 1 ? "," : "",
			      SETUP_CREATES + k);
	setup(&s, fail);
	cr_assert_eq(vmm_malloc(s.t.core, 0, 200 * MiB, 0, NULL, &big, &err), VMM_E_OOM);
	cr_assert(err.msg[0], "the error says why");
	check_intact(&s, PAIRS, 384 * MiB);
	/* Past the faults the request goes through, on the memory given back; each try before that
	 * is a clean OOM. */
	for (int k = 0; (st = vmm_malloc(s.t.core, 0, 200 * MiB, 0, NULL, &big, NULL)); k++) {
		cr_assert_eq(st, VMM_E_OOM);
		cr_assert_lt(k, 8, "the heap does not recover");
	}
	check_intact(&s, PAIRS + 1, 384 * MiB);
	use_and_free(&s, big, 200 * MiB);
	t_close(&s.t);
}

Test(heap_give_back, a_piece_that_will_not_unmap_stays_free_and_the_request_succeeds)
{
	struct scattered s;
	vmm_devptr big;

	/* setup unmaps nothing: the first unmap is the give-back's. That piece stays free where it
	 * is and its bytes are made anew: one piece more on the device, until it is reused. */
	setup(&s, "cuMemUnmap:1");
	cr_assert_eq(vmm_malloc(s.t.core, 0, 200 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(t_dev_used(&s.t, 0), 386 * MiB, "%llu MiB",
		     (unsigned long long)(t_dev_used(&s.t, 0) / MiB));
	check_intact(&s, PAIRS + 1, 386 * MiB);
	use_and_free(&s, big, 200 * MiB);
	check_intact(&s, PAIRS, 386 * MiB);
	t_close(&s.t);
}

Test(heap_give_back, a_large_request_moves_a_few_free_pieces_rather_than_give_them_back)
{
	struct tctx t;
	vmm_devptr freed[8], kept[8], big, before;
	uint64_t released, moved;

	t_simdev_env("512M", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 256 * MiB, 0, NULL, &before, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, before, NULL), VMM_OK);
	/* 8 free pieces of 2 MiB scattered between kept ones, and the rest free in 64 MiB handles
	 * (the freed 256 MiB, cut where the small requests share it). */
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, 2 * MiB, 0, NULL, &freed[i], NULL), VMM_OK);
		cr_assert_eq(vmm_malloc(t.core, 0, 2 * MiB, 0, NULL, &kept[i], NULL), VMM_OK);
	}
	for (int i = 0; i < 8; i++)
		cr_assert_eq(vmm_free(t.core, freed[i], NULL), VMM_OK);
	released = t_stats(&t, 0, NULL).handles_released;
	moved = t_stats(&t, 0, NULL).handles_moved;
	/* 240 MiB: the free 224 MiB grown by 16, which only the 8 scattered pieces can give. Fewer
	 * than 16 pieces would move: they are moved, none is given back. */
	cr_assert_eq(vmm_malloc(t.core, 0, 240 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(t_stats(&t, 0, NULL).handles_released, released);
	cr_assert_eq(t_stats(&t, 0, NULL).handles_moved - moved, 8, "the stats count the moves");
	cr_assert_eq(t_stats(&t, 0, NULL).pieces_given_back, 0);
	cr_assert_eq(t_dev_used(&t, 0), 256 * MiB);
	t_fill(big, 240 * MiB, 3);
	cr_assert(t_check(big, 240 * MiB, 3));
	t_close(&t);
}
