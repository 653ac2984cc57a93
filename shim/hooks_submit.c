/* Every entry point that submits device work (launches, graph launches, host functions, copies,
 * memsets, stream memory operations, in all their _ptsz/_ptds forms) passes the submission gate,
 * so that nothing reaches the device while sleep changes its memory. The wrappers are generated
 * from driver_list.h: note the stream, enter the gate, call the driver, leave. */
#include "hooks_common.h"
#include "one_stream.h"

/* Each wrapper also tells one-stream reuse (one_stream.h) where its work goes, before the gate:
 * ending that mode synchronizes the device, and the gate should not be held meanwhile. */
#define GATED_BODY(name, args, has_stream, stream)                         \
	{                                                                  \
		static _Atomic signed char form = -1;                      \
		bool side = one_stream_submit(#name, &form, has_stream, stream); \
		CUresult r;                                                \
		gate_enter();                                              \
		r = CALL_REAL(name, args);                                 \
		gate_leave();                                              \
		if (side)                                                  \
			one_stream_side_done();                            \
		return r;                                                  \
	}
#define DRIVER_GATED(name, params, args) \
	CUresult CUDAAPI name params GATED_BODY(name, args, false, NULL)
#define DRIVER_GATED_STREAM(name, params, args, stream) \
	CUresult CUDAAPI name params GATED_BODY(name, args, true, (stream))
#include "driver_list.h"
#undef DRIVER_GATED_STREAM
#undef DRIVER_GATED
