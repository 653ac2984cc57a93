/* The control protocol: request and record parsing (pure functions, fuzzed by
 * tests/fuzz/fuzz_protocol.c) and the response writer. The wire format is described in
 * protocol.h. */
#include "protocol.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TIMEOUT_MS 3600000

static int why_fail(char *why, size_t whylen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int why_fail(char *why, size_t whylen, const char *fmt, ...)
{
	if (why && whylen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, whylen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

const char *proto_verb_name(proto_verb v)
{
	switch (v) {
	case PROTO_HELLO: return "hello";
	case PROTO_STATUS: return "status";
	case PROTO_SLEEP: return "sleep";
	case PROTO_WAKE: return "wake";
	case PROTO_CANCEL: return "cancel";
	case PROTO_SHARE_OPEN: return "share_open";
	case PROTO_TRIM: return "trim";
	case PROTO_APP_OPEN: return "app_open";
	}
	return "?";
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool is_bare_char(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       c == '.' || c == '-' || c == '+' || c == '_';
}

static bool is_key_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

/* Is s[0..n) a decimal number (optional sign, digits, optional fraction)? */
static bool is_number(const char *s, size_t n)
{
	size_t i = 0, digits = 0;

	if (i < n && (s[i] == '-' || s[i] == '+'))
		i++;
	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
		digits++;
	if (i < n && s[i] == '.') {
		i++;
		for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
			digits++;
	}
	return digits > 0 && i == n;
}

/* Parse one "key=value" token s[0..n) into f. */
static int parse_field(const char *s, size_t n, proto_field *f, char *why, size_t whylen)
{
	size_t k = 0;

	while (k < n && s[k] != '=')
		k++;
	if (k == n)
		return why_fail(why, whylen, "field without '='");
	if (k == 0 || k >= sizeof(f->key))
		return why_fail(why, whylen, "field name empty or longer than %zu bytes",
				sizeof(f->key) - 1);
	for (size_t i = 0; i < k; i++)
		if (!is_key_char(s[i]))
			return why_fail(why, whylen, "bad character in a field name");
	memcpy(f->key, s, k);
	f->key[k] = '\0';

	const char *v = s + k + 1;
	size_t vn = n - k - 1, out = 0;

	if (vn == 0)
		return why_fail(why, whylen, "field '%s' has no value", f->key);
	if (v[0] == '"') {
		if (vn < 2 || v[vn - 1] != '"')
			return why_fail(why, whylen, "field '%s': unterminated string", f->key);
		for (size_t i = 1; i < vn - 1; i++) {
			char c = v[i];

			if (c == '"' || (unsigned char)c < 0x21 || (unsigned char)c > 0x7e)
				return why_fail(why, whylen, "field '%s': bad byte in string",
						f->key);
			if (c == '%') {
				int hi, lo;

				if (i + 2 >= vn - 1)
					return why_fail(why, whylen, "field '%s': cut %%XX escape",
							f->key);
				hi = hex_digit(v[i + 1]);
				lo = hex_digit(v[i + 2]);
				if (hi < 0 || lo < 0)
					return why_fail(why, whylen, "field '%s': bad %%XX escape",
							f->key);
				c = (char)(hi << 4 | lo);
				if (c == '\0')
					return why_fail(why, whylen, "field '%s': NUL in string",
							f->key);
				i += 2;
			}
			if (out + 1 >= sizeof(f->value))
				return why_fail(why, whylen, "field '%s': string too long", f->key);
			f->value[out++] = c;
		}
		f->value[out] = '\0';
		f->type = PROTO_T_STRING;
		return 0;
	}
	if (vn >= sizeof(f->value))
		return why_fail(why, whylen, "field '%s': value too long", f->key);
	for (size_t i = 0; i < vn; i++)
		if (!is_bare_char(v[i]))
			return why_fail(why, whylen, "field '%s': bad character in value", f->key);
	memcpy(f->value, v, vn);
	f->value[vn] = '\0';
	if ((vn == 4 && !memcmp(v, "true", 4)) || (vn == 5 && !memcmp(v, "false", 5)))
		f->type = PROTO_T_BOOL;
	else if (is_number(v, vn))
		f->type = PROTO_T_NUMBER;
	else
		return why_fail(why, whylen, "field '%s': value is not a number, boolean or string",
				f->key);
	return 0;
}

/* Split s[0..n) at single spaces: the token at *pos starts at *start; returns its length (0 at
 * the end) or -1 for an empty token (two spaces, or a leading/trailing space). */
static long next_token(const char *s, size_t n, size_t *pos, size_t *start)
{
	size_t i = *pos;

	*start = i;
	if (i >= n)
		return 0;
	while (i < n && s[i] != ' ')
		i++;
	if (i == *start)
		return -1;
	if (i < n && i + 1 == n)
		return -1; /* trailing space */
	*pos = i < n ? i + 1 : n;
	return (long)(i - *start);
}

/* Parse a whole record line: KIND then fields. */
int proto_parse_record(const char *line, size_t len, proto_record *out, char *why, size_t whylen)
{
	size_t pos = 0, start;
	long t;

	if (!line || !out)
		return why_fail(why, whylen, "no input");
	if (len >= PROTO_MAX_LINE)
		return why_fail(why, whylen, "line longer than %d bytes", PROTO_MAX_LINE - 1);
	out->nfields = 0;
	t = next_token(line, len, &pos, &start);
	if (t <= 0)
		return why_fail(why, whylen, "empty record");
	if ((size_t)t >= sizeof(out->kind))
		return why_fail(why, whylen, "record kind too long");
	for (long i = 0; i < t; i++)
		if (!is_key_char(line[i]))
			return why_fail(why, whylen, "bad character in record kind");
	memcpy(out->kind, line, (size_t)t);
	out->kind[t] = '\0';
	while ((t = next_token(line, len, &pos, &start)) != 0) {
		proto_field *f;

		if (t < 0)
			return why_fail(why, whylen, "stray space");
		if (out->nfields == PROTO_MAX_FIELDS)
			return why_fail(why, whylen, "more than %d fields", PROTO_MAX_FIELDS);
		f = &out->fields[out->nfields];
		if (parse_field(line + start, (size_t)t, f, why, whylen))
			return -1;
		for (int i = 0; i < out->nfields; i++)
			if (!strcmp(out->fields[i].key, f->key))
				return why_fail(why, whylen, "field '%s' given twice", f->key);
		out->nfields++;
	}
	return 0;
}

const char *proto_parse_header(const char *line, size_t len)
{
	static const char *const words[] = { "ok", "already", "error" };
	size_t m = strlen(PROTO_MAGIC);

	if (!line || len <= m + 1 || memcmp(line, PROTO_MAGIC, m) || line[m] != ' ')
		return NULL;
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (len - m - 1 == strlen(words[i]) && !memcmp(line + m + 1, words[i], len - m - 1))
			return words[i];
	return NULL;
}

const proto_field *proto_record_field(const proto_record *r, const char *key)
{
	for (int i = 0; r && i < r->nfields; i++)
		if (!strcmp(r->fields[i].key, key))
			return &r->fields[i];
	return NULL;
}

const char *proto_record_str(const proto_record *r, const char *key)
{
	const proto_field *f = proto_record_field(r, key);

	return f && f->type == PROTO_T_STRING ? f->value : NULL;
}

static bool parse_integer(const char *s, long long lo, long long hi, long long *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (end == s || *end || errno || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

bool proto_record_u64(const proto_record *r, const char *key, uint64_t *out)
{
	const proto_field *f = proto_record_field(r, key);
	char *end;

	if (!f || f->type != PROTO_T_NUMBER || f->value[0] == '-')
		return false;
	errno = 0;
	unsigned long long v = strtoull(f->value, &end, 10);
	if (end == f->value || *end || errno)
		return false;
	*out = v;
	return true;
}

bool proto_record_double(const proto_record *r, const char *key, double *out)
{
	const proto_field *f = proto_record_field(r, key);
	char *end;

	if (!f || f->type != PROTO_T_NUMBER)
		return false;
	*out = strtod(f->value, &end);
	return end != f->value && !*end;
}

bool proto_record_bool(const proto_record *r, const char *key, bool *out)
{
	const proto_field *f = proto_record_field(r, key);

	if (!f || f->type != PROTO_T_BOOL)
		return false;
	*out = f->value[0] == 't';
	return true;
}

static bool valid_tag(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= PROTO_TAG_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

static bool printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return false;
	return true;
}

/* "PID,PID,...": 1 to 64 positive decimal numbers. */
static bool valid_pid_list(const char *s)
{
	int n = 0;

	if (strlen(s) >= PROTO_SHARE_GROUP_MAX)
		return false;
	for (;;) {
		size_t k = strspn(s, "0123456789");

		if (!k || k > 10 || s[0] == '0' || ++n > 64)
			return false;
		s += k;
		if (!*s)
			return true;
		if (*s++ != ',')
			return false;
	}
}

/* A whole decimal uint64 (quoted on the wire: handle values pass LLONG_MAX). */
static bool parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 20)
		return false;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return !errno && !*end;
}

/* "H,H:PID:XH,...": digits, each entry one value or three joined by ':'. */
static bool valid_release_list(const char *s, size_t max)
{
	size_t len = strlen(s);

	if (!len || len >= max || strspn(s, "0123456789:,") != len)
		return false;
	while (*s) {
		size_t k = strcspn(s, ","), parts = 1;

		if (!k)
			return false;
		for (size_t i = 0; i < k; i++) {
			if (s[i] != ':')
				continue;
			if (!i || i + 1 == k || s[i + 1] == ':')
				return false;
			parts++;
		}
		if (parts != 1 && parts != 3 && parts != 4)
			return false;
		s += k;
		if (*s && !*++s)
			return false;   /* a trailing comma */
	}
	return true;
}

/* 1 for app_release, N for app_releaseN (2..PROTO_APP_RELEASE_KEYS), else 0. */
static int release_key(const char *key)
{
	size_t m = strlen("app_release");

	if (strncmp(key, "app_release", m))
		return 0;
	if (!key[m])
		return 1;
	if (key[m] >= '2' && key[m] <= '0' + PROTO_APP_RELEASE_KEYS && !key[m + 1])
		return key[m] - '0';
	return 0;
}

/* Which keys each verb accepts. */
static bool verb_takes(proto_verb v, const char *key)
{
	if (!strcmp(key, "tag"))
		return v != PROTO_HELLO && v != PROTO_CANCEL && v != PROTO_SHARE_OPEN &&
		       v != PROTO_TRIM && v != PROTO_APP_OPEN;
	if (!strcmp(key, "device"))
		return v != PROTO_HELLO && v != PROTO_CANCEL && v != PROTO_SHARE_OPEN &&
		       v != PROTO_APP_OPEN;
	if (!strcmp(key, "handle"))
		return v == PROTO_APP_OPEN;
	if (!strcmp(key, "app_defer"))
		return v == PROTO_WAKE;
	if (!strcmp(key, "export") || !strcmp(key, "base") || !strcmp(key, "keep"))
		return v == PROTO_SHARE_OPEN;
	if (!strcmp(key, "reason") || !strcmp(key, "share_group") || release_key(key))
		return v == PROTO_SLEEP;
	if (!strcmp(key, "discard") || !strcmp(key, "autowake"))
		return v == PROTO_SLEEP;
	if (!strcmp(key, "timeout_ms"))
		return v == PROTO_SLEEP || v == PROTO_WAKE || v == PROTO_CANCEL || v == PROTO_TRIM;
	if (!strcmp(key, "drain_ms"))
		return v == PROTO_SLEEP;
	return false;
}

static int apply_field(proto_request *req, const proto_field *f, char *why, size_t whylen)
{
	long long v;

	if (!verb_takes(req->verb, f->key))
		return why_fail(why, whylen, "'%s' does not take '%s'", proto_verb_name(req->verb),
				f->key);
	if (!strcmp(f->key, "tag")) {
		if (f->type != PROTO_T_STRING || !valid_tag(f->value))
			return why_fail(why, whylen,
					"tag must be a string of 1 to %d printable ASCII bytes",
					PROTO_TAG_MAX - 1);
		snprintf(req->tag, sizeof(req->tag), "%s", f->value);
	} else if (!strcmp(f->key, "device")) {
		if (f->type != PROTO_T_NUMBER || !parse_integer(f->value, -1, PROTO_MAX_DEVICE, &v))
			return why_fail(why, whylen, "device must be -1..%d", PROTO_MAX_DEVICE);
		req->device = (int)v;
	} else if (!strcmp(f->key, "timeout_ms")) {
		if (f->type != PROTO_T_NUMBER || !parse_integer(f->value, 0, MAX_TIMEOUT_MS, &v))
			return why_fail(why, whylen, "timeout_ms must be 0..%d", MAX_TIMEOUT_MS);
		req->timeout_ms = (int)v;
	} else if (!strcmp(f->key, "export") || !strcmp(f->key, "base")) {
		if (f->type != PROTO_T_NUMBER || !parse_integer(f->value, 1, LLONG_MAX, &v))
			return why_fail(why, whylen, "%s must be a positive integer", f->key);
		*(!strcmp(f->key, "export") ? &req->share_id : &req->share_base) = (uint64_t)v;
	} else if (!strcmp(f->key, "drain_ms")) {
		if (f->type != PROTO_T_NUMBER || !parse_integer(f->value, 0, MAX_TIMEOUT_MS, &v))
			return why_fail(why, whylen, "drain_ms must be 0..%d", MAX_TIMEOUT_MS);
		req->drain_ms = (int)v;
	} else if (!strcmp(f->key, "reason")) {
		if (f->type != PROTO_T_STRING || !f->value[0] ||
		    strlen(f->value) >= PROTO_REASON_MAX || !printable(f->value))
			return why_fail(why, whylen,
					"reason must be a string of 1 to %d printable ASCII bytes",
					PROTO_REASON_MAX - 1);
		snprintf(req->reason, sizeof(req->reason), "%s", f->value);
	} else if (release_key(f->key)) {
		size_t len = strlen(req->app_release);

		if (f->type != PROTO_T_STRING || !valid_release_list(f->value, PROTO_VALUE_MAX))
			return why_fail(why, whylen, "%s must be handle values, each alone or as "
					"H:PID:H or H:PID:H:START, separated by commas", f->key);
		if (len + 1 + strlen(f->value) >= sizeof(req->app_release))
			return why_fail(why, whylen, "app_release lists more than %d bytes in all",
					PROTO_APP_RELEASE_MAX - 1);
		/* The parts of one list, in any order: the list is a set. */
		snprintf(req->app_release + len, sizeof(req->app_release) - len, "%s%s",
			 len ? "," : "", f->value);
	} else if (!strcmp(f->key, "handle")) {
		if (f->type != PROTO_T_STRING || !parse_u64(f->value, &req->app_handle) ||
		    !req->app_handle)
			return why_fail(why, whylen, "handle must be a positive integer in quotes");
	} else if (!strcmp(f->key, "share_group")) {
		if (f->type != PROTO_T_STRING || !valid_pid_list(f->value))
			return why_fail(why, whylen, "share_group must be 1 to 64 pids, separated "
					"by commas");
		snprintf(req->share_group, sizeof(req->share_group), "%s", f->value);
	} else {
		if (f->type != PROTO_T_BOOL)
			return why_fail(why, whylen, "%s must be true or false", f->key);
		if (!strcmp(f->key, "discard"))
			req->discard = f->value[0] == 't';
		else if (!strcmp(f->key, "keep"))
			req->keep = f->value[0] == 't';
		else if (!strcmp(f->key, "app_defer"))
			req->app_defer = f->value[0] == 't';
		else
			req->autowake = f->value[0] == 't';
	}
	return 0;
}

int proto_parse_request(const char *buf, size_t len, proto_request *out, char *why,
			size_t whylen)
{
	static const proto_verb verbs[] = { PROTO_HELLO, PROTO_STATUS, PROTO_SLEEP, PROTO_WAKE,
					    PROTO_CANCEL, PROTO_SHARE_OPEN, PROTO_TRIM,
					    PROTO_APP_OPEN };
	size_t m = strlen(PROTO_MAGIC), n, pos;
	proto_record rec;
	bool found = false;

	if (!buf || !out)
		return why_fail(why, whylen, "no input");
	if (len > PROTO_MAX_REQUEST)
		return why_fail(why, whylen, "request longer than %d bytes", PROTO_MAX_REQUEST);
	n = 0;
	while (n < len && buf[n] != '\n')
		n++;
	if (n == len)
		return why_fail(why, whylen, "request not terminated by a newline");
	if (n + 1 != len)
		return why_fail(why, whylen, "data after the request line");
	if (n < m - 1 || memcmp(buf, PROTO_MAGIC, m - 1))
		return why_fail(why, whylen, "not a vmmshim request (want \"%s VERB ...\")",
				PROTO_MAGIC);
	if (n < m + 1 || buf[m - 1] != PROTO_MAGIC[m - 1] || buf[m] != ' ')
		return why_fail(why, whylen, "unsupported protocol version (this server speaks %s)",
				PROTO_MAGIC);
	pos = m + 1;
	if (proto_parse_record(buf + pos, n - pos, &rec, why, whylen))
		return -1;
	memset(out, 0, sizeof(*out));
	out->device = -1;
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
		if (!strcmp(rec.kind, proto_verb_name(verbs[i]))) {
			out->verb = verbs[i];
			found = true;
		}
	}
	if (!found)
		return why_fail(why, whylen, "unknown verb '%s'", rec.kind);
	for (int i = 0; i < rec.nfields; i++)
		if (apply_field(out, &rec.fields[i], why, whylen))
			return -1;
	if (out->verb == PROTO_SHARE_OPEN && (!out->share_id || !out->share_base))
		return why_fail(why, whylen, "share_open needs export= and base=");
	if (out->verb == PROTO_APP_OPEN && !out->app_handle)
		return why_fail(why, whylen, "app_open needs handle=");
	return 0;
}

/* Append s to buf as a quoted, %-escaped string. Returns false when it does not fit. */
static bool put_quoted(char *buf, size_t cap, size_t *len, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = *len;

	if (n + 1 >= cap)
		return false;
	buf[n++] = '"';
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c < 0x21 || c > 0x7e || c == '"' || c == '%' || c == '=') {
			if (n + 3 >= cap)
				return false;
			buf[n++] = '%';
			buf[n++] = hex[c >> 4];
			buf[n++] = hex[c & 15];
		} else {
			if (n + 1 >= cap)
				return false;
			buf[n++] = (char)c;
		}
	}
	if (n + 1 >= cap)
		return false;
	buf[n++] = '"';
	buf[n] = '\0';
	*len = n;
	return true;
}

static bool put_text(char *buf, size_t cap, size_t *len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static bool put_text(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (*len >= cap)
		return false;
	va_start(ap, fmt);
	k = vsnprintf(buf + *len, cap - *len, fmt, ap);
	va_end(ap);
	if (k < 0 || (size_t)k >= cap - *len)
		return false;
	*len += (size_t)k;
	return true;
}

/* The app_release list (valid), as app_release="..." and, where it is longer than one value,
 * app_release2="..." and on, each part cut at a comma. */
static bool put_release(char *buf, size_t cap, size_t *len, const char *list)
{
	char part[PROTO_VALUE_MAX];

	for (int key = 1; *list; key++) {
		size_t n = strlen(list), cut = n;

		if (key > PROTO_APP_RELEASE_KEYS)
			return false;
		if (n >= sizeof(part)) {   /* the last comma that leaves a part short enough */
			cut = 0;
			for (size_t i = 0; i < sizeof(part); i++)
				if (list[i] == ',')
					cut = i;
			if (!cut)
				return false;
		}
		memcpy(part, list, cut);
		part[cut] = '\0';
		if (!(key == 1 ? put_text(buf, cap, len, " app_release=") :
				 put_text(buf, cap, len, " app_release%d=", key)) ||
		    !put_quoted(buf, cap, len, part))
			return false;
		list += cut + (list[cut] == ',');
	}
	return true;
}

size_t proto_format_request(const proto_request *req, char *buf, size_t cap)
{
	size_t len = 0;
	bool ok;

	if (!req || !buf || cap == 0 || req->device < -1 || req->device > PROTO_MAX_DEVICE ||
	    (req->tag[0] && !valid_tag(req->tag)))
		return 0;
	ok = put_text(buf, cap, &len, "%s %s", PROTO_MAGIC, proto_verb_name(req->verb));
	if (ok && req->tag[0] && verb_takes(req->verb, "tag"))
		ok = put_text(buf, cap, &len, " tag=") && put_quoted(buf, cap, &len, req->tag);
	if (ok && req->device >= 0 && verb_takes(req->verb, "device"))
		ok = put_text(buf, cap, &len, " device=%d", req->device);
	if (ok && req->verb == PROTO_SLEEP)
		ok = put_text(buf, cap, &len, " discard=%s autowake=%s",
			      req->discard ? "true" : "false", req->autowake ? "true" : "false");
	if (ok && req->timeout_ms > 0 && verb_takes(req->verb, "timeout_ms"))
		ok = put_text(buf, cap, &len, " timeout_ms=%d", req->timeout_ms);
	if (ok && req->verb == PROTO_SHARE_OPEN)
		ok = req->share_id && req->share_base && req->share_id <= LLONG_MAX &&
		     req->share_base <= LLONG_MAX &&
		     put_text(buf, cap, &len, " export=%llu base=%llu",
			      (unsigned long long)req->share_id,
			      (unsigned long long)req->share_base);
	if (ok && req->keep && verb_takes(req->verb, "keep"))
		ok = put_text(buf, cap, &len, " keep=true");
	if (ok && req->drain_ms > 0 && verb_takes(req->verb, "drain_ms"))
		ok = put_text(buf, cap, &len, " drain_ms=%d", req->drain_ms);
	if (ok && req->reason[0] && verb_takes(req->verb, "reason"))
		ok = put_text(buf, cap, &len, " reason=") &&
		     put_quoted(buf, cap, &len, req->reason);
	if (ok && req->share_group[0] && verb_takes(req->verb, "share_group"))
		ok = put_text(buf, cap, &len, " share_group=") &&
		     put_quoted(buf, cap, &len, req->share_group);
	if (ok && req->app_release[0] && verb_takes(req->verb, "app_release"))
		ok = valid_release_list(req->app_release, sizeof(req->app_release)) &&
		     put_release(buf, cap, &len, req->app_release);
	if (ok && req->app_defer && verb_takes(req->verb, "app_defer"))
		ok = put_text(buf, cap, &len, " app_defer=true");
	if (ok && req->verb == PROTO_APP_OPEN)
		ok = req->app_handle && put_text(buf, cap, &len, " handle=\"%llu\"",
						 (unsigned long long)req->app_handle);
	if (ok)
		ok = put_text(buf, cap, &len, "\n");
	if (!ok || len > PROTO_MAX_REQUEST)
		return 0;
	return len;
}

/* The writer. */

void proto_writer_init(proto_writer *w)
{
	memset(w, 0, sizeof(*w));
}

void proto_writer_free(proto_writer *w)
{
	free(w->buf);
	proto_writer_init(w);
}

proto_mark proto_writer_mark(const proto_writer *w)
{
	return (proto_mark){ .len = w->len, .failed = w->failed, .in_record = w->in_record,
			     .records = w->records };
}

void proto_writer_rewind(proto_writer *w, proto_mark m)
{
	w->len = m.len;
	if (w->buf)
		w->buf[w->len] = '\0';
	w->failed = m.failed;
	w->in_record = m.in_record;
	w->records = m.records;
}

/* Make room for `need` more bytes plus a NUL. */
static bool reserve(proto_writer *w, size_t need)
{
	size_t want = w->len + need + 1, cap = w->cap ? w->cap : 1024;

	if (w->failed)
		return false;
	if (want <= w->cap)
		return true;
	if (want > PROTO_MAX_RESPONSE) {
		w->failed = true;
		return false;
	}
	while (cap < want)
		cap *= 2;
	char *nb = realloc(w->buf, cap);
	if (!nb) {
		w->failed = true;
		return false;
	}
	w->buf = nb;
	w->cap = cap;
	return true;
}

static void wprintf(proto_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void wprintf(proto_writer *w, const char *fmt, ...)
{
	char tmp[PROTO_MAX_LINE];
	va_list ap;
	int k;

	va_start(ap, fmt);
	k = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (k < 0 || (size_t)k >= sizeof(tmp) || !reserve(w, (size_t)k)) {
		w->failed = true;
		return;
	}
	memcpy(w->buf + w->len, tmp, (size_t)k + 1);
	w->len += (size_t)k;
}

void proto_header(proto_writer *w, const char *word)
{
	wprintf(w, "%s %s\n", PROTO_MAGIC, word);
}

void proto_record_begin(proto_writer *w, const char *kind)
{
	if (w->records == PROTO_MAX_RECORDS) {
		w->failed = true;
		return;
	}
	w->records++;
	wprintf(w, "%s", kind);
	w->in_record = true;
}

void proto_put_u64(proto_writer *w, const char *key, uint64_t v)
{
	wprintf(w, " %s=%" PRIu64, key, v);
}

void proto_put_int(proto_writer *w, const char *key, long long v)
{
	wprintf(w, " %s=%lld", key, v);
}

void proto_put_double(proto_writer *w, const char *key, double v)
{
	if (!(v == v) || v > 1e15 || v < -1e15)
		v = 0; /* NaN and absurd values have no wire form */
	wprintf(w, " %s=%.6f", key, v);
}

void proto_put_bool(proto_writer *w, const char *key, bool v)
{
	wprintf(w, " %s=%s", key, v ? "true" : "false");
}

void proto_put_str(proto_writer *w, const char *key, const char *s)
{
	char tmp[PROTO_VALUE_MAX * 3 + 3];
	size_t len = 0;
	char cut[PROTO_VALUE_MAX];

	/* Over-long strings are cut so that the reader's value buffer holds them. */
	snprintf(cut, sizeof(cut), "%s", s ? s : "");
	if (!put_quoted(tmp, sizeof(tmp), &len, cut)) {
		w->failed = true;
		return;
	}
	wprintf(w, " %s=%s", key, tmp);
}

void proto_record_end(proto_writer *w)
{
	wprintf(w, "\n");
	w->in_record = false;
}

void proto_end(proto_writer *w)
{
	wprintf(w, "end\n");
}

void proto_error_response(proto_writer *w, const char *status, const char *message)
{
	proto_header(w, "error");
	proto_record_begin(w, "error");
	proto_put_str(w, "status", status);
	proto_put_str(w, "message", message);
	proto_record_end(w);
	proto_end(w);
}
