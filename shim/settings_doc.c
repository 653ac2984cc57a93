/* settings_doc: writes the settings table of shim/config.c as documentation, so that the README
 * and the vmmshim(7) man page never drift from the code (built with the shim, never installed).
 *
 *   settings_doc --markdown                      the README's table, between its markers
 *   settings_doc --man TEMPLATE OUT              OUT = TEMPLATE with its @SETTINGS@ line replaced
 *   settings_doc --check-readme README           exit 1 (and say how to fix it) if README's table
 *                                                differs from the code's
 *   settings_doc --update-readme README          rewrite README's table from the code
 *
 * The README's table sits between the lines BEGIN_MARK and END_MARK below. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#define BEGIN_MARK                                                                          \
	"<!-- settings table: generated from shim/config.c (ninja -C build update-settings-doc) -->"
#define END_MARK "<!-- end of settings table -->"

struct buf {
	char *s;
	size_t len, cap;
	int failed;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = (b->len + n + 1) * 2;
		char *ns = realloc(b->s, cap);

		if (!ns) {
			b->failed = 1;
			return;
		}
		b->s = ns;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

static void puts_buf(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

/* A default as the docs show it: "(4 x device memory)" -> "4 x device memory". */
static void shown_default(const char *def, char *out, size_t cap)
{
	size_t n = strlen(def);

	if (n >= 2 && def[0] == '(' && def[n - 1] == ')')
		snprintf(out, cap, "%.*s", (int)(n - 2), def + 1);
	else
		snprintf(out, cap, "%s", n ? def : "none");
}

/* Markdown table cells: '|' would end the cell. */
static void put_md(struct buf *b, const char *s)
{
	for (; *s; s++) {
		if (*s == '|')
			puts_buf(b, "\\|");
		else
			put(b, s, 1);
	}
}

static void md_row(const char *env, const char *def, const char *help, void *arg)
{
	struct buf *b = arg;
	char d[256];

	shown_default(def, d, sizeof(d));
	puts_buf(b, "| `");
	puts_buf(b, env);
	puts_buf(b, "` | ");
	put_md(b, d);
	puts_buf(b, " | ");
	put_md(b, help);
	puts_buf(b, " |\n");
}

static void markdown(struct buf *b)
{
	puts_buf(b, BEGIN_MARK "\n");
	puts_buf(b, "| variable | default | meaning |\n| --- | --- | --- |\n");
	shim_config_each(md_row, b);
	puts_buf(b, END_MARK "\n");
}

/* roff text: a backslash is \e; a line must not start with '.' or '\'' (a request). */
static void put_roff(struct buf *b, const char *s)
{
	if (*s == '.' || *s == '\'')
		puts_buf(b, "\\&");
	for (; *s; s++) {
		if (*s == '\\')
			puts_buf(b, "\\e");
		else if (*s == '-')
			puts_buf(b, "\\-");
		else
			put(b, s, 1);
	}
}

static void man_row(const char *env, const char *def, const char *help, void *arg)
{
	struct buf *b = arg;
	char d[256];

	shown_default(def, d, sizeof(d));
	puts_buf(b, ".TP\n.B ");
	puts_buf(b, env);
	puts_buf(b, "\n");
	put_roff(b, help);
	puts_buf(b, "\n(default: ");
	put_roff(b, d);
	puts_buf(b, ")\n");
}

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	struct buf b = { 0 };
	char chunk[8192];
	size_t n;

	if (!f) {
		perror(path);
		return NULL;
	}
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		put(&b, chunk, n);
	fclose(f);
	if (b.failed || !b.s) {
		fprintf(stderr, "settings_doc: cannot read %s\n", path);
		free(b.s);
		return NULL;
	}
	*len = b.len;
	return b.s;
}

static int write_file(const char *path, const char *s, size_t len)
{
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(s, 1, len, f) != len || fclose(f)) {
		perror(path);
		return 1;
	}
	return 0;
}

static int man(const char *template_path, const char *out_path)
{
	size_t len;
	char *t = read_file(template_path, &len);
	struct buf b = { 0 };
	const char *mark;
	int rc;

	if (!t)
		return 1;
	mark = strstr(t, "\n@SETTINGS@\n");
	if (!mark) {
		fprintf(stderr, "settings_doc: %s has no @SETTINGS@ line\n", template_path);
		free(t);
		return 1;
	}
	put(&b, t, (size_t)(mark - t) + 1);
	shim_config_each(man_row, &b);
	puts_buf(&b, mark + strlen("\n@SETTINGS@\n"));
	rc = b.failed ? 1 : write_file(out_path, b.s, b.len);
	free(b.s);
	free(t);
	return rc;
}

/* README with its table replaced by the code's; NULL (said why) when the markers are missing. */
static char *readme_with_table(const char *readme, const char *path, const char **old_begin,
			       const char **old_end)
{
	const char *begin = strstr(readme, BEGIN_MARK "\n"), *end;
	struct buf b = { 0 };

	end = begin ? strstr(begin, END_MARK "\n") : NULL;
	if (!begin || !end) {
		fprintf(stderr, "settings_doc: %s lacks the lines\n  %s\n  %s\naround its settings "
			"table\n", path, BEGIN_MARK, END_MARK);
		return NULL;
	}
	end += strlen(END_MARK "\n");
	put(&b, readme, (size_t)(begin - readme));
	markdown(&b);
	puts_buf(&b, end);
	*old_begin = begin;
	*old_end = end;
	if (b.failed) {
		free(b.s);
		return NULL;
	}
	return b.s;
}

static int readme(const char *path, int update)
{
	size_t len;
	char *text = read_file(path, &len), *fixed;
	const char *ob, *oe;
	int rc = 0;

	if (!text)
		return 1;
	fixed = readme_with_table(text, path, &ob, &oe);
	if (!fixed) {
		free(text);
		return 1;
	}
	if (strcmp(fixed, text)) {
		if (update) {
			rc = write_file(path, fixed, strlen(fixed));
			if (!rc)
				printf("settings_doc: updated the settings table in %s\n", path);
		} else {
			struct buf want = { 0 };

			markdown(&want);
			fprintf(stderr, "settings_doc: the settings table in %s differs from "
				"shim/config.c.\nIn the README:\n%.*s\nFrom the code:\n%s\nFix: ninja "
				"-C build update-settings-doc (rewrites the README's table from the "
				"code; edit the text in shim/config.c)\n", path, (int)(oe - ob), ob,
				want.s ? want.s : "(out of memory)\n");
			free(want.s);
			rc = 1;
		}
	}
	free(fixed);
	free(text);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--markdown")) {
		struct buf b = { 0 };

		markdown(&b);
		if (b.failed)
			return 1;
		fputs(b.s, stdout);
		free(b.s);
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "--man"))
		return man(argv[2], argv[3]);
	if (argc == 3 && !strcmp(argv[1], "--check-readme"))
		return readme(argv[2], 0);
	if (argc == 3 && !strcmp(argv[1], "--update-readme"))
		return readme(argv[2], 1);
	fprintf(stderr, "usage: settings_doc --markdown | --man TEMPLATE OUT | "
		"--check-readme README | --update-readme README\n");
	return 2;
}
