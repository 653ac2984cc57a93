/* The control protocol between vmmctl and the control server inside a shimmed process. This header
 * is the one definition both sides compile; docs/vmmctl.md describes it for users.
 *
 * Transport: a Unix stream socket per process, $VMMSHIM_RUN_DIR/<pid>.sock (see run_dir.h). One
 * request per connection, but for share_open keep=true: the server then keeps the connection for
 * the next request (the reply ends at its "end" line), as long as it can.
 *
 * Request: one line of at most PROTO_MAX_REQUEST bytes, newline included:
 *
 *     vmmshim/1 VERB [key=value ...]\n
 *
 *   VERB     hello | status | sleep | wake | cancel | share_open | app_open | trim (give the
 *            device's cached free memory back to the driver: GPU sharing asks this of its
 *            peers)
 *   keys     tag="T" (every tag when absent), device=N (every device when absent or -1),
 *            discard=true|false, autowake=true|false (sleep only), timeout_ms=N (sleep and
 *            wake: the longest the whole operation may take, waiting for another one, the gate
 *            and the drain included, after which it rolls back; cancel: how long to wait for
 *            the cancelled operation to end; trim: how long to wait for the device before the
 *            memory in quarantine is given back too; 0 or absent: the server's default),
 *            drain_ms=N (sleep: the longest wait for the device to finish its work, below
 *            VMMSHIM_SLEEP_TIMEOUT; a group sleep asks for short drains and retries, so that
 *            a collective half-launched across the group never holds it; 0 or absent: the
 *            server's setting).
 *            share_open (another shimmed process of the same uid opening a legacy IPC handle,
 *            never vmmctl): export=N base=N, both required; the reply's first bytes carry the
 *            pieces' file descriptors (SCM_RIGHTS, fd_pass.h) and a `piece` record each;
 *            keep=true: keep the connection for the next request (peer_kept.h).
 *            reason="..." (sleep only: a sharing peer's sleep, why; shown by status).
 *            share_group="PID,PID,..." (sleep only, from a group sleep: these processes are or
 *            will be asleep with the memory they imported from each other released; release
 *            legacy-IPC memory imported from them, and exported memory all of whose importers
 *            are among them: docs/vmmctl.md, "How a group sleeps").
 *            app_release="H,H:PID:XH,..." (sleep only, from a group sleep: the program's own
 *            shared VMM handles, by their values in this process, that the sleep releases too;
 *            H alone: exported here; H:PID:XH: imported from pid PID, whose value is XH;
 *            H:PID:XH:START: the same, START being PID's start time (proc_start.h), so that
 *            the wake does not ask a later process that reused the pid). A list longer than
 *            one value continues in app_release2 ... app_release8 (PROTO_APP_RELEASE_KEYS).
 *            app_defer=true|false (wake only, from a group wake: leave the imports a group
 *            sleep released asleep and device work held; a second wake brings them back).
 *            app_open (another shimmed process of the same uid asking again, at its wake, for
 *            memory it imported from an export of ours, never vmmctl): handle="XH" required;
 *            the reply's first bytes carry one descriptor, with an `app_open` record.
 *   A key may appear once; unknown verbs, keys or versions, bad values and over-long requests are
 *   refused with an error response and change nothing. The server reads a request for at most
 *   PROTO_READ_DEADLINE_MS; a client that is slower is disconnected. A sleep or wake whose
 *   client has closed its connection is not started, and one that is running when it does
 *   rolls back: the open connection is the order.
 *
 * Response: lines of at most PROTO_MAX_LINE bytes. The first is "vmmshim/1 WORD" where WORD is
 * ok, already (nothing to do, nothing changed) or error; then records; then "end".
 * A record is "KIND key=value ...". Values are typed on the wire: integers and decimals are bare
 * (42, 1.5, -1), booleans are true/false, strings are in double quotes with every byte outside
 * '!'..'~' and every '"', '%' and '=' written as %XX. Records, by kind:
 *
 *   info     pid, command, version, protocol, devices (e.g. "0,1"), managed (bytes the shim
 *            manages, resident or asleep), resident, asleep, state (awake | asleep | partial |
 *            changing), held (whether device work is held until wake), autowake,
 *            passthrough_allocs, passthrough_bytes. While a sleep or wake runs (state
 *            changing) the memory figures (devices, managed, resident, asleep) and the device
 *            and tag records are left out, being changed, and `operation` (sleep | wake |
 *            unknown: one the program started itself) and `operation_ms` (how long it has run)
 *            say what is going on.
 *   device   backend, dev, live, count, mapped, cached, reserved, asleep, host_backup, peak_live,
 *            handles_created, handles_released, release_pending, app_handles, app_bytes, app_mapped, app_asleep,
 *            app_host_backup, app_unreleasable, app_shared (the part of app_unreleasable that
 *            other processes share: exported or imported), ipc_shared, ipc_retired,
 *            ipc_imported (CUDA), and when the driver answers: free, total, used,
 *            unmanaged
 *   tag      backend, dev, name, live, count, mapped, cached, asleep, host_backup
 *   ipc_export  dev, id, base, size, span_size, opened_by ("pid,pid": who opened it, some may
 *            have closed it since); ipc_import  dev, exporter, id, base, span_size, opens;
 *            ipc  exports, imports (the totals; at most 64 of each kind are listed), kept_fds
 *            (descriptors of exports made ahead at the get and kept until the memory goes).
 *            Legacy CUDA IPC through the shim, in status replies.
 *   app_share  dev, handle (the program's value), size, role (export | import), fds (the
 *            shim's duplicates of the shareable descriptors, "12,13": numbers in the answering
 *            process, for kcmp), program_fds (descriptors the program itself holds open on
 *            them; -1: could not be told), program_fd (the first, or -1), kcmp_errno,
 *            released (asleep, released by a group sleep: fds is then empty);
 *            app_shares  count (at most 128 app_share records are listed). The program's own
 *            VMM handles exported or imported as POSIX descriptors, in status replies.
 *   result   released, imported (memory exported by another process that a group sleep let go
 *            here, or a wake mapped again: its exporter's, so not in released), copied,
 *            seconds, gbps, already
 *   cancel   operation (sleep | wake | unknown | none), outcome (rolled_back: it stopped and
 *            undid its work | finished: it had done its work before it saw the cancel |
 *            ended: it ended, how is not known (one the program started itself) | running:
 *            not ended within timeout_ms | none: nothing was in progress, with the word
 *            "already"), seconds
 *   share    device, base, size, span, span_size, pieces, export_ms, exported (share_open;
 *            export_ms: the exporter's time to look the export up and give its pieces'
 *            descriptors; exported: true when the driver exported them now, false when they
 *            are duplicates of descriptors kept since the get)
 *   piece    offset, size, handle_offset (share_open; the n-th record goes with the n-th fd)
 *   app_open  handle, size (app_open: the descriptor that came with the reply)
 *   error    status (one of the PROTO_ERR_* words), message
 *
 * A reply has at most PROTO_MAX_RESPONSE bytes and PROTO_MAX_RECORDS records; vmmctl refuses a
 * larger one.
 *
 * Versioning: a server answers only the versions it knows ("vmmshim/1" here); new keys and record
 * fields may be added within a version, so readers ignore fields they do not know. */
#ifndef VMMSHIM_PROTOCOL_H
#define VMMSHIM_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROTO_VERSION 1
#define PROTO_MAGIC "vmmshim/1"
#define PROTO_MAX_REQUEST 4096
#define PROTO_MAX_LINE 4096
#define PROTO_MAX_RESPONSE (1u << 20)
#define PROTO_MAX_RECORDS 8192
#define PROTO_READ_DEADLINE_MS 2000
#define PROTO_WRITE_DEADLINE_MS 2000
#define PROTO_TAG_MAX 32            /* bytes with the NUL: as VMM_TAG_MAX */
#define PROTO_KEY_MAX 24
#define PROTO_VALUE_MAX 512
#define PROTO_MAX_FIELDS 48          /* a device record has 33 (shim/control/dispatch.c checks) */
#define PROTO_MAX_DEVICE 15         /* VMM_MAX_DEVICES - 1 */

/* Error words carried by "error status=...". */
#define PROTO_ERR_MALFORMED "malformed"      /* the request could not be parsed */
#define PROTO_ERR_PERMISSION "permission"    /* the client's uid may not drive this process */
#define PROTO_ERR_INVALID "invalid"
#define PROTO_ERR_OOM "oom"
#define PROTO_ERR_HOST_OOM "host_oom"
#define PROTO_ERR_DRIVER "driver"
#define PROTO_ERR_BUSY "busy"                /* exiting, too many clients, a wait timed out */
#define PROTO_ERR_CANCELLED "cancelled"      /* vmmctl cancel (or a wake) stopped it; rolled back */
#define PROTO_ERR_UNSUPPORTED "unsupported"
#define PROTO_ERR_NOT_READY "not_ready"      /* sleep or wake before any device memory is managed */
#define PROTO_ERR_INTERNAL "internal"

typedef enum proto_verb {
	PROTO_HELLO,
	PROTO_STATUS,
	PROTO_SLEEP,
	PROTO_WAKE,
	PROTO_CANCEL,
	PROTO_SHARE_OPEN,
	PROTO_TRIM,
	PROTO_APP_OPEN,
} proto_verb;

#define PROTO_REASON_MAX 128       /* bytes with the NUL */
#define PROTO_SHARE_GROUP_MAX 768  /* bytes with the NUL: 64 pids and their commas */
/* app_release: one value is at most PROTO_VALUE_MAX - 1 bytes (about 10 imports), so a longer
 * list goes in several keys, app_release, app_release2 ... app_release8, each a part of the list
 * cut at a comma; the request line bounds the whole (about 58 imports with start times). */
#define PROTO_APP_RELEASE_KEYS 8
#define PROTO_APP_RELEASE_MAX 2816 /* bytes with the NUL, all keys together */

typedef struct proto_request {
	proto_verb verb;
	char tag[PROTO_TAG_MAX];  /* "" = every tag */
	int device;               /* -1 = every device */
	bool discard;
	bool autowake;
	int timeout_ms;           /* 0 = the server's default */
	uint64_t share_id;        /* share_open: the export's id and base (both > 0) */
	uint64_t share_base;
	bool keep;                /* share_open: keep the connection open for the next request */
	int drain_ms;             /* sleep: 0 = the server's VMMSHIM_SLEEP_TIMEOUT */
	char reason[PROTO_REASON_MAX]; /* sleep: "" = not a sharing peer's */
	char share_group[PROTO_SHARE_GROUP_MAX]; /* sleep: "" = not a group's; else "PID,PID" */
	char app_release[PROTO_APP_RELEASE_MAX]; /* sleep: "" = none; "H,H:PID:XH[:START],..." */
	uint64_t app_handle;      /* app_open: the exporter's handle value (> 0) */
	bool app_defer;           /* wake: leave group-released imports asleep, work held */
} proto_request;

const char *proto_verb_name(proto_verb v);

/* Parse one request. Pure: reads only buf[0..len), needs no NUL, writes only *out and why.
 * Returns 0 and fills *out, or -1 with a reason in why (and *out unspecified). */
int proto_parse_request(const char *buf, size_t len, proto_request *out, char *why,
			size_t whylen);

/* Write req as a request line (newline included, NUL-terminated). Returns the length, or 0 when
 * cap is too small or req is invalid. */
size_t proto_format_request(const proto_request *req, char *buf, size_t cap);

/* Response records, parsed. */
typedef enum proto_type { PROTO_T_NUMBER, PROTO_T_BOOL, PROTO_T_STRING } proto_type;

typedef struct proto_field {
	char key[PROTO_KEY_MAX];
	char value[PROTO_VALUE_MAX]; /* decoded, NUL-terminated */
	proto_type type;
} proto_field;

typedef struct proto_record {
	char kind[PROTO_KEY_MAX];
	int nfields;
	proto_field fields[PROTO_MAX_FIELDS];
} proto_record;

/* Parse one response line (without its newline). Pure, like proto_parse_request. */
int proto_parse_record(const char *line, size_t len, proto_record *out, char *why, size_t whylen);
/* The response's first line: "vmmshim/1 ok|already|error". Returns the word or NULL. */
const char *proto_parse_header(const char *line, size_t len);

const proto_field *proto_record_field(const proto_record *r, const char *key);
const char *proto_record_str(const proto_record *r, const char *key); /* NULL when absent */
bool proto_record_u64(const proto_record *r, const char *key, uint64_t *out);
bool proto_record_double(const proto_record *r, const char *key, double *out);
bool proto_record_bool(const proto_record *r, const char *key, bool *out);

/* Building a response: a growing buffer of lines, capped at PROTO_MAX_RESPONSE bytes and
 * PROTO_MAX_RECORDS records (beyond that the writer records the overflow and drops the rest). */
typedef struct proto_writer {
	char *buf;
	size_t len, cap;
	bool failed;      /* out of memory or over the caps */
	bool in_record;
	int records;
} proto_writer;

void proto_writer_init(proto_writer *w);
void proto_writer_free(proto_writer *w);
/* A point in a reply to come back to: what is written after it is dropped by the rewind (a part
 * that could not be completed). */
typedef struct proto_mark {
	size_t len;
	bool failed, in_record;
	int records;
} proto_mark;
proto_mark proto_writer_mark(const proto_writer *w);
void proto_writer_rewind(proto_writer *w, proto_mark m);
void proto_header(proto_writer *w, const char *word);
void proto_record_begin(proto_writer *w, const char *kind);
void proto_put_u64(proto_writer *w, const char *key, uint64_t v);
void proto_put_int(proto_writer *w, const char *key, long long v);
void proto_put_double(proto_writer *w, const char *key, double v);
void proto_put_bool(proto_writer *w, const char *key, bool v);
void proto_put_str(proto_writer *w, const char *key, const char *s);
void proto_record_end(proto_writer *w);
void proto_end(proto_writer *w);
/* A whole error response: header, error record, end. */
void proto_error_response(proto_writer *w, const char *status, const char *message);

#endif
