/* Driver calls that are not (yet) allocations: cuMemAlloc before cuInit and without a context.
 * The driver's own answers must come back, and nothing else must happen. */
#include <cuda.h>

#include "prog_common.h"

int main(void)
{
	CUdeviceptr p = 0;
	CUresult before_init, no_context;

	before_init = cuMemAlloc(&p, 4096);
	CHECK_CU(cuInit(0));
	no_context = cuMemAlloc(&p, 4096);
	printf("prog_noctx: before cuInit %d, without a context %d\n", (int)before_init,
	       (int)no_context);
	return 0;
}
