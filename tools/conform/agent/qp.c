/* The QP's commands: qp (the CQ, then an RC, UC or UD QP, taken up to the state asked;
 * up to MAX_QPS of them, on one CQ, optionally on the SRQ), modify (one transition of the
 * first QP, with the attributes `qp` left for it) and state. */
#define _GNU_SOURCE
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- the QP's parameters, kept from `qp` for the transitions ------------------------ */

struct qp_params {
	enum ibv_qp_type type;
	uint32_t qkey;
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

static struct qp_params qpps[MAX_QPS];
#define qpp (qpps[0])

uint32_t qp_peer_qpn(void) { return qpps[0].peer_qpn; }
uint32_t qp_qkey(void) { return qpps[0].qkey; }

/* The address handle of UD sends: the peer's GID from the `qp` line, made on first use. */
struct ibv_ah *qp_ah(void)
{
	if (ah)
		return ah;
	if (!qpp.has_peer || qpp.sgid_index < 0) {
		err("a UD send needs the qp line's peer_ip= and an IPv4 RoCE v2 GID");
		return NULL;
	}
	struct ibv_ah_attr a;
	memset(&a, 0, sizeof(a));
	a.is_global = 1;
	a.grh.dgid = qpp.peer_gid;
	a.grh.sgid_index = (uint8_t)qpp.sgid_index;
	a.grh.hop_limit = 64;
	a.port_num = 1;
	ah = ibv_create_ah(pd, &a);
	if (!ah && (errno == EOPNOTSUPP || errno == ENOSYS))
		unsupported("ibv_create_ah: %s", strerror(errno));
	else if (!ah)
		verbs_err("ibv_create_ah", errno);
	return ah;
}

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

/* ---- the commands ------------------------------------------------------------------- */

/* The attributes and mask that take QP `q` (parameters `pp`) from `from` to `to` (one
 * ibv_modify_qp). Each type gets the attributes the IBA's table of QP attributes (and
 * the kernel's ib_modify_qp_is_ok) requires and allows for it: UD takes a Q_Key and no
 * path; UC a path but no RDMA-read or retry attributes. */
static int modify_qp_to(struct ibv_qp *q, struct qp_params *pp, enum ibv_qp_state from,
			enum ibv_qp_state to)
{
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE;
	memset(&a, 0, sizeof(a));
	a.qp_state = to;
	if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
		a.pkey_index = 0;
		a.port_num = 1;
		mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		if (pp->type == IBV_QPT_UD) {
			a.qkey = pp->qkey;
			mask |= IBV_QP_QKEY;
		} else {
			a.qp_access_flags = pp->access;
			mask |= IBV_QP_ACCESS_FLAGS;
		}
	} else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR && pp->type == IBV_QPT_UD) {
		/* nothing but the state */
	} else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS && pp->type != IBV_QPT_RC) {
		a.sq_psn = pp->psn;
		mask |= IBV_QP_SQ_PSN;
	} else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
		if (!pp->has_peer)
			return err("RTR needs peer_qpn= and peer_ip= (to qp or modify)");
		if (pp->sgid_index < 0)
			pp->sgid_index = roce_v2_ipv4(NULL, 0);
		if (pp->sgid_index < 0)
			return err("%s has no IPv4 RoCE v2 GID", ibv_get_device_name(dev));
		a.path_mtu = pp->mtu;
		a.dest_qp_num = pp->peer_qpn;
		a.rq_psn = pp->peer_psn;
		a.max_dest_rd_atomic = pp->max_dest_rd_atomic;
		a.min_rnr_timer = pp->min_rnr_timer;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = pp->peer_gid;
		a.ah_attr.grh.sgid_index = (uint8_t)pp->sgid_index;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.grh.traffic_class = 0;
		a.ah_attr.grh.flow_label = 0;
		a.ah_attr.dlid = 0;
		a.ah_attr.sl = 0;
		a.ah_attr.src_path_bits = 0;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (pp->type == IBV_QPT_RC)
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	} else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
		a.timeout = pp->timeout;
		a.retry_cnt = pp->retry;
		a.rnr_retry = pp->rnr_retry;
		a.sq_psn = pp->psn;
		a.max_rd_atomic = pp->max_rd_atomic;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	int rc = ibv_modify_qp(q, &a, mask);
	if (rc) {
		char call[64];
		snprintf(call, sizeof(call), "ibv_modify_qp %s->%s", qp_state_names[from],
			 qp_state_names[to]);
		return verbs_err(call, rc);
	}
	return 0;
}

static int modify_to(enum ibv_qp_state from, enum ibv_qp_state to)
{
	return modify_qp_to(qp, &qpp, from, to);
}

/* `peer_qpn=` and `peer_ip=` (both or neither) into *pp: the remote QP and its address as
 * an IPv4-mapped GID. */
static int parse_peer(struct qp_params *pp)
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
	memset(&pp->peer_gid, 0, sizeof(pp->peer_gid));
	pp->peer_gid.raw[10] = 0xff;
	pp->peer_gid.raw[11] = 0xff;
	memcpy(&pp->peer_gid.raw[12], &in, 4);
	pp->peer_qpn = (uint32_t)peer_qpn;
	pp->has_peer = 1;
	return 0;
}

int cmd_qp(void)
{
	static const char *const k[] = { "mtu",	    "psn",	    "peer_psn",
					 "peer_qpn",	    "peer_ip",	    "access",
					 "max_rd_atomic",   "max_dest_rd_atomic",
					 "timeout",	    "retry",	    "rnr_retry",
					 "min_rnr_timer",   "sq",	    "rq",
					 "state",	    "type",	    "qkey",
					 "srq",		    NULL };
	uint64_t mtu, psn, peer_psn, mra, mdra, timeout, retry, rnr, mrt, sq, rq, qkey, on_srq;
	enum ibv_qp_type type = IBV_QPT_RC;
	struct qp_params np;
	unsigned access;
	enum ibv_qp_state state = IBV_QPS_RTS;
	if (only(k))
		return -1;
	if (nqps == MAX_QPS)
		return err("%d qps exist (reset first)", MAX_QPS);
	if (num("mtu", 4096, 0, 1024, &mtu) || num("psn", 0xffffff, 0, 0, &psn) ||
	    num("peer_psn", 0xffffff, 0, 0, &peer_psn) ||
	    num("max_rd_atomic", 255, 0, 4, &mra) || num("max_dest_rd_atomic", 255, 0, 4, &mdra) ||
	    num("timeout", 31, 0, 14, &timeout) || num("retry", 7, 0, 7, &retry) ||
	    num("rnr_retry", 7, 0, 7, &rnr) || num("min_rnr_timer", 31, 0, 1, &mrt) ||
	    num("sq", MAX_QUEUE, 0, 64, &sq) || num("rq", MAX_QUEUE, 0, 64, &rq) ||
	    num("qkey", UINT32_MAX, 0, 0, &qkey) || num("srq", 1, 0, 0, &on_srq))
		return -1;
	const char *t = get("type");
	if (t && strcmp(t, "uc") == 0)
		type = IBV_QPT_UC;
	else if (t && strcmp(t, "ud") == 0)
		type = IBV_QPT_UD;
	else if (t && strcmp(t, "rc") != 0)
		return err("bad type=%.16s (rc uc ud)", t);
	if (on_srq && !srq)
		return err("srq=1 needs an srq first");
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
	memset(&np, 0, sizeof(np));
#undef qpp
#define qpp np
	if (parse_peer(&np))
		return -1;
	if (!qpp.has_peer && state >= IBV_QPS_RTR && type != IBV_QPT_UD)
		return err("state=%s needs peer_qpn= and peer_ip=", qp_state_names[state]);
	qpp.type = type;
	qpp.qkey = (uint32_t)qkey;
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
	/* One CQ for every QP of the script, as deep as four QPs of the first one's size. */
	if (!cq)
		cq = ibv_create_cq(ctx, (int)(sq + rq) * MAX_QPS, NULL, NULL, 0);
	if (!cq)
		return verbs_err("ibv_create_cq", errno);
	struct ibv_qp_init_attr ia;
	struct ibv_qp *nq = NULL;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = type;
	if (on_srq)
		ia.srq = srq;
	ia.sq_sig_all = 0;
	ia.cap.max_send_wr = (uint32_t)sq;
	ia.cap.max_recv_wr = (uint32_t)rq;
	ia.cap.max_send_sge = MAX_SGE;
	ia.cap.max_recv_sge = MAX_SGE;
	if (dattr.max_sge > 0 && dattr.max_sge < MAX_SGE)
		ia.cap.max_send_sge = ia.cap.max_recv_sge = (uint32_t)dattr.max_sge;
	if (on_srq)
		ia.cap.max_recv_wr = 0; /* the receives are the SRQ's */
	/* As much inline data as the device takes, of 256, 64 or none. */
	static const uint32_t inline_sizes[] = { 256, 64, 0 };
	int e = 0;
	for (size_t i = 0; !nq && i < sizeof(inline_sizes) / sizeof(inline_sizes[0]); i++) {
		ia.cap.max_inline_data = inline_sizes[i];
		nq = ibv_create_qp(pd, &ia);
		if (!nq && !e)
			e = errno;
	}
	if (!nq && (e == EOPNOTSUPP || e == ENOSYS))
		return unsupported("ibv_create_qp (type %s%s): %s", t ? t : "rc",
				   on_srq ? ", on an SRQ" : "", strerror(e));
	if (!nq)
		return verbs_err("ibv_create_qp", e);
	enum ibv_qp_state at = IBV_QPS_RESET;
	while (at < state) {
		enum ibv_qp_state next = (enum ibv_qp_state)(at + 1);
		if (modify_qp_to(nq, &np, at, next)) {
			ibv_destroy_qp(nq);
			return -1;
		}
		at = next;
	}
#undef qpp
#define qpp (qpps[0])
	qpps[nqps] = np;
	qps[nqps++] = nq;
	qp = qps[0];
	rprintf("ok qpn=0x%x", nq->qp_num);
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

int cmd_modify(void)
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
	if (parse_peer(&qpp))
		return -1;
	if (current_state(&from) || modify_to(from, to))
		return -1;
	rprintf("ok");
	return 0;
}

int cmd_state(void)
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
