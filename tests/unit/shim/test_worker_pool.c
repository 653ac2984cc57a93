/* The control server's pool of answering threads (shim/control/worker_pool.c): what a client
 * sees of its bound. A request counts against it until its answer is out, not until its thread
 * has closed the connection, and the threads still closing are bounded too. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "worker_pool.h"

/* A job that answers (or not) and then lingers until released: a connection being drained. */
struct lingering {
	bool answer_first;
	atomic_bool release;
	atomic_int *started;
};

static void linger(void *arg)
{
	struct lingering *l = arg;
	const struct timespec tick = { 0, 1000000 };

	if (l->answer_first)
		pool_answered();
	atomic_fetch_add(l->started, 1);
	while (!atomic_load(&l->release))
		nanosleep(&tick, NULL);
	if (!l->answer_first)
		pool_answered();
	pool_answered(); /* again: nothing more */
}

static void quick(void *arg)
{
	atomic_fetch_add((atomic_int *)arg, 1);
}

static void wait_started(atomic_int *started, int n)
{
	const struct timespec tick = { 0, 1000000 };

	for (int i = 0; i < 10000 && atomic_load(started) < n; i++)
		nanosleep(&tick, NULL);
	cr_assert_eq(atomic_load(started), n, "%d of %d jobs started", atomic_load(started), n);
}

static struct lingering jobs[POOL_MAX_JOBS];

static void submit_lingering(int from, int to, bool answer_first, atomic_int *started)
{
	char why[128];

	for (int i = from; i < to; i++) {
		jobs[i] = (struct lingering){ .answer_first = answer_first, .started = started };
		cr_assert(pool_submit(linger, &jobs[i], why, sizeof(why)), "job %d refused: %s", i,
			  why);
	}
}

static void release_all(int n)
{
	for (int i = 0; i < n; i++)
		atomic_store(&jobs[i].release, true);
}

/* A client asking again once answered is not refused because earlier answers are still closing
 * their connections; once the closing ones reach their own bound, it is told why. */
Test(worker_pool, answered_requests_do_not_count_against_the_answering_bound)
{
	atomic_int started = 0, ran = 0;
	char why[128] = "";

	submit_lingering(0, POOL_MAX_BUSY, true, &started);
	wait_started(&started, POOL_MAX_BUSY);
	cr_expect(pool_submit(quick, &ran, why, sizeof(why)), "refused beside answered ones: %s",
		  why);
	/* The rest of the closing bound, then nothing more. */
	submit_lingering(POOL_MAX_BUSY, POOL_MAX_JOBS - 1, true, &started);
	wait_started(&started, POOL_MAX_JOBS - 1);
	for (int i = 0; i < 1000 && atomic_load(&ran) < 1; i++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	cr_assert_eq(atomic_load(&ran), 1);
	cr_assert(pool_submit(quick, &ran, why, sizeof(why)), "%s", why);
	for (int i = 0; i < 1000 && atomic_load(&ran) < 2; i++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	/* Every slot but those of the finished quick jobs is closing. */
	jobs[POOL_MAX_JOBS - 1] = (struct lingering){ .answer_first = true, .started = &started };
	cr_assert(pool_submit(linger, &jobs[POOL_MAX_JOBS - 1], why, sizeof(why)), "%s", why);
	wait_started(&started, POOL_MAX_JOBS);
	cr_expect_not(pool_submit(quick, &ran, why, sizeof(why)));
	cr_expect(strstr(why, "still closing"), "%s", why);
	release_all(POOL_MAX_JOBS);
	cr_expect_eq(pool_stop(5000), 0, "jobs still running after the release");
}

/* Requests not yet answered keep their bound: the next one is refused, saying so. */
Test(worker_pool, unanswered_requests_keep_the_bound)
{
	atomic_int started = 0, ran = 0;
	char why[128] = "";

	submit_lingering(0, POOL_MAX_BUSY, false, &started);
	wait_started(&started, POOL_MAX_BUSY);
	cr_expect_not(pool_submit(quick, &ran, why, sizeof(why)));
	cr_expect(strstr(why, "being answered already"), "%s", why);
	release_all(POOL_MAX_BUSY);
	cr_expect_eq(pool_stop(5000), 0, "jobs still running after the release");
	cr_expect_eq(atomic_load(&ran), 0);
}
