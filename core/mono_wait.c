/* Timed waits on the monotonic clock (mono_wait.h). */
#include "mono_wait.h"

void vmm_cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t attr;

	/* glibc supports CLOCK_MONOTONIC here on every Linux it runs on; if it ever did not, the
	 * deadlines below would lie in the past for a REALTIME clock: waits would end at once and
	 * their callers re-check (never a hang). */
	if (pthread_condattr_init(&attr)) {
		pthread_cond_init(c, NULL);
		return;
	}
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(c, &attr);
	pthread_condattr_destroy(&attr);
}

void vmm_deadline_ms(struct timespec *ts, long long ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	if (ms < 0)
		ms = 0;
	ts->tv_sec += (time_t)(ms / 1000);
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

bool vmm_time_before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

double vmm_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

long long vmm_now_ms(void)
{
	return (long long)(vmm_now_s() * 1e3);
}

double vmm_ms_between(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}
