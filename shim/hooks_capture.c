/* Stream captures, bracketed for the core (backend.h: vmm_capture_begin/end): a device
 * synchronization made while the program captures a stream breaks the capture, so the heap and
 * a sleep synchronize only between captures, and a capture begins once the synchronizations in
 * progress have ended. Not bracketed: the CUDA 10.0 ABI of cuStreamBeginCapture (no mode), which
 * no current runtime calls. */
#include "../core/backend/backend.h"
#include "hooks_common.h"
#include "lone_stream.h"

/* Counted before the driver's begin (so no synchronization starts in between), taken back when
 * the driver refuses it. Lone-stream ordering ends first: a capturing stream cannot wait for the
 * lone stream's event, and freed memory must not be reused in the order of work that runs only
 * when the graph is launched. */
static void capture_begins(void)
{
	lone_stream_end_and_wait("a stream capture");
	vmm_capture_begin();
}

static CUresult begun(CUresult r)
{
	if (r != CUDA_SUCCESS)
		vmm_capture_end();
	return r;
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
	capture_begins();
	return begun(CALL_REAL(cuStreamBeginCapture_v2, (hStream, mode)));
}

CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
	capture_begins();
	return begun(CALL_REAL(cuStreamBeginCapture_v2_ptsz, (hStream, mode)));
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
					     const CUgraphNode *dependencies,
					     const CUgraphEdgeData *dependencyData,
					     size_t numDependencies, CUstreamCaptureMode mode)
{
	capture_begins();
	return begun(CALL_REAL(cuStreamBeginCaptureToGraph, (hStream, hGraph, dependencies,
							     dependencyData, numDependencies,
							     mode)));
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
						  const CUgraphNode *dependencies,
						  const CUgraphEdgeData *dependencyData,
						  size_t numDependencies, CUstreamCaptureMode mode)
{
	capture_begins();
	return begun(CALL_REAL(cuStreamBeginCaptureToGraph_ptsz,
			       (hStream, hGraph, dependencies, dependencyData, numDependencies,
				mode)));
}

/* An end call ends the stream's capture whatever it returns (a broken capture ends with an
 * error), and one on a stream that is not capturing changes nothing: counted when the stream
 * was capturing before the call and is not after it. */
static CUresult ended(CUresult r, CUstream s, bool ptsz, bool was_capturing)
{
	if (was_capturing && !hook_stream_capturing(s, ptsz))
		vmm_capture_end();
	return r;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	bool was = hook_stream_capturing(hStream, false);

	return ended(CALL_REAL(cuStreamEndCapture, (hStream, phGraph)), hStream, false, was);
}

CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
	bool was = hook_stream_capturing(hStream, true);

	return ended(CALL_REAL(cuStreamEndCapture_ptsz, (hStream, phGraph)), hStream, true, was);
}
