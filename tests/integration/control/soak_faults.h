/* Driver faults for the soaks (soak.c, share_soak.c): SIMDEV_FAIL entries drawn at random. */
#ifndef VMMSHIM_SOAK_FAULTS_H
#define VMMSHIM_SOAK_FAULTS_H

#include <stddef.h>

/* k entries "name:N,..." into out (one per function), each N drawn by rnd below what an epoch
 * of secs seconds calls that function (slowed by slow, CTL_SLOW). */
void soak_faults_draw(unsigned (*rnd)(unsigned below), int k, double secs, double slow,
		      char *out, size_t cap);

#endif
