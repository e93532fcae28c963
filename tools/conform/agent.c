/* The conformance agent for a real rdma-core device (rxe in the lab's Debian 12 guest, or
 * any other verbs device; roce-emu through its drop-in libibverbs.so.1 too): the target's
 * side of a conformance script, driven over TCP by `roce-emu conform`. It speaks exactly
 * the agent protocol of spec/FORMAT.md: one request line in, one reply line out, one
 * connection at a time, nothing kept between connections.
 *
 * Usage: agent [-d DEVICE] [-p PORT] [-l ADDR]
 *   -d  the verbs device (default: the first one)
 *   -p  the TCP port (default 7471; 0 picks a free one)
 *   -l  the IPv4 address to listen on (default: every address)
 * Once listening it prints one line on stdout:
 *   agent: listening on port PORT (device DEV, NAME, GID index N, ip A)
 *
 * Plain libibverbs (no librdmacm, no provider headers): built by
 * tools/conform/build-agent.sh against Debian 12's rdma-core 44 headers.
 *
 * Robustness: a request line is at most MAX_LINE bytes (longer ones are answered
 * `err line too long` and discarded up to their new line); every number, name and list is
 * checked before any verbs call; every failure is an `err` reply, never an exit.
 *
 * One extension of the protocol: `modify` also takes `peer_qpn= peer_ip=` (both), the
 * remote QP for a later INIT->RTR, so that two agents can be pointed at each other
 * (each QP's number is known only once it exists; tests/conform_agent.rs does that). */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Exported by libibverbs (IBVERBS_1.0) but declared only in the provider headers. The
 * drop-in serves its devices' virtual sysfs files through it. */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

#define MAX_LINE 4096
#define MAX_ARGS 32
#define MAX_MRS 16
#define MAX_NAME 31
#define MAX_SGE 16
#define MAX_MR_LEN (256ul << 20) /* one region, and all of them together */
#define MAX_READ (1ul << 20)
#define MAX_POLL_MS 600000ul
#define MAX_QUEUE 16384ul
#define DEFAULT_PORT 7471

/* ---- the device --------------------------------------------------------------------- */

static struct ibv_context *ctx;
static struct ibv_device *dev;
static struct ibv_device_attr dattr;
static char target_name[64];

/* ---- the current script's objects --------------------------------------------------- */

struct region {
	char name[MAX_NAME + 1];
	uint8_t *buf;
	size_t len;
	struct ibv_mr *mr;
};

struct qp_params {
	enum ibv_mtu mtu;
	uint32_t psn, peer_psn, peer_qpn;
	int has_peer;
	union ibv_gid peer_gid;
	int sgid_index;
	unsigned access;
	uint8_t max_rd_atomic, max_dest_rd_atomic;
	uint8_t timeout, retry, rnr_retry, min_rnr_timer;
	uint32_t sq, rq;
};

static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static struct region regions[MAX_MRS];
static int nregions;
static struct qp_params qpp;

/* ---- replies ------------------------------------------------------------------------ */

static char *rbuf;
static size_t rlen, rcap;

static void rclear(void) { rlen = 0; }

static void rgrow(size_t more)
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

__attribute__((format(printf, 1, 2))) static void rprintf(const char *fmt, ...)
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
__attribute__((format(printf, 1, 2))) static int err(const char *fmt, ...)
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

__attribute__((format(printf, 1, 2))) static int unsupported(const char *fmt, ...)
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
static int verbs_err(const char *call, int e)
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

static const char *get(const char *key)
{
	for (int i = 0; i < nargs; i++)
		if (strcmp(args[i].key, key) == 0)
			return args[i].val;
	return NULL;
}

/* Fails on any key not in `allowed` (NULL-terminated). */
static int only(const char *const *allowed)
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
static int parse_num(const char *s, uint64_t max, uint64_t *out)
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
static int num(const char *key, uint64_t max, int required, uint64_t def, uint64_t *out)
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

static int valid_name(const char *s)
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

static struct region *region(const char *name)
{
	for (int i = 0; i < nregions; i++)
		if (strcmp(regions[i].name, name) == 0)
			return &regions[i];
	return NULL;
}

/* A comma list of names into flags. Unknown names fail; `none` or nothing is 0. */
struct flag {
	const char *name;
	unsigned bit;
};

static int flags(const char *key, const char *list, const struct flag *table, unsigned *out)
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

static const struct flag access_flags[] = {
	{ "local_write", IBV_ACCESS_LOCAL_WRITE },
	{ "remote_write", IBV_ACCESS_REMOTE_WRITE },
	{ "remote_read", IBV_ACCESS_REMOTE_READ },
	{ "remote_atomic", IBV_ACCESS_REMOTE_ATOMIC },
	{ "mw_bind", IBV_ACCESS_MW_BIND },
	{ "zero_based", IBV_ACCESS_ZERO_BASED },
	{ "on_demand", IBV_ACCESS_ON_DEMAND },
	{ "relaxed_ordering", IBV_ACCESS_RELAXED_ORDERING },
	{ NULL, 0 },
};

/* ---- names -------------------------------------------------------------------------- */

static const char *const qp_state_names[] = {
	[IBV_QPS_RESET] = "RESET", [IBV_QPS_INIT] = "INIT", [IBV_QPS_RTR] = "RTR",
	[IBV_QPS_RTS] = "RTS",	   [IBV_QPS_SQD] = "SQD",   [IBV_QPS_SQE] = "SQE",
	[IBV_QPS_ERR] = "ERR",
};

static int parse_state(const char *s, enum ibv_qp_state *out)
{
	for (int i = 0; i <= IBV_QPS_ERR; i++)
		if (strcmp(s, qp_state_names[i]) == 0) {
			*out = (enum ibv_qp_state)i;
			return 0;
		}
	return -1;
}

static const char *const status_names[] = {
	[IBV_WC_SUCCESS] = "SUCCESS",
	[IBV_WC_LOC_LEN_ERR] = "LOC_LEN_ERR",
	[IBV_WC_LOC_QP_OP_ERR] = "LOC_QP_OP_ERR",
	[IBV_WC_LOC_EEC_OP_ERR] = "LOC_EEC_OP_ERR",
	[IBV_WC_LOC_PROT_ERR] = "LOC_PROT_ERR",
	[IBV_WC_WR_FLUSH_ERR] = "WR_FLUSH_ERR",
	[IBV_WC_MW_BIND_ERR] = "MW_BIND_ERR",
	[IBV_WC_BAD_RESP_ERR] = "BAD_RESP_ERR",
	[IBV_WC_LOC_ACCESS_ERR] = "LOC_ACCESS_ERR",
	[IBV_WC_REM_INV_REQ_ERR] = "REM_INV_REQ_ERR",
	[IBV_WC_REM_ACCESS_ERR] = "REM_ACCESS_ERR",
	[IBV_WC_REM_OP_ERR] = "REM_OP_ERR",
	[IBV_WC_RETRY_EXC_ERR] = "RETRY_EXC_ERR",
	[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR_RETRY_EXC_ERR",
	[IBV_WC_LOC_RDD_VIOL_ERR] = "LOC_RDD_VIOL_ERR",
	[IBV_WC_REM_INV_RD_REQ_ERR] = "REM_INV_RD_REQ_ERR",
	[IBV_WC_REM_ABORT_ERR] = "REM_ABORT_ERR",
	[IBV_WC_INV_EECN_ERR] = "INV_EECN_ERR",
	[IBV_WC_INV_EEC_STATE_ERR] = "INV_EEC_STATE_ERR",
	[IBV_WC_FATAL_ERR] = "FATAL_ERR",
	[IBV_WC_RESP_TIMEOUT_ERR] = "RESP_TIMEOUT_ERR",
	[IBV_WC_GENERAL_ERR] = "GENERAL_ERR",
	[IBV_WC_TM_ERR] = "TM_ERR",
	[IBV_WC_TM_RNDV_INCOMPLETE] = "TM_RNDV_INCOMPLETE",
};

static const char *wc_opcode_name(enum ibv_wc_opcode op)
{
	switch (op) {
	case IBV_WC_SEND: return "SEND";
	case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "RDMA_READ";
	case IBV_WC_COMP_SWAP: return "COMP_SWAP";
	case IBV_WC_FETCH_ADD: return "FETCH_ADD";
	case IBV_WC_BIND_MW: return "BIND_MW";
	case IBV_WC_LOCAL_INV: return "LOCAL_INV";
	case IBV_WC_TSO: return "TSO";
	case IBV_WC_ATOMIC_WRITE: return "ATOMIC_WRITE";
	case IBV_WC_RECV: return "RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
	default: return NULL;
	}
}

struct send_op {
	const char *name;
	enum ibv_wr_opcode op;
	int remote; /* needs va= rkey= */
	int atomic;
};

static const struct send_op send_ops[] = {
	{ "SEND", IBV_WR_SEND, 0, 0 },
	{ "SEND_IMM", IBV_WR_SEND_WITH_IMM, 0, 0 },
	{ "SEND_INV", IBV_WR_SEND_WITH_INV, 0, 0 },
	{ "WRITE", IBV_WR_RDMA_WRITE, 1, 0 },
	{ "WRITE_IMM", IBV_WR_RDMA_WRITE_WITH_IMM, 1, 0 },
	{ "READ", IBV_WR_RDMA_READ, 1, 0 },
	{ "CMP_SWAP", IBV_WR_ATOMIC_CMP_AND_SWP, 1, 1 },
	{ "FETCH_ADD", IBV_WR_ATOMIC_FETCH_AND_ADD, 1, 1 },
	{ NULL, 0, 0, 0 },
};

static const struct flag send_flags[] = {
	{ "signaled", IBV_SEND_SIGNALED },
	{ "solicited", IBV_SEND_SOLICITED },
	{ "fence", IBV_SEND_FENCE },
	{ "inline", IBV_SEND_INLINE },
	{ NULL, 0 },
};

/* ---- the device's RoCE v2 IPv4 GID -------------------------------------------------- */

static int is_v4_mapped(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	return memcmp(g->raw, prefix, 12) == 0;
}

/* The first GID index of port 1 that is RoCE v2 and IPv4-mapped: its index, and the
 * address in `ip`; -1 when there is none (looked up at each use: rxe's GIDs follow the
 * interface's addresses). */
static int roce_v2_ipv4(char *ip, size_t iplen)
{
	struct ibv_port_attr pa;
	if (ibv_query_port(ctx, 1, &pa))
		return -1;
	int n = pa.gid_tbl_len > 0 && pa.gid_tbl_len < 1024 ? pa.gid_tbl_len : 16;
	for (int i = 0; i < n; i++) {
		struct ibv_gid_entry e;
		memset(&e, 0, sizeof(e));
		int rc = ibv_query_gid_ex(ctx, 1, (uint32_t)i, &e, 0);
		if (rc == 0) {
			if (e.gid_type != IBV_GID_TYPE_ROCE_V2 || !is_v4_mapped(&e.gid))
				continue;
		} else {
			/* Older kernels: the GID, and its type from sysfs. */
			char path[64], type[32];
			if (ibv_query_gid(ctx, 1, i, &e.gid) || !is_v4_mapped(&e.gid))
				continue;
			snprintf(path, sizeof(path), "ports/1/gid_attrs/types/%d", i);
			if (ibv_read_sysfs_file(dev->ibdev_path, path, type, sizeof(type)) <= 0 ||
			    !strstr(type, "v2"))
				continue;
		}
		if (ip)
			inet_ntop(AF_INET, &e.gid.raw[12], ip, (socklen_t)iplen);
		return i;
	}
	return -1;
}

/* What the target is: `roce-emu` for its drop-in (whose virtual sysfs says so), the
 * kernel driver's name for a device with one, `rxe` for rxe (no parent device; the
 * vendor id 0xffffff), else the device's name. */
static void find_target_name(void)
{
	char buf[256];
	int n = ibv_read_sysfs_file(dev->ibdev_path, "hca_type", buf, sizeof(buf));
	if (n > 0 && strncmp(buf, "roce-emu", 8) == 0) {
		snprintf(target_name, sizeof(target_name), "roce-emu");
		return;
	}
	char link[PATH_MAX];
	snprintf(link, sizeof(link), "%s/device/driver", dev->ibdev_path);
	ssize_t l = readlink(link, buf, sizeof(buf) - 1);
	if (l > 0) {
		buf[l] = 0;
		const char *base = strrchr(buf, '/');
		snprintf(target_name, sizeof(target_name), "%.63s", base ? base + 1 : buf);
		return;
	}
	if (dattr.vendor_id == 0xffffff) {
		snprintf(target_name, sizeof(target_name), "rxe");
		return;
	}
	snprintf(target_name, sizeof(target_name), "%s", ibv_get_device_name(dev));
}

/* ---- the commands ------------------------------------------------------------------- */

/* Takes every asynchronous event waiting (the async fd is non-blocking), acknowledging
 * each: the last script's events are not the next one's. */
static void drain_events(void)
{
	struct ibv_async_event ev;
	while (ibv_get_async_event(ctx, &ev) == 0)
		ibv_ack_async_event(&ev);
}

static void reset_all(void)
{
	if (qp)
		ibv_destroy_qp(qp);
	qp = NULL;
	if (cq)
		ibv_destroy_cq(cq);
	cq = NULL;
	for (int i = 0; i < nregions; i++) {
		if (regions[i].mr)
			ibv_dereg_mr(regions[i].mr);
		free(regions[i].buf);
	}
	memset(regions, 0, sizeof(regions));
	nregions = 0;
	if (pd)
		ibv_dealloc_pd(pd);
	pd = NULL;
	drain_events();
}

static int need_pd(void)
{
	if (pd)
		return 0;
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		return verbs_err("ibv_alloc_pd", errno);
	return 0;
}

static int cmd_hello(void)
{
	static const char *const k[] = { NULL };
	char ip[INET_ADDRSTRLEN];
	if (only(k))
		return -1;
	if (roce_v2_ipv4(ip, sizeof(ip)) < 0)
		return err("%s has no IPv4 RoCE v2 GID", ibv_get_device_name(dev));
	rprintf("ok name=%s ip=%s", target_name, ip);
	return 0;
}

static int cmd_reset(void)
{
	static const char *const k[] = { NULL };
	if (only(k))
		return -1;
	reset_all();
	rprintf("ok");
	return 0;
}

static int cmd_mr(void)
{
	static const char *const k[] = { "name", "len", "access", "fill", NULL };
	uint64_t len, fill = 0;
	unsigned access;
	int index_fill = 0;
	if (only(k))
		return -1;
	const char *name = get("name");
	if (!name)
		return err("missing name");
	if (!valid_name(name))
		return err("bad name %.64s (1 to %d of A-Z a-z 0-9 _ - .)", name, MAX_NAME);
	if (region(name))
		return err("mr %s exists", name);
	if (nregions == MAX_MRS)
		return err("too many mrs (%d)", MAX_MRS);
	if (num("len", MAX_MR_LEN, 1, 0, &len))
		return -1;
	size_t total = 0;
	for (int i = 0; i < nregions; i++)
		total += regions[i].len;
	if (len > MAX_MR_LEN - total)
		return err("len=%llu: the regions would exceed %lu MiB together",
			   (unsigned long long)len, MAX_MR_LEN >> 20);
	if (flags("access", get("access"), access_flags, &access))
		return -1;
	const char *f = get("fill");
	if (f && strcmp(f, "index") == 0)
		index_fill = 1;
	else if (f && parse_num(f, 255, &fill))
		return err("bad fill=%.64s (0xNN or index)", f);
	if (need_pd())
		return -1;
	struct region *r = &regions[nregions];
	void *buf = NULL;
	/* Page aligned (atomics need 8); at least one byte, so that len=0 has an address. */
	if (posix_memalign(&buf, 4096, len ? len : 1))
		return err("out of memory for %llu bytes", (unsigned long long)len);
	r->buf = buf;
	for (uint64_t i = 0; i < len; i++)
		r->buf[i] = index_fill ? (uint8_t)i : (uint8_t)fill;
	r->mr = ibv_reg_mr(pd, r->buf, len, (int)access);
	if (!r->mr) {
		int e = errno;
		free(r->buf);
		memset(r, 0, sizeof(*r));
		return verbs_err("ibv_reg_mr", e);
	}
	snprintf(r->name, sizeof(r->name), "%s", name);
	r->len = len;
	nregions++;
	rprintf("ok addr=0x%llx rkey=0x%x lkey=0x%x", (unsigned long long)(uintptr_t)r->buf,
		r->mr->rkey, r->mr->lkey);
	return 0;
}

/* The attributes and mask that take the QP from `from` to `to` (one ibv_modify_qp). */
static int modify_to(enum ibv_qp_state from, enum ibv_qp_state to)
{
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE;
	memset(&a, 0, sizeof(a));
	a.qp_state = to;
	if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
		a.pkey_index = 0;
		a.port_num = 1;
		a.qp_access_flags = qpp.access;
		mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	} else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
		if (!qpp.has_peer)
			return err("RTR needs peer_qpn= and peer_ip= (to qp or modify)");
		if (qpp.sgid_index < 0)
			qpp.sgid_index = roce_v2_ipv4(NULL, 0);
		if (qpp.sgid_index < 0)
			return err("%s has no IPv4 RoCE v2 GID", ibv_get_device_name(dev));
		a.path_mtu = qpp.mtu;
		a.dest_qp_num = qpp.peer_qpn;
		a.rq_psn = qpp.peer_psn;
		a.max_dest_rd_atomic = qpp.max_dest_rd_atomic;
		a.min_rnr_timer = qpp.min_rnr_timer;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = qpp.peer_gid;
		a.ah_attr.grh.sgid_index = (uint8_t)qpp.sgid_index;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.grh.traffic_class = 0;
		a.ah_attr.grh.flow_label = 0;
		a.ah_attr.dlid = 0;
		a.ah_attr.sl = 0;
		a.ah_attr.src_path_bits = 0;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	} else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
		a.timeout = qpp.timeout;
		a.retry_cnt = qpp.retry;
		a.rnr_retry = qpp.rnr_retry;
		a.sq_psn = qpp.psn;
		a.max_rd_atomic = qpp.max_rd_atomic;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	int rc = ibv_modify_qp(qp, &a, mask);
	if (rc) {
		char call[64];
		snprintf(call, sizeof(call), "ibv_modify_qp %s->%s", qp_state_names[from],
			 qp_state_names[to]);
		return verbs_err(call, rc);
	}
	return 0;
}

/* `peer_qpn=` and `peer_ip=` (both or neither) into qpp: the remote QP and its address as
 * an IPv4-mapped GID. */
static int parse_peer(void)
{
	const char *pip = get("peer_ip");
	const char *pq = get("peer_qpn");
	uint64_t peer_qpn;
	struct in_addr in;
	if (!pip && !pq)
		return 0;
	if (!pip || !pq)
		return err("peer_qpn= and peer_ip= go together");
	if (num("peer_qpn", 0xffffff, 1, 0, &peer_qpn))
		return -1;
	if (strchr(pip, ':'))
		return unsupported("peer_ip=%.64s: IPv6 (this agent uses the IPv4 GID)", pip);
	if (inet_pton(AF_INET, pip, &in) != 1)
		return err("bad peer_ip=%.64s", pip);
	memset(&qpp.peer_gid, 0, sizeof(qpp.peer_gid));
	qpp.peer_gid.raw[10] = 0xff;
	qpp.peer_gid.raw[11] = 0xff;
	memcpy(&qpp.peer_gid.raw[12], &in, 4);
	qpp.peer_qpn = (uint32_t)peer_qpn;
	qpp.has_peer = 1;
	return 0;
}

static int cmd_qp(void)
{
	static const char *const k[] = { "mtu",	    "psn",	    "peer_psn",
					 "peer_qpn",	    "peer_ip",	    "access",
					 "max_rd_atomic",   "max_dest_rd_atomic",
					 "timeout",	    "retry",	    "rnr_retry",
					 "min_rnr_timer",   "sq",	    "rq",
					 "state",	    NULL };
	uint64_t mtu, psn, peer_psn, mra, mdra, timeout, retry, rnr, mrt, sq, rq;
	unsigned access;
	enum ibv_qp_state state = IBV_QPS_RTS;
	if (only(k))
		return -1;
	if (qp)
		return err("a qp exists (reset first)");
	if (num("mtu", 4096, 0, 1024, &mtu) || num("psn", 0xffffff, 0, 0, &psn) ||
	    num("peer_psn", 0xffffff, 0, 0, &peer_psn) ||
	    num("max_rd_atomic", 255, 0, 4, &mra) || num("max_dest_rd_atomic", 255, 0, 4, &mdra) ||
	    num("timeout", 31, 0, 14, &timeout) || num("retry", 7, 0, 7, &retry) ||
	    num("rnr_retry", 7, 0, 7, &rnr) || num("min_rnr_timer", 31, 0, 1, &mrt) ||
	    num("sq", MAX_QUEUE, 0, 64, &sq) || num("rq", MAX_QUEUE, 0, 64, &rq))
		return -1;
	enum ibv_mtu m;
	switch (mtu) {
	case 256: m = IBV_MTU_256; break;
	case 512: m = IBV_MTU_512; break;
	case 1024: m = IBV_MTU_1024; break;
	case 2048: m = IBV_MTU_2048; break;
	case 4096: m = IBV_MTU_4096; break;
	default: return err("bad mtu=%llu (256 512 1024 2048 4096)", (unsigned long long)mtu);
	}
	if (sq == 0 || rq == 0)
		return err("sq and rq must be at least 1");
	const char *a = get("access");
	if (!a)
		access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	else if (flags("access", a, access_flags, &access))
		return -1;
	const char *s = get("state");
	if (s && parse_state(s, &state))
		return err("bad state=%.64s", s);
	if (state != IBV_QPS_RESET && state != IBV_QPS_INIT && state != IBV_QPS_RTR &&
	    state != IBV_QPS_RTS)
		return err("bad state=%s (qp takes RESET INIT RTR RTS)", s);
	memset(&qpp, 0, sizeof(qpp));
	if (parse_peer())
		return -1;
	if (!qpp.has_peer && state >= IBV_QPS_RTR)
		return err("state=%s needs peer_qpn= and peer_ip=", qp_state_names[state]);
	qpp.mtu = m;
	qpp.psn = (uint32_t)psn;
	qpp.peer_psn = (uint32_t)peer_psn;
	qpp.access = access;
	qpp.max_rd_atomic = (uint8_t)mra;
	qpp.max_dest_rd_atomic = (uint8_t)mdra;
	qpp.timeout = (uint8_t)timeout;
	qpp.retry = (uint8_t)retry;
	qpp.rnr_retry = (uint8_t)rnr;
	qpp.min_rnr_timer = (uint8_t)mrt;
	qpp.sq = (uint32_t)sq;
	qpp.rq = (uint32_t)rq;
	qpp.sgid_index = roce_v2_ipv4(NULL, 0);

	if (need_pd())
		return -1;
	cq = ibv_create_cq(ctx, (int)(sq + rq), NULL, NULL, 0);
	if (!cq)
		return verbs_err("ibv_create_cq", errno);
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 0;
	ia.cap.max_send_wr = (uint32_t)sq;
	ia.cap.max_recv_wr = (uint32_t)rq;
	ia.cap.max_send_sge = MAX_SGE;
	ia.cap.max_recv_sge = MAX_SGE;
	if (dattr.max_sge > 0 && dattr.max_sge < MAX_SGE)
		ia.cap.max_send_sge = ia.cap.max_recv_sge = (uint32_t)dattr.max_sge;
	/* As much inline data as the device takes, of 256, 64 or none. */
	static const uint32_t inline_sizes[] = { 256, 64, 0 };
	int e = 0;
	for (size_t i = 0; !qp && i < sizeof(inline_sizes) / sizeof(inline_sizes[0]); i++) {
		ia.cap.max_inline_data = inline_sizes[i];
		qp = ibv_create_qp(pd, &ia);
		if (!qp && !e)
			e = errno;
	}
	if (!qp) {
		ibv_destroy_cq(cq);
		cq = NULL;
		return verbs_err("ibv_create_qp", e);
	}
	enum ibv_qp_state at = IBV_QPS_RESET;
	while (at < state) {
		enum ibv_qp_state next = (enum ibv_qp_state)(at + 1);
		if (modify_to(at, next)) {
			ibv_destroy_qp(qp);
			qp = NULL;
			ibv_destroy_cq(cq);
			cq = NULL;
			return -1;
		}
		at = next;
	}
	rprintf("ok qpn=0x%x", qp->qp_num);
	return 0;
}

static int current_state(enum ibv_qp_state *s)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
	if (rc)
		return verbs_err("ibv_query_qp", rc);
	*s = a.qp_state;
	return 0;
}

static int cmd_modify(void)
{
	static const char *const k[] = { "state", "peer_qpn", "peer_ip", NULL };
	enum ibv_qp_state to, from = IBV_QPS_RESET;
	if (only(k))
		return -1;
	const char *s = get("state");
	if (!s)
		return err("missing state");
	if (parse_state(s, &to))
		return err("bad state=%.64s", s);
	if (!qp)
		return err("no qp");
	if (parse_peer())
		return -1;
	if (current_state(&from) || modify_to(from, to))
		return -1;
	rprintf("ok");
	return 0;
}

/* `sge=NAME:OFF:LEN[,...]` into `sg` (each inside its region). */
static int parse_sges(struct ibv_sge *sg, int *n)
{
	char copy[MAX_LINE];
	const char *v = get("sge");
	*n = 0;
	if (!v)
		return 0;
	snprintf(copy, sizeof(copy), "%s", v);
	char *save = NULL;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		char *c1 = strchr(t, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		uint64_t off, len;
		if (!c1 || !c2)
			return err("bad sge %.64s (NAME:OFF:LEN)", t);
		*c1 = *c2 = 0;
		if (parse_num(c1 + 1, UINT32_MAX, &off) || parse_num(c2 + 1, UINT32_MAX, &len))
			return err("bad number in sge %.32s:%.32s:%.32s", t, c1 + 1, c2 + 1);
		struct region *r = region(t);
		if (!r)
			return err("no mr %.64s", t);
		if (off > r->len || len > r->len - off)
			return err("sge %s:%llu:%llu outside the mr (%zu bytes)", t,
				   (unsigned long long)off, (unsigned long long)len, r->len);
		if (*n == MAX_SGE)
			return err("too many sges (%d)", MAX_SGE);
		sg[*n].addr = (uint64_t)(uintptr_t)(r->buf + off);
		sg[*n].length = (uint32_t)len;
		sg[*n].lkey = r->mr->lkey;
		(*n)++;
	}
	return 0;
}

static int cmd_post_recv(void)
{
	static const char *const k[] = { "wr", "sge", NULL };
	struct ibv_sge sg[MAX_SGE];
	struct ibv_recv_wr wr, *bad = NULL;
	uint64_t id;
	int n;
	if (only(k) || num("wr", UINT64_MAX, 1, 0, &id) || parse_sges(sg, &n))
		return -1;
	if (!qp)
		return err("no qp");
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = n ? sg : NULL;
	wr.num_sge = n;
	int rc = ibv_post_recv(qp, &wr, &bad);
	if (rc)
		return verbs_err("ibv_post_recv", rc);
	rprintf("ok");
	return 0;
}

static int cmd_post_send(void)
{
	static const char *const k[] = { "wr",	"op",	   "sge",  "va",  "rkey", "imm",
					 "inv", "compare", "swap", "add", "flags", NULL };
	struct ibv_sge sg[MAX_SGE];
	struct ibv_send_wr wr, *bad = NULL;
	uint64_t id, va = 0, rkey = 0, imm = 0, inv = 0, compare = 0, swap = 0, add = 0;
	unsigned fl;
	int n;
	if (only(k) || num("wr", UINT64_MAX, 1, 0, &id))
		return -1;
	const char *o = get("op");
	if (!o)
		return err("missing op");
	const struct send_op *op = send_ops;
	while (op->name && strcmp(op->name, o) != 0)
		op++;
	if (!op->name)
		return err("bad op=%.64s (SEND SEND_IMM SEND_INV WRITE WRITE_IMM READ CMP_SWAP "
			   "FETCH_ADD)", o);
	int has_imm = op->op == IBV_WR_SEND_WITH_IMM || op->op == IBV_WR_RDMA_WRITE_WITH_IMM;
	if (num("va", UINT64_MAX, op->remote, 0, &va) ||
	    num("rkey", UINT32_MAX, op->remote, 0, &rkey) ||
	    num("imm", UINT32_MAX, 0, 0, &imm) ||
	    num("inv", UINT32_MAX, op->op == IBV_WR_SEND_WITH_INV, 0, &inv) ||
	    num("compare", UINT64_MAX, op->op == IBV_WR_ATOMIC_CMP_AND_SWP, 0, &compare) ||
	    num("swap", UINT64_MAX, op->op == IBV_WR_ATOMIC_CMP_AND_SWP, 0, &swap) ||
	    num("add", UINT64_MAX, op->op == IBV_WR_ATOMIC_FETCH_AND_ADD, 0, &add) ||
	    flags("flags", get("flags"), send_flags, &fl) || parse_sges(sg, &n))
		return -1;
	if (!qp)
		return err("no qp");
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = n ? sg : NULL;
	wr.num_sge = n;
	wr.opcode = op->op;
	wr.send_flags = fl;
	if (has_imm)
		wr.imm_data = htonl((uint32_t)imm);
	if (op->op == IBV_WR_SEND_WITH_INV)
		wr.invalidate_rkey = (uint32_t)inv;
	if (op->atomic) {
		wr.wr.atomic.remote_addr = va;
		wr.wr.atomic.rkey = (uint32_t)rkey;
		wr.wr.atomic.compare_add = op->op == IBV_WR_ATOMIC_CMP_AND_SWP ? compare : add;
		wr.wr.atomic.swap = swap;
	} else if (op->remote) {
		wr.wr.rdma.remote_addr = va;
		wr.wr.rdma.rkey = (uint32_t)rkey;
	}
	int rc = ibv_post_send(qp, &wr, &bad);
	if (rc)
		return verbs_err("ibv_post_send", rc);
	rprintf("ok");
	return 0;
}

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static int cmd_poll(void)
{
	static const char *const k[] = { "ms", NULL };
	uint64_t ms;
	if (only(k) || num("ms", MAX_POLL_MS, 0, 0, &ms))
		return -1;
	if (!cq)
		return err("no qp");
	uint64_t deadline = now_ms() + ms;
	struct ibv_wc wc;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			return verbs_err("ibv_poll_cq", -n);
		if (n == 1)
			break;
		if (now_ms() >= deadline) {
			rprintf("ok none");
			return 0;
		}
		struct timespec nap = { 0, 200 * 1000 };
		nanosleep(&nap, NULL);
	}
	rprintf("ok wr=%llu", (unsigned long long)wc.wr_id);
	if ((unsigned)wc.status < sizeof(status_names) / sizeof(status_names[0]) &&
	    status_names[wc.status])
		rprintf(" status=%s", status_names[wc.status]);
	else
		rprintf(" status=0x%x", (unsigned)wc.status);
	const char *on = wc_opcode_name(wc.opcode);
	if (on)
		rprintf(" op=%s", on);
	else
		rprintf(" op=0x%x", (unsigned)wc.opcode);
	rprintf(" len=%u", wc.byte_len);
	if (wc.wc_flags & IBV_WC_WITH_IMM)
		rprintf(" imm=0x%x", ntohl(wc.imm_data));
	if (wc.wc_flags & IBV_WC_WITH_INV)
		rprintf(" inv=0x%x", wc.invalidated_rkey);
	return 0;
}

static const char *event_name(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_QP_FATAL: return "QP_FATAL";
	case IBV_EVENT_QP_REQ_ERR: return "QP_REQ_ERR";
	case IBV_EVENT_QP_ACCESS_ERR: return "QP_ACCESS_ERR";
	case IBV_EVENT_COMM_EST: return "COMM_EST";
	case IBV_EVENT_SQ_DRAINED: return "SQ_DRAINED";
	case IBV_EVENT_QP_LAST_WQE_REACHED: return "LAST_WQE_REACHED";
	case IBV_EVENT_CQ_ERR: return "CQ_ERR";
	case IBV_EVENT_PORT_ACTIVE: return "PORT_ACTIVE";
	case IBV_EVENT_PORT_ERR: return "PORT_ERR";
	default: return NULL;
	}
}

/* event ms=T: the next asynchronous event within T ms (ibv_get_async_event on the
 * non-blocking async fd, woken by poll), or `ok none`. */
static int cmd_event(void)
{
	static const char *const k[] = { "ms", NULL };
	uint64_t ms;
	if (only(k) || num("ms", MAX_POLL_MS, 0, 0, &ms))
		return -1;
	uint64_t deadline = now_ms() + ms;
	struct ibv_async_event ev;
	while (ibv_get_async_event(ctx, &ev) != 0) {
		uint64_t now = now_ms();
		if (now >= deadline) {
			rprintf("ok none");
			return 0;
		}
		struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
		if (poll(&p, 1, (int)(deadline - now)) < 0 && errno != EINTR)
			return verbs_err("poll", errno);
	}
	enum ibv_event_type t = ev.event_type;
	ibv_ack_async_event(&ev);
	const char *n = event_name(t);
	if (n)
		rprintf("ok event=%s", n);
	else
		rprintf("ok event=0x%x", (unsigned)t);
	return 0;
}

static int cmd_state(void)
{
	static const char *const k[] = { NULL };
	enum ibv_qp_state s = IBV_QPS_RESET;
	if (only(k))
		return -1;
	if (!qp)
		return err("no qp");
	if (current_state(&s))
		return -1;
	if ((unsigned)s <= IBV_QPS_ERR)
		rprintf("ok state=%s", qp_state_names[s]);
	else
		rprintf("ok state=0x%x", (unsigned)s);
	return 0;
}

static int cmd_read(void)
{
	static const char *const k[] = { "name", "off", "len", NULL };
	uint64_t off, len;
	if (only(k) || num("off", UINT64_MAX, 0, 0, &off) || num("len", MAX_READ, 1, 0, &len))
		return -1;
	const char *name = get("name");
	if (!name)
		return err("missing name");
	struct region *r = region(name);
	if (!r)
		return err("no mr %.64s", name);
	if (off > r->len || len > r->len - off)
		return err("off=%llu len=%llu outside mr %s (%zu bytes)", (unsigned long long)off,
			   (unsigned long long)len, r->name, r->len);
	static const char hex[] = "0123456789abcdef";
	rprintf("ok hex=");
	rgrow(2 * len);
	/* The peer may be writing into it now: a volatile snapshot, byte by byte. */
	const volatile uint8_t *p = r->buf + off;
	for (uint64_t i = 0; i < len; i++) {
		uint8_t b = p[i];
		rbuf[rlen++] = hex[b >> 4];
		rbuf[rlen++] = hex[b & 15];
	}
	rbuf[rlen] = 0;
	return 0;
}

/* Splits `line` in place into the command and its key=value arguments, then runs it. */
static void handle(char *line)
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
		{ "event", cmd_event },
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (strcmp(cmd, cmds[i].name) == 0) {
			cmds[i].fn();
			return;
		}
	err("unknown command %.64s", cmd);
}

/* ---- the connection ----------------------------------------------------------------- */

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int reply(int fd)
{
	rgrow(1);
	rbuf[rlen++] = '\n';
	return write_all(fd, rbuf, rlen);
}

static void serve(int fd)
{
	static char in[MAX_LINE + 1];
	size_t have = 0;
	int discarding = 0;
	for (;;) {
		ssize_t r = recv(fd, in + have, MAX_LINE - have, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return;
		have += (size_t)r;
		for (;;) {
			char *nl = memchr(in, '\n', have);
			if (!nl) {
				if (have == MAX_LINE) {
					/* A line too long: answered once, then skipped. */
					if (!discarding) {
						err("line too long (at most %d bytes)", MAX_LINE - 1);
						if (reply(fd))
							return;
					}
					discarding = 1;
					have = 0;
				}
				break;
			}
			*nl = 0;
			size_t used = (size_t)(nl - in) + 1;
			if (discarding) {
				discarding = 0;
			} else {
				if (memchr(in, 0, (size_t)(nl - in))) {
					err("NUL byte in the request");
				} else {
					if (nl > in && nl[-1] == '\r')
						nl[-1] = 0;
					handle(in);
				}
				if (reply(fd))
					return;
			}
			memmove(in, in + used, have - used);
			have -= used;
		}
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: agent [-d DEVICE] [-p PORT] [-l ADDR]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *want = NULL, *listen_addr = NULL;
	uint64_t port = DEFAULT_PORT;
	int c;
	while ((c = getopt(argc, argv, "d:p:l:h")) != -1) {
		switch (c) {
		case 'd': want = optarg; break;
		case 'p':
			if (parse_num(optarg, 65535, &port))
				usage();
			break;
		case 'l': listen_addr = optarg; break;
		default: usage();
		}
	}
	if (optind != argc)
		usage();
	signal(SIGPIPE, SIG_IGN);

	int ndev = 0;
	struct ibv_device **list = ibv_get_device_list(&ndev);
	if (!list || ndev == 0) {
		fprintf(stderr, "agent: no RDMA devices\n");
		return 1;
	}
	for (int i = 0; i < ndev && !dev; i++)
		if (!want || strcmp(ibv_get_device_name(list[i]), want) == 0)
			dev = list[i];
	if (!dev) {
		fprintf(stderr, "agent: no device %s\n", want);
		return 1;
	}
	ctx = ibv_open_device(dev);
	if (!ctx) {
		fprintf(stderr, "agent: ibv_open_device %s: %s\n", ibv_get_device_name(dev),
			strerror(errno));
		return 1;
	}
	if (ibv_query_device(ctx, &dattr)) {
		fprintf(stderr, "agent: ibv_query_device: %s\n", strerror(errno));
		return 1;
	}
	find_target_name();
	/* `event` waits in poll(); ibv_get_async_event must then never block. */
	int fl = fcntl(ctx->async_fd, F_GETFL);
	if (fl < 0 || fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		fprintf(stderr, "agent: async fd O_NONBLOCK: %s\n", strerror(errno));
		return 1;
	}

	int ls = socket(AF_INET, SOCK_STREAM, 0);
	if (ls < 0) {
		perror("agent: socket");
		return 1;
	}
	int one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	if (listen_addr && inet_pton(AF_INET, listen_addr, &sa.sin_addr) != 1)
		usage();
	if (bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 4)) {
		perror("agent: bind/listen");
		return 1;
	}
	socklen_t sl = sizeof(sa);
	getsockname(ls, (struct sockaddr *)&sa, &sl);
	char ip[INET_ADDRSTRLEN] = "none";
	int gi = roce_v2_ipv4(ip, sizeof(ip));
	printf("agent: listening on port %u (device %s, %s, GID index %d, ip %s)\n",
	       ntohs(sa.sin_port), ibv_get_device_name(dev), target_name, gi, ip);
	fflush(stdout);

	for (;;) {
		int fd = accept(ls, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE ||
			    errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				struct timespec nap = { 0, 10 * 1000 * 1000 };
				nanosleep(&nap, NULL);
				continue;
			}
			perror("agent: accept");
			return 1;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		serve(fd);
		close(fd);
		/* Nothing is kept between connections. */
		reset_all();
	}
}
