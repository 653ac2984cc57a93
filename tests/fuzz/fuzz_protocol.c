/* A fuzz target for the control protocol's parsers (shim/protocol/protocol.c): the request parser
 * the server runs on every connection, and the record parser vmmctl runs on every reply line.
 * Besides "never crash, never read out of bounds", it checks two properties, aborting on failure:
 *   - a request that parses, formatted again and re-parsed, is the same request;
 *   - a record that parses, written again with the response writer and re-parsed, has the same
 *     kind, keys, types and values (the %-escaping round-trips).
 * Built as a libFuzzer target with clang (-Dfuzz=true), and linked into fuzz_driver.c otherwise. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_protocol: property violated: %s\n", what);
		abort();
	}
}

static void request_round_trip(const char *buf, size_t size)
{
	proto_request a, b;
	char why[160], line[PROTO_MAX_REQUEST + 1];
	size_t n;

	if (proto_parse_request(buf, size, &a, why, sizeof(why))) {
		check(why[0] != '\0', "a refused request has a reason");
		return;
	}
	n = proto_format_request(&a, line, sizeof(line));
	check(n > 0, "a parsed request can be formatted");
	check(!proto_parse_request(line, n, &b, why, sizeof(why)), "a formatted request parses");
	check(a.verb == b.verb && a.device == b.device && !strcmp(a.tag, b.tag) &&
	      a.discard == b.discard && a.autowake == b.autowake && a.timeout_ms == b.timeout_ms,
	      "request round trip");
}

static void record_round_trip(const char *line, size_t n)
{
	static proto_record a, b;
	proto_writer w;
	char why[160];

	proto_parse_header(line, n);
	if (proto_parse_record(line, n, &a, why, sizeof(why)))
		return;
	proto_writer_init(&w);
	proto_record_begin(&w, a.kind);
	for (int i = 0; i < a.nfields; i++) {
		const proto_field *f = &a.fields[i];

		if (f->type == PROTO_T_STRING)
			proto_put_str(&w, f->key, f->value);
		else if (f->type == PROTO_T_BOOL)
			proto_put_bool(&w, f->key, f->value[0] == 't');
	}
	proto_record_end(&w);
	if (!w.failed) {
		check(w.len > 0 && w.buf[w.len - 1] == '\n', "a record ends with a newline");
		check(!proto_parse_record(w.buf, w.len - 1, &b, why, sizeof(why)),
		      "a written record parses");
		check(!strcmp(a.kind, b.kind), "record kind round trip");
		for (int i = 0, j = 0; i < a.nfields; i++) {
			if (a.fields[i].type == PROTO_T_NUMBER)
				continue; /* numbers are re-printed by value, not by text */
			check(j < b.nfields && !strcmp(a.fields[i].key, b.fields[j].key) &&
			      a.fields[i].type == b.fields[j].type &&
			      !strcmp(a.fields[i].value, b.fields[j].value),
			      "record field round trip");
			j++;
		}
	}
	proto_writer_free(&w);
	/* The getters never fail on what the parser accepted. */
	for (int i = 0; i < a.nfields; i++) {
		uint64_t u;
		double d;
		bool bo;

		proto_record_u64(&a, a.fields[i].key, &u);
		proto_record_double(&a, a.fields[i].key, &d);
		proto_record_bool(&a, a.fields[i].key, &bo);
		proto_record_str(&a, a.fields[i].key);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A private copy with nothing after it, so that an overread is caught by ASan. */
	char *buf = malloc(size ? size : 1);
	size_t start = 0;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	request_round_trip(buf, size);
	for (size_t i = 0; i <= size; i++) {
		if (i == size || buf[i] == '\n') {
			record_round_trip(buf + start, i - start);
			start = i + 1;
		}
	}
	free(buf);
	return 0;
}
