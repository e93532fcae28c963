/* The agent protocol's requests and replies (proto.c): the reply line being built, the
 * current request's key=value arguments and the checks on them. */
#ifndef AGENT_PROTO_H
#define AGENT_PROTO_H

#include <stddef.h>
#include <stdint.h>

/* Every name the agent's files share stays inside the program, as when they were one file
 * of statics: `err` would otherwise be exported, and libc's err(3) preempted. */
#pragma GCC visibility push(hidden)

#define MAX_LINE 4096
#define MAX_ARGS 32
#define MAX_NAME 31

/* ---- replies ------------------------------------------------------------------------ */

/* The reply so far: one line, `rlen` bytes, without its new line. */
extern char *rbuf;
extern size_t rlen;

void rclear(void);
/* Room for `more` bytes and a NUL after rbuf + rlen. */
void rgrow(size_t more);
__attribute__((format(printf, 1, 2))) void rprintf(const char *fmt, ...);
/* Each replaces the reply with `err ...` or `unsupported ...` and returns -1. */
__attribute__((format(printf, 1, 2))) int err(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) int unsupported(const char *fmt, ...);
int verbs_err(const char *call, int e);

/* ---- requests ----------------------------------------------------------------------- */

/* The current request's value for `key`, NULL when absent. */
const char *get(const char *key);
int only(const char *const *allowed);
int parse_num(const char *s, uint64_t max, uint64_t *out);
int num(const char *key, uint64_t max, int required, uint64_t def, uint64_t *out);
int valid_name(const char *s);

struct flag {
	const char *name;
	unsigned bit;
};

int flags(const char *key, const char *list, const struct flag *table, unsigned *out);

/* Runs one request line (split in place); the reply is then in rbuf. */
void handle(char *line);

#pragma GCC visibility pop

#endif
