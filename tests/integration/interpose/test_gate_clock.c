/* The gate's waits against a step of the wall clock. This program stands in for clock_gettime
 * (the gate is linked into it): CLOCK_REALTIME answers the real time plus `wall_step`, the way
 * it reads after an NTP step or a manual `date`; every other clock is the real one. The kernel
 * measures a condition variable's deadline on the real clocks, so a wait whose deadline was
 * computed from the stepped wall clock ends an hour early (or late); one on CLOCK_MONOTONIC does
 * not notice. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../../shim/gate.h"

static atomic_long wall_step; /* seconds added to CLOCK_REALTIME */

int clock_gettime(clockid_t id, struct timespec *ts)
{
	int rc = (int)syscall(SYS_clock_gettime, id, ts);

	if (!rc && id == CLOCK_REALTIME)
		ts->tv_sec += atomic_load(&wall_step);
	return rc;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static atomic_int inside, release;

static void *hold(void *arg)
{
	(void)arg;
	gate_enter();
	atomic_store(&inside, 1);
	while (!atomic_load(&release))
		usleep(1000);
	gate_leave();
	return NULL;
}

static bool never(void *arg)
{
	(void)arg;
	return false;
}

/* The wall clock an hour behind: a REALTIME deadline would have passed before the wait began. */
Test(gate_clock, a_close_waits_its_whole_timeout_whatever_the_wall_clock_says)
{
	vmm_error err;
	pthread_t t;
	double t0;

	pthread_create(&t, NULL, hold, NULL);
	while (!atomic_load(&inside))
		usleep(1000);
	atomic_store(&wall_step, -3600);
	t0 = now();
	cr_assert_eq(gate_close(300, &err), VMM_E_BUSY);
	cr_assert_geq(now() - t0, 0.25, "gave up after %.3f s of a 300 ms timeout", now() - t0);
	t0 = now();
	cr_assert_eq(gate_close_within(300, never, NULL, &err), VMM_E_BUSY);
	cr_assert_geq(now() - t0, 0.25, "gave up after %.3f s of a 300 ms timeout", now() - t0);
	atomic_store(&release, 1);
	pthread_join(t, NULL);
}

/* The wall clock an hour ahead: a REALTIME deadline would lie an hour away. */
static atomic_int woken;

static void wake_fails(void)
{
	atomic_fetch_add(&woken, 1);
}

static void *enter_once(void *arg)
{
	(void)arg;
	gate_enter();
	gate_leave();
	return NULL;
}

Test(gate_clock, autowake_retries_each_second_whatever_the_wall_clock_says, .timeout = 20)
{
	pthread_t t;

	cr_assert_eq(gate_close(1000, NULL), VMM_OK);
	atomic_store(&wall_step, 3600);
	gate_set_autowake(true, wake_fails); /* a wake that fails: the waiter asks again */
	pthread_create(&t, NULL, enter_once, NULL);
	/* Wait for the second ask with a bound far from both answers: a retry each second brings it
	 * within about 1 s of the waiter's start (late under load), a wall-clock deadline in an hour. */
	for (double end = now() + 10; now() < end && atomic_load(&woken) < 2;)
		usleep(10 * 1000);
	cr_assert_geq(atomic_load(&woken), 2, "the wake was asked %d time(s) in 10 s",
		      atomic_load(&woken));
	gate_set_autowake(false, NULL);
	gate_open();
	pthread_join(t, NULL);
}
