/* The share_open reply's reader (ipc_open_reply.h). */
#include "ipc_open_reply.h"

#include <stdio.h>
#include <string.h>

#include "protocol/protocol.h"

bool ipc_open_reply_parse(char *text, struct open_reply *o)
{
	uint64_t k = 0;
	char *line = text, *nl, why[96];
	bool ok = false, head = true;

	memset(o, 0, sizeof(*o));
	o->export_ms = -1;
	o->exported = -1;
	for (; line && *line; line = nl ? nl + 1 : NULL) {
		proto_record rec;
		const char *word;

		nl = strchr(line, '\n');
		if (head) {
			word = proto_parse_header(line, nl ? (size_t)(nl - line) : strlen(line));
			ok = word && !strcmp(word, "ok");
			head = false;
			continue;
		}
		if (proto_parse_record(line, nl ? (size_t)(nl - line) : strlen(line), &rec, why,
				       sizeof(why)))
			return false;
		if (!strcmp(rec.kind, "error") && proto_record_str(&rec, "message"))
			snprintf(o->error, sizeof(o->error), "%s", proto_record_str(&rec, "message"));
		if (!strcmp(rec.kind, "share") && (!proto_record_u64(&rec, "base", &o->base) ||
		    !proto_record_u64(&rec, "span", &o->span) ||
		    !proto_record_u64(&rec, "span_size", &o->span_size) ||
		    !proto_record_u64(&rec, "pieces", &o->npieces) ||
		    o->npieces > IPC_IMPORT_MAX_PIECES))
			return false;
		/* Optional: exporters before it was added do not send it. */
		if (!strcmp(rec.kind, "share") && !proto_record_double(&rec, "export_ms", &o->export_ms))
			o->export_ms = -1;
		if (!strcmp(rec.kind, "share")) {
			bool b;

			o->exported = proto_record_bool(&rec, "exported", &b) ? b : -1;
		}
		if (!strcmp(rec.kind, "piece")) {
			if (k == IPC_IMPORT_MAX_PIECES || !proto_record_u64(&rec, "offset", &o->off[k]) ||
			    !proto_record_u64(&rec, "size", &o->size[k]) ||
			    !proto_record_u64(&rec, "handle_offset", &o->hoff[k]))
				return false;
			k++;
		}
	}
	return ok && o->npieces && k == o->npieces && o->base >= o->span &&
	       o->base < o->span + o->span_size;
}
