/* Survives fork: the parent allocates, forks a child that never touches CUDA and one that does
 * (it must fail cleanly or work, never crash or hang), then keeps using its memory. */
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_common.h"

int main(void)
{
	unsigned char buf[4096];
	void *d, *c = NULL;
	int status;
	pid_t pid;

	CHECK_CU(cudaMalloc(&d, 1 << 20));
	pattern_fill(buf, sizeof(buf), 3);
	CHECK_CU(cudaMemcpy(d, buf, sizeof(buf), cudaMemcpyHostToDevice));
	for (int with_cuda = 0; with_cuda < 2; with_cuda++) {
		fflush(stdout);
		pid = fork();
		if (pid < 0)
			FAIL("fork");
		if (pid == 0) {
			if (with_cuda) {
				cudaError_t e = cudaMalloc(&c, 4096);

				if (e == cudaSuccess)
					e = cudaFree(c);
				printf("child with cuda: %s\n", e ? "clean error" : "ok");
			} else {
				printf("child without cuda: ok\n");
			}
			exit(0);
		}
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
			FAIL("child %d ended badly (status 0x%x)", with_cuda, status);
	}
	memset(buf, 0, sizeof(buf));
	CHECK_CU(cudaMemcpy(buf, d, sizeof(buf), cudaMemcpyDeviceToHost));
	if (pattern_check(buf, sizeof(buf), 3))
		FAIL("parent's memory changed");
	CHECK_CU(cudaFree(d));
	printf("prog_fork: ok\n");
	return 0;
}
