/* For the core's tests that run kernels on simdev: the heap opened over simdev with simdev's
 * count of submitted device work as the backend's (as the shim gives it its own count), device
 * 0's primary context current on the calling thread, and a stream of it for the test's slow
 * writers (slow_writer.h). Linked only into the tests that link simdev's driver. */
#ifndef VMM_TEST_COUNTED_HEAP_H
#define VMM_TEST_COUNTED_HEAP_H

#include <cuda.h>

#include "helpers.h"
#include "slow_writer.h"

/* Open t (cfg may be NULL) as above; returns the stream. Fails the test on error. */
CUstream t_open_counted(struct tctx *t, const vmm_config *cfg);
/* Launch w on s. */
void t_launch_writer(CUstream s, struct writer *w);
/* A block of size on device 0 that w writes over w->ms (launched on s); its address. */
vmm_devptr t_written_block(struct tctx *t, CUstream s, struct writer *w, size_t size);
/* The same, freed while w writes it: quarantined until a sync after the free. */
vmm_devptr t_freed_while_written(struct tctx *t, CUstream s, struct writer *w, size_t size);

#endif
