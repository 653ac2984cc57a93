/* The reply to share_open, the request by which a process opens another's exported memory
 * (cuIpcOpenMemHandle in hooks_ipc.c, and again at a group wake in ipc_sleep.c): its header
 * word and records, read into what the importer maps. */
#ifndef VMMSHIM_IPC_OPEN_REPLY_H
#define VMMSHIM_IPC_OPEN_REPLY_H

#include <stdbool.h>
#include <stdint.h>

#include "ipc_registry.h"

/* What an exporter answered to share_open: the span and its pieces (records "share", "piece"). */
struct open_reply {
	uint64_t base, span, span_size, npieces;
	uint64_t off[IPC_IMPORT_MAX_PIECES], size[IPC_IMPORT_MAX_PIECES],
		hoff[IPC_IMPORT_MAX_PIECES];
	char error[200];
	double export_ms; /* the exporter's time to give the pieces' descriptors; -1: not said */
	int exported;     /* 1: exported by the driver for this open, 0: dups of kept ones, -1: not
	                   * said (an older exporter) */
};

/* Parse a share_open reply; false when it is not a usable ok. */
bool ipc_open_reply_parse(char *text, struct open_reply *o);

#endif
