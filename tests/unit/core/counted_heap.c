/* The heap over simdev with simdev's submission count (counted_heap.h). */
#include "counted_heap.h"

#include <criterion/criterion.h>

#include "backend/backend.h"
#include "simdev.h"

static uint64_t simdev_count(vmm_backend *be)
{
	(void)be;
	return simdev_submissions();
}

CUstream t_open_counted(struct tctx *t, const vmm_config *cfg)
{
	CUcontext c;
	CUstream s;

	t_open(t, cfg);
	t->be->submitted = simdev_count;
	cr_assert_eq(cuDevicePrimaryCtxRetain(&c, 0), CUDA_SUCCESS);
	cr_assert_eq(cuCtxSetCurrent(c), CUDA_SUCCESS);
	cr_assert_eq(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	return s;
}

void t_launch_writer(CUstream s, struct writer *w)
{
	cr_assert_eq(cuLaunchKernel(SIMDEV_KERNEL(slow_write), 1, 1, 1, 1, 1, 1, 0, s,
				    writer_params(w), NULL),
		     CUDA_SUCCESS, "the writer's launch failed");
}
