/* Driver faults for the soaks (soak_faults.h). */
#include "soak_faults.h"

#include <stdio.h>
#include <string.h>

/* Driver functions a fault can hit, and about how often an epoch of 12 s calls them on this
 * machine (simdev's runtime copies with cuMemcpy; the shim sleeps and wakes with the async
 * copies and drains with cuCtxSynchronize): the call number is drawn below 60% of that (less
 * under a sanitizer, CTL_SLOW), so most faults are hit, some in the sleep/wake path and some
 * in the program's own work. */
static const struct {
	const char *name;
	unsigned calls;
} fault_points[] = {
	{ "cuMemCreate", 150 },       { "cuMemMap", 150 },          { "cuMemUnmap", 80 },
	{ "cuMemRelease", 140 },      { "cuMemSetAccess", 80 },     { "cuMemcpyDtoHAsync", 130 },
	{ "cuMemcpyHtoDAsync", 120 }, { "cuCtxSynchronize", 10 },   { "cuStreamSynchronize", 220 },
	{ "cuMemcpy", 600 },          { "cuMemcpyAsync", 150 },     { "cuMemsetD8Async", 150 },
	{ "cuLaunchHostFunc", 150 },  { "cuMemHostRegister", 40 },
};
#define NPOINTS (sizeof(fault_points) / sizeof(fault_points[0]))

void soak_faults_draw(unsigned (*rnd)(unsigned below), int k, double secs, double slow,
		      char *out, size_t cap)
{
	unsigned used = 0;

	out[0] = '\0';
	for (int i = 0; i < k && i < (int)NPOINTS; i++) {
		size_t at = strlen(out);
		unsigned j = rnd(NPOINTS);

		while (used & (1u << j)) /* one entry per function */
			j = (j + 1) % NPOINTS;
		used |= 1u << j;
		snprintf(out + at, cap - at, "%s%s:%u", at ? "," : "", fault_points[j].name,
			 1 + rnd((unsigned)(fault_points[j].calls * 0.6 * secs / 12 / slow)));
	}
}
