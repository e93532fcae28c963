/* The agent protocol's requests and replies (spec/FORMAT.md): the reply line being built
 * and its `err` and `unsupported` endings; a request's key=value arguments and the checks
 * on them (numbers, names, flag lists); handle(), which splits a request line and runs its
 * command. */
#define _GNU_SOURCE
#include "agent.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- replies ------------------------------------------------------------------------ */

char *rbuf;
size_t rlen;
static size_t rcap;

void rclear(void) { rlen = 0; }

void rgrow(size_t more)
{
	if (rlen + more + 1 <= rcap)
		return;
	size_t cap = rcap ? rcap : 256;
	while (cap < rlen + more + 1)
		cap *= 2;
	char *n = realloc(rbuf, cap);
	if (!n) {
		/* Out of memory for a reply: the connection cannot continue sensibly. */
		fprintf(stderr, "agent: out of memory\n");
		exit(1);
	}
	rbuf = n;
	rcap = cap;
}

__attribute__((format(printf, 1, 2))) void rprintf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	rgrow((size_t)n);
	va_start(ap, fmt);
	vsnprintf(rbuf + rlen, rcap - rlen, fmt, ap);
	va_end(ap);
	/* Replies are one line: no new line or carriage return from any source. */
	for (size_t i = rlen; i < rlen + (size_t)n; i++)
		if (rbuf[i] == '\n' || rbuf[i] == '\r')
			rbuf[i] = ' ';
	rlen += (size_t)n;
}

/* Every handler returns through one of these: 0 after `ok ...`, -1 after `err ...` or
 * `unsupported ...` (the reply is then complete). */
__attribute__((format(printf, 1, 2))) int err(const char *fmt, ...)
{
	char text[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	rclear();
	rprintf("err %s", text);
	return -1;
}

__attribute__((format(printf, 1, 2))) int unsupported(const char *fmt, ...)
{
	char text[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	rclear();
	rprintf("unsupported %s", text);
	return -1;
}

/* A verbs call's failure: `err CALL: strerror`, or `unsupported CALL: ...` when the device
 * says it does not support what was asked. */
int verbs_err(const char *call, int e)
{
	if (e == EOPNOTSUPP || e == ENOSYS || e == EPROTONOSUPPORT)
		return unsupported("%s: %s", call, strerror(e));
	return err("%s: %s", call, strerror(e ? e : EIO));
}

/* ---- requests ----------------------------------------------------------------------- */

struct arg {
	const char *key, *val;
};

static struct arg args[MAX_ARGS];
static int nargs;

const char *get(const char *key)
{
	for (int i = 0; i < nargs; i++)
		if (strcmp(args[i].key, key) == 0)
			return args[i].val;
	return NULL;
}

/* Fails on any key not in `allowed` (NULL-terminated). */
int only(const char *const *allowed)
{
	for (int i = 0; i < nargs; i++) {
		int ok = 0;
		for (const char *const *a = allowed; *a; a++)
			if (strcmp(args[i].key, *a) == 0)
				ok = 1;
		if (!ok)
			return err("unknown key %.64s", args[i].key);
	}
	return 0;
}

/* A number: decimal or 0x hex, no sign, no spaces, at most `max`. */
int parse_num(const char *s, uint64_t max, uint64_t *out)
{
	if (!s || !*s)
		return -1;
	int base = 10;
	const char *p = s;
	if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
		base = 16;
		p += 2;
		if (!*p)
			return -1;
	}
	uint64_t v = 0;
	for (; *p; p++) {
		unsigned d;
		if (*p >= '0' && *p <= '9')
			d = (unsigned)(*p - '0');
		else if (base == 16 && *p >= 'a' && *p <= 'f')
			d = (unsigned)(*p - 'a' + 10);
		else if (base == 16 && *p >= 'A' && *p <= 'F')
			d = (unsigned)(*p - 'A' + 10);
		else
			return -1;
		if (v > (UINT64_MAX - d) / (uint64_t)base)
			return -1;
		v = v * (uint64_t)base + d;
	}
	if (v > max)
		return -1;
	*out = v;
	return 0;
}

/* `key` as a number up to `max`; `def` when absent and not `required`. */
int num(const char *key, uint64_t max, int required, uint64_t def, uint64_t *out)
{
	const char *v = get(key);
	if (!v) {
		if (required)
			return err("missing %s", key);
		*out = def;
		return 0;
	}
	if (parse_num(v, max, out))
		return err("bad number %s=%.64s (0 to %llu)", key, v, (unsigned long long)max);
	return 0;
}

int valid_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > MAX_NAME)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == '-' || *s == '.'))
			return 0;
	return 1;
}

/* A comma list of names into flags. Unknown names fail; `none` or nothing is 0. */
int flags(const char *key, const char *list, const struct flag *table, unsigned *out)
{
	char copy[MAX_LINE];
	*out = 0;
	if (!list || !*list || strcmp(list, "none") == 0)
		return 0;
	snprintf(copy, sizeof(copy), "%s", list);
	char *save = NULL;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		const struct flag *f = table;
		while (f->name && strcmp(f->name, t) != 0)
			f++;
		if (!f->name)
			return err("bad %s flag %.64s", key, t);
		*out |= f->bit;
	}
	return 0;
}

/* Splits `line` in place into the command and its key=value arguments, then runs it. */
void handle(char *line)
{
	char *save = NULL, *cmd;
	rclear();
	nargs = 0;
	cmd = strtok_r(line, " \t", &save);
	if (!cmd) {
		err("empty request");
		return;
	}
	for (char *t = strtok_r(NULL, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
		char *eq = strchr(t, '=');
		if (!eq || eq == t) {
			err("bad argument %.64s (key=value)", t);
			return;
		}
		if (nargs == MAX_ARGS) {
			err("too many arguments (%d)", MAX_ARGS);
			return;
		}
		*eq = 0;
		if (get(t)) {
			err("duplicate key %.64s", t);
			return;
		}
		args[nargs].key = t;
		args[nargs].val = eq + 1;
		nargs++;
	}
	static const struct {
		const char *name;
		int (*fn)(void);
	} cmds[] = {
		{ "hello", cmd_hello },		{ "reset", cmd_reset },
		{ "mr", cmd_mr },		{ "qp", cmd_qp },
		{ "modify", cmd_modify },	{ "post_recv", cmd_post_recv },
		{ "post_send", cmd_post_send }, { "poll", cmd_poll },
		{ "state", cmd_state },		{ "read", cmd_read },
		{ "event", cmd_event },		{ "srq", cmd_srq },
		{ "modify_srq", cmd_modify_srq }, { "post_srq_recv", cmd_post_srq_recv },
		{ "port", cmd_port },		{ "cm_listen", cmd_cm_listen },
		{ "cm_event", cmd_cm_event },	{ "cm_accept", cmd_cm_accept },
		{ "cm_reject", cmd_cm_reject }, { "cm_disconnect", cmd_cm_disconnect },
		{ "cm_destroy", cmd_cm_destroy },
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (strcmp(cmd, cmds[i].name) == 0) {
			cmds[i].fn();
			return;
		}
	err("unknown command %.64s", cmd);
}
