// Can the heap synchronize the device from a thread of its own while the program keeps working?
// (a) What a context synchronization on another thread waits for while the program keeps
//     submitting: the work queued before the call only, or until the device is idle; and
//     whether the program's launches stall meanwhile.
// (b) What it does to a stream capture in progress on the program's thread: in the calling
//     thread's default (global) capture mode and in relaxed mode.
// Build: nvcc -O2 -arch=sm_90 tests/gpu/probe_bgsync.cu -o /tmp/probe_bgsync -lcuda -lpthread
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

__global__ void spin(long long cycles)
{
	long long t0 = clock64();
	while (clock64() - t0 < cycles) {
	}
}

static long long cycles_per_ms;
static CUcontext ctx;

// (a) ----------------------------------------------------------------------------------------
struct syncer {
	CUstreamCaptureMode mode;
	double start, end;
	CUresult rc;
	volatile int go;
};

static void *sync_thread(void *arg)
{
	struct syncer *s = (struct syncer *)arg;
	CUstreamCaptureMode m = s->mode;

	cuCtxSetCurrent(ctx);
	cuThreadExchangeStreamCaptureMode(&m);
	while (!s->go)
		usleep(50);
	s->start = now_ms();
	s->rc = cuCtxSynchronize();
	s->end = now_ms();
	return NULL;
}

static void scope(void)
{
	cudaStream_t longs, busy;
	struct syncer s = { CU_STREAM_CAPTURE_MODE_RELAXED, 0, 0, CUDA_SUCCESS, 0 };
	pthread_t th;
	double t0, worst_gap = 0, last, stop;
	int launches = 0;

	cudaStreamCreateWithFlags(&longs, cudaStreamNonBlocking);
	cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking);
	pthread_create(&th, NULL, sync_thread, &s);
	t0 = now_ms();
	spin<<<1, 1, 0, longs>>>(200 * cycles_per_ms); // the work queued before the synchronization
	last = now_ms();
	stop = t0 + 1000;
	// The program keeps the device busy for 1 s: a 1 ms kernel every 0.9 ms on another stream.
	while (now_ms() < stop) {
		double n;

		spin<<<1, 1, 0, busy>>>(cycles_per_ms);
		launches++;
		n = now_ms();
		if (n - last > worst_gap)
			worst_gap = n - last;
		last = n;
		if (launches == 10)
			s.go = 1;
		usleep(900);
	}
	pthread_join(th, NULL);
	cudaDeviceSynchronize();
	printf("(a) sync on another thread, called at %.1f ms: returned after %.1f ms (rc %d); the "
	       "200 ms kernel queued before it; the program submitted until %.0f ms, %d launches, "
	       "longest gap between its launches %.2f ms; device idle at %.1f ms\n",
	       s.start - t0, s.end - s.start, (int)s.rc, stop - t0, launches, worst_gap,
	       now_ms() - t0);
	cudaStreamDestroy(longs);
	cudaStreamDestroy(busy);
}

// (b) ----------------------------------------------------------------------------------------
static void capture(cudaStreamCaptureMode prog_mode, CUstreamCaptureMode sync_mode,
		    const char *label)
{
	cudaStream_t cs;
	cudaGraph_t g = NULL;
	cudaGraphExec_t ge = NULL;
	struct syncer s = { sync_mode, 0, 0, CUDA_SUCCESS, 0 };
	pthread_t th;
	cudaError_t end_rc, inst_rc = cudaErrorUnknown, run_rc = cudaErrorUnknown;

	cudaGetLastError();
	cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
	spin<<<1, 1, 0, cs>>>(20 * cycles_per_ms); // real work queued before the capture
	pthread_create(&th, NULL, sync_thread, &s);
	cudaStreamBeginCapture(cs, prog_mode);
	spin<<<1, 1, 0, cs>>>(cycles_per_ms);
	s.go = 1;
	pthread_join(th, NULL);
	spin<<<1, 1, 0, cs>>>(cycles_per_ms);
	end_rc = cudaStreamEndCapture(cs, &g);
	if (end_rc == cudaSuccess && g) {
		inst_rc = cudaGraphInstantiate(&ge, g, 0);
		if (inst_rc == cudaSuccess) {
			cudaGraphLaunch(ge, cs);
			run_rc = cudaStreamSynchronize(cs);
			cudaGraphExecDestroy(ge);
		}
		cudaGraphDestroy(g);
	}
	printf("(b) %s: sync on another thread rc %d after %.1f ms; the program's capture: end %s, "
	       "instantiate %s, graph run %s\n",
	       label, (int)s.rc, s.end - s.start, cudaGetErrorName(end_rc),
	       cudaGetErrorName(inst_rc), cudaGetErrorName(run_rc));
	cudaGetLastError();
	cudaDeviceSynchronize();
	cudaGetLastError();
	cudaStreamDestroy(cs);
}

int main(void)
{
	int khz = 0;
	double t0;

	cudaSetDevice(0);
	cudaFree(0);
	cuCtxGetCurrent(&ctx);
	cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
	cycles_per_ms = (long long)khz;
	t0 = now_ms();
	spin<<<1, 1>>>(100 * cycles_per_ms);
	cudaDeviceSynchronize();
	t0 = now_ms() - t0;
	printf("clock %d kHz; a 100 ms spin took %.1f ms\n", khz, t0);
	// The clock the device reports may not be the one it runs at.
	if (t0 > 1)
		cycles_per_ms = (long long)(cycles_per_ms * 100.0 / t0);
	scope();
	scope();
	capture(cudaStreamCaptureModeGlobal, CU_STREAM_CAPTURE_MODE_RELAXED,
		"program global capture, syncer relaxed");
	capture(cudaStreamCaptureModeGlobal, CU_STREAM_CAPTURE_MODE_GLOBAL,
		"program global capture, syncer global");
	capture(cudaStreamCaptureModeThreadLocal, CU_STREAM_CAPTURE_MODE_RELAXED,
		"program thread-local capture, syncer relaxed");
	capture(cudaStreamCaptureModeRelaxed, CU_STREAM_CAPTURE_MODE_RELAXED,
		"program relaxed capture, syncer relaxed");
	return 0;
}
