/* Times the driver's own checkpoint of another process (the cuda-checkpoint utility's calls):
 * lock, checkpoint (device memory to host, released), restore, unlock. The anchor for
 * vmmctl sleep/wake. Usage: ckpt PID   prints "CKPT lock_ms checkpoint_ms restore_ms unlock_ms"
 * or "CKPT unsupported <step> <error>". */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int check(CUresult r, const char *step)
{
	const char *s = "?";
	if (r == CUDA_SUCCESS)
		return 0;
	cuGetErrorString(r, &s);
	printf("CKPT unsupported %s %s\n", step, s);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: ckpt PID\n");
		return 2;
	}
	int pid = atoi(argv[1]);
	CUcheckpointLockArgs lock;
	CUcheckpointCheckpointArgs cp;
	CUcheckpointRestoreArgs rs;
	CUcheckpointUnlockArgs un;
	memset(&lock, 0, sizeof(lock));
	memset(&cp, 0, sizeof(cp));
	memset(&rs, 0, sizeof(rs));
	memset(&un, 0, sizeof(un));
	lock.timeoutMs = 20000;
	if (check(cuInit(0), "init"))
		return 1;
	double t0 = now_ms();
	if (check(cuCheckpointProcessLock(pid, &lock), "lock"))
		return 1;
	double t1 = now_ms();
	if (check(cuCheckpointProcessCheckpoint(pid, &cp), "checkpoint")) {
		cuCheckpointProcessUnlock(pid, &un);
		return 1;
	}
	double t2 = now_ms();
	if (check(cuCheckpointProcessRestore(pid, &rs), "restore"))
		return 1;
	double t3 = now_ms();
	if (check(cuCheckpointProcessUnlock(pid, &un), "unlock"))
		return 1;
	double t4 = now_ms();
	printf("CKPT %.1f %.1f %.1f %.1f\n", t1 - t0, t2 - t1, t3 - t2, t4 - t3);
	return 0;
}
