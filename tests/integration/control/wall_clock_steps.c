/* Preloaded after the shim for control_soak_clock: the wall clock as a program sees it steps
 * 20 s back and forth every millisecond (CLOCK_REALTIME reads 20 s behind in odd milliseconds;
 * every other clock, and the kernel's own REALTIME, are untouched). A deadline computed from
 * CLOCK_REALTIME in an odd millisecond then lies 20 s early for the kernel, as after a forward
 * step of the wall clock (NTP, a manual date), and a wait on it ends at once. The shim's timed
 * waits must not notice: they are measured on CLOCK_MONOTONIC. */
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int clock_gettime(clockid_t id, struct timespec *ts)
{
	int rc = (int)syscall(SYS_clock_gettime, id, ts);

	if (!rc && id == CLOCK_REALTIME && (ts->tv_nsec / 1000000) % 2)
		ts->tv_sec -= 20;
	return rc;
}
