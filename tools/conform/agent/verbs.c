/* The agent's commands other than the QP's own (those are in qp.c): hello, reset, mr,
 * post_recv, post_send, poll, event and read. This file keeps the current script's objects
 * (the protection domain, the regions, the CQ and QP that qp.c creates); reset_all() frees
 * them. */
#define _GNU_SOURCE
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the current script's objects --------------------------------------------------- */

struct region {
	char name[MAX_NAME + 1];
	uint8_t *buf;
	size_t len;
	struct ibv_mr *mr;
};

struct ibv_pd *pd;
struct ibv_cq *cq;
struct ibv_qp *qp;
struct ibv_qp *qps[MAX_QPS];
int nqps;
struct ibv_srq *srq;
struct ibv_ah *ah;
static struct region regions[MAX_MRS];
static int nregions;

static struct region *region(const char *name)
{
	for (int i = 0; i < nregions; i++)
		if (strcmp(regions[i].name, name) == 0)
			return &regions[i];
	return NULL;
}

const struct flag access_flags[] = {
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

/* ---- the commands ------------------------------------------------------------------- */

/* Takes every asynchronous event waiting (the async fd is non-blocking), acknowledging
 * each: the last script's events are not the next one's. */
static void drain_events(void)
{
	struct ibv_async_event ev;
	while (ibv_get_async_event(ctx, &ev) == 0)
		ibv_ack_async_event(&ev);
}

void reset_all(void)
{
	cm_reset();
	for (int i = 0; i < nqps; i++)
		ibv_destroy_qp(qps[i]);
	memset(qps, 0, sizeof(qps));
	nqps = 0;
	qp = NULL;
	if (ah)
		ibv_destroy_ah(ah);
	ah = NULL;
	if (srq)
		ibv_destroy_srq(srq);
	srq = NULL;
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

int need_pd(void)
{
	if (pd)
		return 0;
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		return verbs_err("ibv_alloc_pd", errno);
	return 0;
}

int cmd_hello(void)
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

int cmd_reset(void)
{
	static const char *const k[] = { NULL };
	if (only(k))
		return -1;
	reset_all();
	rprintf("ok");
	return 0;
}

int cmd_mr(void)
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

/* `sge=NAME:OFF:LEN[,...]` into `sg`. An SGE may reach outside its region: the NIC checks
 * it against the region (that is how scripts provoke a local protection error), and it
 * reads the memory only through the region. Inline data is the exception: the library
 * copies it from the address itself, so with `inside` each SGE must lie in its region. */
int parse_sges(struct ibv_sge *sg, int *n, int inside)
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
		if (inside && (off > r->len || len > r->len - off))
			return err("inline sge %s:%llu:%llu outside the mr (%zu bytes)", t,
				   (unsigned long long)off, (unsigned long long)len, r->len);
		if (*n == MAX_SGE)
			return err("too many sges (%d)", MAX_SGE);
		sg[*n].addr = (uint64_t)(uintptr_t)r->buf + off;
		sg[*n].length = (uint32_t)len;
		sg[*n].lkey = r->mr->lkey;
		(*n)++;
	}
	return 0;
}

int cmd_post_recv(void)
{
	static const char *const k[] = { "wr", "sge", NULL };
	struct ibv_sge sg[MAX_SGE];
	struct ibv_recv_wr wr, *bad = NULL;
	uint64_t id;
	int n;
	if (only(k) || num("wr", UINT64_MAX, 1, 0, &id) || parse_sges(sg, &n, 0))
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

int cmd_post_send(void)
{
	static const char *const k[] = { "wr",	 "op",	 "sge",	 "va",	 "rkey",
					 "imm",	 "inv",	 "compare", "swap", "add",
					 "flags", "qkey", "qpn",  NULL };
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
	    flags("flags", get("flags"), send_flags, &fl) ||
	    parse_sges(sg, &n, (fl & IBV_SEND_INLINE) != 0))
		return -1;
	if (!qp)
		return err("no qp");
	memset(&wr, 0, sizeof(wr));
	if (qp->qp_type == IBV_QPT_UD) {
		/* UD: the peer (the qp line's peer_ip) through an address handle; its QPN and
		 * Q_Key unless the request names others (`qpn=`, `qkey=`: the WR's remote Q_Key,
		 * the QP's own by default). */
		uint64_t rq, qk;
		if (num("qpn", 0xffffff, 0, qp_peer_qpn(), &rq) ||
		    num("qkey", UINT32_MAX, 0, qp_qkey(), &qk))
			return -1;
		if (op->op != IBV_WR_SEND && op->op != IBV_WR_SEND_WITH_IMM)
			return unsupported("op=%s on a UD QP (SEND and SEND_IMM only)", op->name);
		wr.wr.ud.ah = qp_ah();
		if (!wr.wr.ud.ah)
			return -1;
		wr.wr.ud.remote_qpn = (uint32_t)rq;
		wr.wr.ud.remote_qkey = (uint32_t)qk;
	}
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

int cmd_poll(void)
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
	rprintf(" len=%u qpn=0x%x", wc.byte_len, wc.qp_num);
	for (int i = 0; i < nqps; i++)
		if (qps[i]->qp_num == wc.qp_num && qps[i]->qp_type == IBV_QPT_UD)
			rprintf(" src_qp=0x%x", wc.src_qp);
	if (wc.wc_flags & IBV_WC_GRH)
		rprintf(" grh");
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
	case IBV_EVENT_SRQ_LIMIT_REACHED: return "SRQ_LIMIT_REACHED";
	case IBV_EVENT_SRQ_ERR: return "SRQ_ERR";
	default: return NULL;
	}
}

/* event ms=T: the next asynchronous event within T ms (ibv_get_async_event on the
 * non-blocking async fd, woken by poll), or `ok none`. */
int cmd_event(void)
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

int cmd_read(void)
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
