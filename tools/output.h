/* vmmctl's output: tables for people, JSON for programs. */
#ifndef VMMCTL_OUTPUT_H
#define VMMCTL_OUTPUT_H

#include <stdio.h>

#include "client.h"

/* s with every byte outside printable ASCII (and '\\') written as \\xHH: safe to print.
 * Returns one of a few static buffers used in turn. */
const char *out_safe(const char *s);

/* "1.50 GiB" */
const char *out_bytes(unsigned long long v, char *buf, size_t cap);

/* One record as a JSON object: {"key": value, ...} */
void out_json_record(FILE *f, const proto_record *r);
/* A reply as {"status": WORD, "info": {...}, "devices": [...], "tags": [...], ...}. */
void out_json_reply(FILE *f, const client_reply *r);
void out_json_error(FILE *f, const client_error *e);
void out_json_string(FILE *f, const char *s);

void out_status(FILE *f, const client_reply *r);
/* what: "pid 42", "pid 42 tag kv", "pid 42 device 1"... */
void out_transfer(FILE *f, const char *verb, const char *what, const client_reply *r);
void out_list_header(FILE *f);
void out_list_row(FILE *f, const proto_record *info);
/* A cancel reply (f NULL: not shown); returns vmmctl's exit code for it (docs/vmmctl.md). */
int out_cancel(FILE *f, const char *what, const client_reply *r);

#endif
