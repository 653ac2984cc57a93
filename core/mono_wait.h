/* Timed waits (and the durations the logs give) on the monotonic clock. A condition variable
 * made with the defaults measures its deadlines on CLOCK_REALTIME, which a step of the wall clock
 * (NTP, a manual date, a VM resumed) moves: a wait then ends far too early or far too late.
 * Every timed wait in core/ and shim/ uses a condition variable made by vmm_cond_init_monotonic
 * and a deadline from vmm_deadline_ms. */
#ifndef VMM_MONO_WAIT_H
#define VMM_MONO_WAIT_H

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

/* (Re)initialise c to measure pthread_cond_timedwait deadlines on CLOCK_MONOTONIC. Only where
 * nobody waits on c (at first use, under pthread_once, or in a forked child). */
void vmm_cond_init_monotonic(pthread_cond_t *c);

/* The CLOCK_MONOTONIC time ms milliseconds from now (ms >= 0). */
void vmm_deadline_ms(struct timespec *ts, long long ms);

/* a < b */
bool vmm_time_before(const struct timespec *a, const struct timespec *b);

/* Milliseconds from a to b (negative when b is earlier). */
double vmm_ms_between(const struct timespec *a, const struct timespec *b);

/* Seconds on CLOCK_MONOTONIC: the one clock for durations and for deadlines kept as numbers. */
double vmm_now_s(void);
/* The same clock in whole milliseconds, for poll timeouts and socket deadlines. */
long long vmm_now_ms(void);

#endif
