/* The shared receive queue's commands (srq, modify_srq, post_srq_recv) and the port's
 * counters (port). One SRQ per script, made before the QPs that use it (`qp ... srq=1`);
 * reset_all() in verbs.c destroys it after them. */
#define _GNU_SOURCE
#include "agent.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* srq max_wr=N limit=M: ibv_create_srq, then the limit armed (0: not armed). */
int cmd_srq(void)
{
	static const char *const k[] = { "max_wr", "limit", NULL };
	uint64_t max_wr, limit;
	if (only(k) || num("max_wr", MAX_QUEUE, 1, 0, &max_wr) ||
	    num("limit", MAX_QUEUE, 0, 0, &limit))
		return -1;
	if (srq)
		return err("an srq exists (reset first)");
	if (max_wr == 0)
		return err("max_wr must be at least 1");
	if (need_pd())
		return -1;
	struct ibv_srq_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.attr.max_wr = (uint32_t)max_wr;
	ia.attr.max_sge = MAX_SGE;
	if (dattr.max_srq_sge > 0 && dattr.max_srq_sge < MAX_SGE)
		ia.attr.max_sge = (uint32_t)dattr.max_srq_sge;
	srq = ibv_create_srq(pd, &ia);
	if (!srq && (errno == EOPNOTSUPP || errno == ENOSYS))
		return unsupported("ibv_create_srq: %s", strerror(errno));
	if (!srq)
		return verbs_err("ibv_create_srq", errno);
	if (limit) {
		struct ibv_srq_attr a;
		memset(&a, 0, sizeof(a));
		a.srq_limit = (uint32_t)limit;
		int rc = ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT);
		if (rc)
			return verbs_err("ibv_modify_srq", rc);
	}
	rprintf("ok");
	return 0;
}

/* modify_srq limit=M: arms the limit again (the event is one-shot, IBA 10.2.9.2). */
int cmd_modify_srq(void)
{
	static const char *const k[] = { "limit", NULL };
	uint64_t limit;
	if (only(k) || num("limit", MAX_QUEUE, 1, 0, &limit))
		return -1;
	if (!srq)
		return err("no srq");
	struct ibv_srq_attr a;
	memset(&a, 0, sizeof(a));
	a.srq_limit = (uint32_t)limit;
	int rc = ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT);
	if (rc)
		return verbs_err("ibv_modify_srq", rc);
	rprintf("ok");
	return 0;
}

int cmd_post_srq_recv(void)
{
	static const char *const k[] = { "wr", "sge", NULL };
	struct ibv_sge sg[MAX_SGE];
	struct ibv_recv_wr wr, *bad = NULL;
	uint64_t id;
	int n;
	if (only(k) || num("wr", UINT64_MAX, 1, 0, &id) || parse_sges(sg, &n, 0))
		return -1;
	if (!srq)
		return err("no srq");
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = n ? sg : NULL;
	wr.num_sge = n;
	int rc = ibv_post_srq_recv(srq, &wr, &bad);
	if (rc)
		return verbs_err("ibv_post_srq_recv", rc);
	rprintf("ok");
	return 0;
}

/* port: ibv_query_port's Q_Key and P_Key violation counters (PortInfo's, IBA 14.2.5.6). */
int cmd_port(void)
{
	static const char *const k[] = { NULL };
	if (only(k))
		return -1;
	struct ibv_port_attr pa;
	memset(&pa, 0, sizeof(pa));
	int rc = ibv_query_port(ctx, 1, &pa);
	if (rc)
		return verbs_err("ibv_query_port", rc);
	rprintf("ok qkey_viol=%u bad_pkey=%u", pa.qkey_viol_cntr, pa.bad_pkey_cntr);
	return 0;
}
