/* Shared receive queues through the drop-in, from C: the device's SRQ limits, two RC QPs
 * receiving through one SRQ (ibv_create_srq, ibv_post_srq_recv), ibv_post_recv refused on
 * a QP on an SRQ (EINVAL), the limit event (IBV_EVENT_SRQ_LIMIT_REACHED) delivered once
 * through ibv_get_async_event with element.srq right, again only after re-arming
 * (ibv_modify_srq IBV_SRQ_LIMIT), ibv_destroy_srq refused (EBUSY) while a QP uses it,
 * IBV_EVENT_QP_LAST_WQE_REACHED with element.qp right when a QP on the SRQ goes to ERR,
 * ibv_create_srq_ex (basic: yes; XRC: EOPNOTSUPP) and ibv_create_qp_ex on an SRQ. Prints
 * "PASS <step>" per step; any failure exits 1 naming it. tests/abi_srq.rs runs it. */
#include <infiniband/verbs.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

enum { NQ = 2, SLOT = 256 };

static struct ibv_cq *cq;
static struct ibv_srq *srq;
static struct ibv_qp *snd[NQ], *rcv[NQ];
static struct ibv_mr *mr;
static char buf[64 * SLOT];

static struct ibv_qp *rc_qp(struct ibv_srq *s)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .srq = s, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			.max_recv_sge = 1},
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	CHECK(qp, "ibv_create_qp (srq %p)", (void *)s);
	return qp;
}

/* The next async event, waiting at most 2 s on the O_NONBLOCK async fd; 0 if none. */
static int next_event(struct ibv_async_event *ev)
{
	double end = now() + 2;
	while (now() < end) {
		if (!ibv_get_async_event(ctx, ev))
			return 1;
		CHECK(errno == EAGAIN, "ibv_get_async_event");
		/* Let the NIC run (the responder raises the event). */
		struct ibv_wc wc;
		CHECK(ibv_poll_cq(cq, 0, &wc) == 0, "poll");
	}
	return 0;
}

static void no_event(const char *when)
{
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(ctx, &ev) == -1 && errno == EAGAIN, "an event %s: type %d",
	      when, ev.event_type);
}

/* One SEND from sender `i` to its receiver; both completions. */
static void send_one(int i, uint64_t id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 32, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad;
	CHECK(!ibv_post_send(snd[i], &wr, &bad), "post_send");
	int got_send = 0, got_recv = 0;
	while (!got_send || !got_recv) {
		struct ibv_wc wc = next_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS, "wc %llu status %d",
		      (unsigned long long)wc.wr_id, wc.status);
		if (wc.opcode == IBV_WC_SEND) {
			got_send = 1;
		} else {
			CHECK(wc.opcode == IBV_WC_RECV && wc.qp_num == rcv[i]->qp_num,
			      "receive on QP %#x, wanted %#x", wc.qp_num, rcv[i]->qp_num);
			CHECK(wc.byte_len == 32, "byte_len %u", wc.byte_len);
			got_recv = 1;
		}
	}
}

static void post_srq(int n)
{
	static uint64_t next = 1000;
	for (int k = 0; k < n; k++) {
		struct ibv_sge sge = {.addr = (uintptr_t)buf + SLOT * (next % 64),
				      .length = SLOT, .lkey = mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = next++, .sg_list = &sge, .num_sge = 1};
		struct ibv_recv_wr *bad;
		CHECK(!ibv_post_srq_recv(srq, &wr, &bad), "ibv_post_srq_recv");
	}
}

static void device_limits(void)
{
	struct ibv_device_attr a;
	CHECK(!ibv_query_device(ctx, &a), "query_device");
	CHECK(a.max_srq > 0 && a.max_srq_wr > 0 && a.max_srq_sge > 0,
	      "max_srq %d max_srq_wr %d max_srq_sge %d", a.max_srq, a.max_srq_wr,
	      a.max_srq_sge);
	printf("PASS device max_srq %d max_srq_wr %d max_srq_sge %d\n", a.max_srq,
	       a.max_srq_wr, a.max_srq_sge);
}

static void setup(void)
{
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(cq, "create_cq");
	mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr");
	struct ibv_srq_init_attr sa = {.srq_context = &sa, .attr = {.max_wr = 16, .max_sge = 1}};
	srq = ibv_create_srq(pd, &sa);
	CHECK(srq, "ibv_create_srq");
	CHECK(srq->context == ctx && srq->pd == pd, "srq fields");
	struct ibv_srq_attr q;
	CHECK(!ibv_query_srq(srq, &q), "query_srq");
	CHECK(q.max_wr >= 16 && q.max_sge >= 1 && q.srq_limit == 0, "query_srq %u %u %u",
	      q.max_wr, q.max_sge, q.srq_limit);
	for (int i = 0; i < NQ; i++) {
		snd[i] = rc_qp(NULL);
		rcv[i] = rc_qp(srq);
		CHECK(rcv[i]->srq == srq, "qp->srq");
	}
	for (int i = 0; i < NQ; i++) {
		connect_qp(snd[i], rcv[i]->qp_num);
		connect_qp(rcv[i], snd[i]->qp_num);
	}
	/* A QP on an SRQ has no receive queue of its own. */
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = SLOT, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad = NULL;
	errno = 0;
	CHECK(ibv_post_recv(rcv[0], &wr, &bad) == EINVAL && bad == &wr,
	      "post_recv on a QP on an SRQ");
	/* The async fd made non-blocking, as UCX does. */
	int fl = fcntl(ctx->async_fd, F_GETFL);
	CHECK(fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK");
	printf("PASS setup: %d QPs on one SRQ\n", NQ);
}

static void limit_event(void)
{
	post_srq(8);
	struct ibv_srq_attr a = {.srq_limit = 17};
	CHECK(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT) == EINVAL, "limit above max_wr");
	a.srq_limit = 6;
	CHECK(!ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), "arm the limit at 6");
	send_one(0, 1);
	send_one(1, 2); /* 6 left: not below 6 */
	no_event("with 6 WQEs left");
	send_one(0, 3); /* 5 left: below */
	struct ibv_async_event ev;
	CHECK(next_event(&ev), "no limit event");
	CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
	      "event %d (%s), srq %p", ev.event_type, ibv_event_type_str(ev.event_type),
	      (void *)ev.element.srq);
	ibv_ack_async_event(&ev);
	struct ibv_srq_attr q;
	CHECK(!ibv_query_srq(srq, &q) && q.srq_limit == 0, "limit after the event: %u",
	      q.srq_limit);
	send_one(1, 4); /* 4 left: disarmed, nothing */
	no_event("after the one-shot limit fired");
	a.srq_limit = 4;
	CHECK(!ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), "re-arm at 4");
	send_one(0, 5); /* 3 left: fires again */
	CHECK(next_event(&ev), "no limit event after re-arming");
	CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
	      "second event %d", ev.event_type);
	ibv_ack_async_event(&ev);
	no_event("after the second limit event");
	printf("PASS limit event: once, and again only after re-arming\n");
}

static void in_use_and_last_wqe(void)
{
	CHECK(ibv_destroy_srq(srq) == EBUSY, "destroy_srq while in use");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	CHECK(!ibv_modify_qp(rcv[1], &a, IBV_QP_STATE), "to ERR");
	struct ibv_async_event ev;
	CHECK(next_event(&ev), "no last WQE event");
	CHECK(ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == rcv[1],
	      "event %d (%s), qp %p", ev.event_type, ibv_event_type_str(ev.event_type),
	      (void *)ev.element.qp);
	ibv_ack_async_event(&ev);
	/* The SRQ's WQEs were not flushed: QP 0 still receives. */
	send_one(0, 6);
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "a flushed completion");
	printf("PASS destroy refused while in use; QP_LAST_WQE_REACHED on ERR\n");
}

static void extended(void)
{
	struct ibv_srq_init_attr_ex x = {
		.attr = {.max_wr = 4, .max_sge = 1},
		.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE,
		.srq_type = IBV_SRQT_XRC,
		.pd = pd,
		.cq = cq,
	};
	errno = 0;
	CHECK(!ibv_create_srq_ex(ctx, &x) && errno == EOPNOTSUPP, "an XRC SRQ");
	x.srq_type = IBV_SRQT_BASIC;
	x.comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
	struct ibv_srq *s = ibv_create_srq_ex(ctx, &x);
	CHECK(s, "a basic SRQ through ibv_create_srq_ex");
	struct ibv_qp_init_attr_ex qx = {
		.send_cq = cq, .recv_cq = cq, .srq = s, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 4, .max_send_sge = 1},
		.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &qx);
	CHECK(qp && qp->srq == s, "ibv_create_qp_ex on an SRQ");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(!ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi) && qi.srq == s, "query_qp srq");
	CHECK(ibv_destroy_srq(s) == EBUSY, "destroy_srq in use");
	CHECK(!ibv_destroy_qp(qp), "destroy qp");
	CHECK(!ibv_destroy_srq(s), "destroy_srq");
	printf("PASS ibv_create_srq_ex: basic yes, XRC EOPNOTSUPP; ibv_create_qp_ex on an SRQ\n");
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "ibv_get_device_list: %d", n);
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");
	CHECK(!ibv_query_gid(ctx, 1, GIDX, &gid), "ibv_query_gid");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	device_limits();
	setup();
	limit_event();
	in_use_and_last_wqe();
	extended();
	for (int i = 0; i < NQ; i++) {
		CHECK(!ibv_destroy_qp(snd[i]) && !ibv_destroy_qp(rcv[i]), "destroy qps");
	}
	CHECK(!ibv_destroy_srq(srq), "destroy_srq");
	CHECK(!ibv_dereg_mr(mr) && !ibv_destroy_cq(cq), "dereg, destroy cq");
	CHECK(!ibv_dealloc_pd(pd), "dealloc_pd");
	CHECK(!ibv_close_device(ctx), "close");
	ibv_free_device_list(list);
	printf("PASS teardown\n");
	return 0;
}
