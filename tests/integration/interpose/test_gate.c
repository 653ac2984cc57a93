/* The submission gate (shim/gate.h) on its own: what sleep relies on. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "../../../shim/gate.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static atomic_int inside, entered, left;
static _Atomic double left_at; /* now() just before the holder left the gate */

static void *hold_100ms(void *arg)
{
	(void)arg;
	gate_enter();
	atomic_store(&inside, 1);
	usleep(100 * 1000);
	atomic_store(&left_at, now());
	atomic_store(&left, 1);
	gate_leave();
	return NULL;
}

static atomic_int entering; /* set just before enter_once enters */

static void *enter_once(void *arg)
{
	(void)arg;
	atomic_store(&entering, 1);
	gate_enter();
	atomic_fetch_add(&entered, 1);
	gate_leave();
	return NULL;
}

static void wait_for(atomic_int *flag)
{
	while (!atomic_load(flag))
		usleep(1000);
}

Test(gate, open_gate_lets_everyone_through)
{
	for (int i = 0; i < 1000; i++) {
		gate_enter();
		gate_leave();
	}
	cr_assert(!gate_is_closed());
}

Test(gate, close_waits_for_calls_in_flight)
{
	pthread_t t;
	double t0;

	pthread_create(&t, NULL, hold_100ms, NULL);
	wait_for(&inside);
	cr_assert_eq(gate_close(-1, NULL), VMM_OK);
	/* Measured against the holder's own leaving, not a guess of when it entered: under load
	 * this thread may see `inside` late, after most of the holder's 100 ms have passed. */
	t0 = now();
	cr_assert(atomic_load(&left), "closed while a call was still inside");
	cr_assert_geq(t0, atomic_load(&left_at), "the close returned before the holder left");
	cr_assert(gate_is_closed());
	gate_open();
	pthread_join(t, NULL);
}

Test(gate, closed_gate_holds_new_calls_until_open)
{
	pthread_t t;

	cr_assert_eq(gate_close(1000, NULL), VMM_OK);
	pthread_create(&t, NULL, enter_once, NULL);
	/* 100 ms from the thread's call, not its creation: one started late would not have tried. */
	wait_for(&entering);
	usleep(100 * 1000);
	cr_assert_eq(atomic_load(&entered), 0, "a call passed a closed gate");
	gate_open();
	pthread_join(t, NULL);
	cr_assert_eq(atomic_load(&entered), 1);
}

static atomic_int stop_asked, release_holder;

static void *hold_until_released(void *arg)
{
	(void)arg;
	gate_enter();
	atomic_store(&inside, 1);
	while (!atomic_load(&release_holder))
		usleep(1000);
	gate_leave();
	return NULL;
}

Test(gate, close_times_out_and_reopens)
{
	vmm_error err;
	pthread_t t;

	/* The holder stays until released, not for a fixed time: a loaded machine could otherwise
	 * let it leave before the 10 ms close gives up. */
	pthread_create(&t, NULL, hold_until_released, NULL);
	wait_for(&inside);
	cr_assert_eq(gate_close(10, &err), VMM_E_BUSY);
	cr_assert(strstr(err.msg, "still inside"), "%s", err.msg);
	cr_assert(!gate_is_closed(), "a timed-out close left the gate closed");
	atomic_store(&release_holder, 1);
	pthread_join(t, NULL);
}

Test(gate, closing_from_inside_does_not_wait_for_itself)
{
	double t0 = now();

	gate_enter();
	cr_assert_eq(gate_close(2000, NULL), VMM_OK);
	cr_assert_lt(now() - t0, 1.0);
	gate_enter(); /* nested: already inside */
	gate_leave();
	gate_leave();
	cr_assert_eq(gate_close(10, NULL), VMM_E_BUSY, "closing a closed gate must say so");
	gate_open();
}

static atomic_int wakes;

static void wake(void)
{
	atomic_fetch_add(&wakes, 1);
	usleep(20 * 1000);
	gate_open();
}

Test(gate, autowake_wakes_once_for_many_waiters)
{
	pthread_t t[8];

	cr_assert_eq(gate_close(1000, NULL), VMM_OK);
	gate_set_autowake(true, wake);
	for (int i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, enter_once, NULL);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(atomic_load(&entered), 8);
	cr_assert_eq(atomic_load(&wakes), 1, "wake asked %d times", atomic_load(&wakes));
	gate_set_autowake(false, NULL);
}

static bool stop_now(void *arg)
{
	(void)arg;
	atomic_fetch_add(&stop_asked, 1);
	return true;
}

Test(gate, a_closing_wait_stops_when_asked_and_reopens)
{
	vmm_error err;
	pthread_t t;
	double t0;

	pthread_create(&t, NULL, hold_until_released, NULL);
	wait_for(&inside);
	t0 = now();
	cr_assert_eq(gate_close_within(5000, stop_now, NULL, &err), VMM_E_BUSY);
	cr_assert_lt(now() - t0, 2.0, "stopped when asked, not at the timeout");
	cr_assert(strstr(err.msg, "cancelled"), "%s", err.msg);
	cr_assert_geq(atomic_load(&stop_asked), 1);
	cr_assert(!gate_is_closed(), "a stopped close left the gate closed");
	atomic_store(&release_holder, 1);
	pthread_join(t, NULL);
}

static bool never(void *arg)
{
	(void)arg;
	return false;
}

Test(gate, a_closing_wait_with_a_stop_test_still_waits_for_calls_in_flight)
{
	pthread_t t;

	pthread_create(&t, NULL, hold_100ms, NULL);
	wait_for(&inside);
	cr_assert_eq(gate_close_within(5000, never, NULL, NULL), VMM_OK);
	cr_assert(atomic_load(&left), "closed before the call in flight left");
	gate_open();
	pthread_join(t, NULL);
}

/* What sharing's attempt under the GPU lock relies on: a closed gate is refused at once (never a
 * wait), an open one is entered and counted (a close then waits for it), and a thread already
 * inside nests. */
static vmm_status closed_status;

static void *close_50ms(void *arg)
{
	(void)arg;
	closed_status = gate_close(50, NULL);
	return NULL;
}

Test(gate, try_enter_never_waits_and_counts_like_enter)
{
	pthread_t t;
	double t0;

	cr_assert(gate_try_enter(), "an open gate was refused");
	cr_assert(gate_try_enter(), "a nested entry was refused");
	gate_leave();
	gate_leave();
	cr_assert_eq(gate_close(1000, NULL), VMM_OK);
	t0 = now();
	cr_assert(!gate_try_enter(), "a closed gate was entered");
	/* Bound on a wait, not on speed: generous, so that a descheduled thread does not fail it. */
	cr_expect_lt(now() - t0, 0.5, "try_enter waited at a closed gate");
	gate_open();
	cr_assert(gate_try_enter());
	/* Inside: a close from another thread must wait for this one. */
	pthread_create(&t, NULL, close_50ms, NULL);
	pthread_join(t, NULL);
	cr_assert_neq(closed_status, VMM_OK, "close did not wait for a try_enter inside");
	cr_assert(!gate_is_closed(), "the timed-out close did not reopen");
	gate_leave();
}

/* A close that gives up says how many threads it gave up on (the number it saw, not one read
 * again later) and which calls they are in: what a user needs to find who kept the sleep out. */
static void *inside_a_named_call(void *arg)
{
	(void)arg;
	gate_enter_as("cuMemcpyDtoH_v2");
	atomic_store(&inside, 1);
	while (!atomic_load(&release_holder))
		usleep(1000);
	gate_leave();
	return NULL;
}

Test(gate, a_close_that_gives_up_names_the_calls_it_waited_for)
{
	vmm_error err;
	pthread_t t[2];

	for (int i = 0; i < 2; i++) {
		atomic_store(&inside, 0);
		pthread_create(&t[i], NULL, inside_a_named_call, NULL);
		wait_for(&inside);
	}
	gate_enter(); /* the closer itself inside: neither counted nor named */
	cr_assert_eq(gate_close(50, &err), VMM_E_BUSY);
	cr_assert(strstr(err.msg, "2 thread(s) still inside a device call (cuMemcpyDtoH_v2) "
			  "after 50 ms"), "%s", err.msg);
	cr_assert_eq(gate_close_within(50, stop_now, NULL, &err), VMM_E_BUSY);
	cr_assert(strstr(err.msg, "cancelled while 2 thread(s) were still inside a device call "
			  "(cuMemcpyDtoH_v2)"), "%s", err.msg);
	atomic_store(&release_holder, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	gate_leave();
	cr_assert_eq(gate_close(1000, &err), VMM_OK, "%s", err.msg);
	gate_open();
}
