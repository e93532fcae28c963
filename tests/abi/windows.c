/* Memory windows, ibv_rereg_mr and ibv_resize_cq through the drop-in, as a program uses
 * them: the device reports windows as rxe does; a type 1 window bound with ibv_bind_mw and
 * a type 2 window bound with IBV_WR_BIND_MW let a peer WRITE and READ inside them and
 * nowhere else; SEND with Invalidate and IBV_WR_LOCAL_INV kill a type 2 window's key;
 * deregistering a region with a window bound is refused; a re-registered region keeps
 * its lkey and takes its new rights, PD and memory; a resized CQ keeps every completion
 * and refuses to shrink below what it holds; completion timestamps count the clock
 * ibv_query_rt_values_ex reads. Prints "PASS <step>" per step; any failure
 * exits 1 naming it. tests/abi_paths.rs builds and runs it. */
#include <infiniband/verbs.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define LEN 4096
static struct ibv_cq *cq;
static char *buf_a, *buf_b;
static struct ibv_mr *mr_a, *mr_b;

/* Two connected RC QPs of the same device: a (the peer) and b (the window's owner). */
static void pair(struct ibv_qp **a, struct ibv_qp **b)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			.max_recv_sge = 1},
	};
	*a = ibv_create_qp(pd, &ia);
	*b = ibv_create_qp(pd, &ia);
	CHECK(*a && *b, "ibv_create_qp");
	connect_qp(*a, (*b)->qp_num);
	connect_qp(*b, (*a)->qp_num);
}

static void unpair(struct ibv_qp *a, struct ibv_qp *b)
{
	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b), "ibv_destroy_qp");
}

/* A WRITE (or READ) of `len` bytes by `qp` at `va` through `rkey`, from/into buf_a;
 * the completion's status. */
static enum ibv_wc_status rdma(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t va,
			       uint32_t rkey, uint32_t len)
{
	struct ibv_sge s = {(uintptr_t)buf_a, len, mr_a->lkey};
	struct ibv_send_wr w = {.wr_id = 100, .sg_list = &s, .num_sge = 1, .opcode = op,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	w.wr.rdma.remote_addr = va;
	w.wr.rdma.rkey = rkey;
	CHECK(!ibv_post_send(qp, &w, &bad), "post rdma");
	struct ibv_wc wc = next_wc(cq);
	CHECK(wc.wr_id == 100, "wr_id %llu", (unsigned long long)wc.wr_id);
	return wc.status;
}

static void drain(void)
{
	struct ibv_wc wc;
	double end = now() + 0.2;
	while (now() < end)
		ibv_poll_cq(cq, 1, &wc);
}

static void query(void)
{
	struct ibv_device_attr a;
	CHECK(!ibv_query_device(ctx, &a), "ibv_query_device");
	CHECK(a.max_mw > 0, "max_mw %d", a.max_mw);
	CHECK(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW, "MEM_WINDOW");
	CHECK(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, "MEM_WINDOW_TYPE_2B");
	CHECK(!ibv_alloc_mw(pd, 3) && errno == EINVAL, "type 3 refused");
	printf("PASS query\n");
}

static void type1(void)
{
	struct ibv_qp *a, *b;
	pair(&a, &b);
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(mw && mw->type == IBV_MW_TYPE_1, "ibv_alloc_mw");
	uint32_t old = mw->rkey;
	struct ibv_mw_bind bind = {.wr_id = 1, .send_flags = IBV_SEND_SIGNALED,
				   .bind_info = {.mr = mr_b, .addr = (uintptr_t)buf_b + 256,
						 .length = 256,
						 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE |
								    IBV_ACCESS_REMOTE_READ}};
	CHECK(!ibv_bind_mw(b, mw, &bind), "ibv_bind_mw");
	struct ibv_wc wc = next_wc(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 1,
	      "bind completion %d %d", wc.status, wc.opcode);
	CHECK(mw->rkey == ibv_inc_rkey(old), "rkey %#x after bind of %#x", mw->rkey, old);
	memset(buf_a, 'w', 64);
	memset(buf_b, 0, LEN);
	CHECK(rdma(a, IBV_WR_RDMA_WRITE, (uintptr_t)buf_b + 448, mw->rkey, 64) ==
	      IBV_WC_SUCCESS, "WRITE inside");
	CHECK(buf_b[448] == 'w' && buf_b[511] == 'w' && buf_b[447] == 0 && buf_b[512] == 0,
	      "WRITE landed in the window");
	memset(buf_a, 0, 64);
	CHECK(rdma(a, IBV_WR_RDMA_READ, (uintptr_t)buf_b + 448, mw->rkey, 64) ==
	      IBV_WC_SUCCESS && buf_a[0] == 'w', "READ inside");
	/* Deregistering the region under a bound window: refused (rxe: EINVAL). */
	CHECK(ibv_dereg_mr(mr_b) == EINVAL, "dereg_mr with a window bound");
	/* Old key byte: refused (and the QPs fail). */
	memset(buf_a, 'x', 64);
	CHECK(rdma(a, IBV_WR_RDMA_WRITE, (uintptr_t)buf_b + 256, old, 8) ==
	      IBV_WC_REM_ACCESS_ERR, "the old key is stale");
	drain();
	unpair(a, b);
	/* One byte past the window, though inside the region: refused, nothing written. */
	pair(&a, &b);
	CHECK(rdma(a, IBV_WR_RDMA_WRITE, (uintptr_t)buf_b + 449, mw->rkey, 64) ==
	      IBV_WC_REM_ACCESS_ERR, "WRITE past the window");
	CHECK(buf_b[449 + 63] == 0 && buf_b[256] == 0, "no byte outside the window");
	drain();
	unpair(a, b);
	/* Unbind (length 0): the key names nothing. */
	pair(&a, &b);
	struct ibv_mw_bind unbind = {.wr_id = 2, .send_flags = IBV_SEND_SIGNALED};
	CHECK(!ibv_bind_mw(b, mw, &unbind), "unbind");
	wc = next_wc(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "unbind completion");
	CHECK(rdma(a, IBV_WR_RDMA_READ, (uintptr_t)buf_b + 256, mw->rkey, 8) ==
	      IBV_WC_REM_ACCESS_ERR, "READ through an unbound window");
	drain();
	unpair(a, b);
	CHECK(!ibv_dealloc_mw(mw), "ibv_dealloc_mw");
	printf("PASS type1\n");
}

/* Binds a type 2 window on `b` over bytes [256, 512) of buf_b; its new rkey. */
static uint32_t bind2(struct ibv_qp *b, struct ibv_mw *mw)
{
	struct ibv_send_wr w = {.wr_id = 3, .opcode = IBV_WR_BIND_MW,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	w.bind_mw.mw = mw;
	w.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	w.bind_mw.bind_info.mr = mr_b;
	w.bind_mw.bind_info.addr = (uintptr_t)buf_b + 256;
	w.bind_mw.bind_info.length = 256;
	w.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	CHECK(!ibv_post_send(b, &w, &bad), "post BIND_MW");
	struct ibv_wc wc = next_wc(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 3,
	      "BIND_MW completion %d %d", wc.status, wc.opcode);
	mw->rkey = w.bind_mw.rkey; /* the program tracks a type 2 window's key */
	return mw->rkey;
}

static void type2(void)
{
	struct ibv_qp *a, *b;
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw && mw->type == IBV_MW_TYPE_2, "ibv_alloc_mw type 2");
	/* Bound, used, invalidated by the peer's SEND with Invalidate. */
	pair(&a, &b);
	uint32_t rkey = bind2(b, mw);
	memset(buf_b, 0, LEN);
	memset(buf_a, 'v', 64);
	CHECK(rdma(a, IBV_WR_RDMA_WRITE, (uintptr_t)buf_b + 256, rkey, 64) ==
	      IBV_WC_SUCCESS && buf_b[256] == 'v', "WRITE through a type 2 window");
	struct ibv_sge rs = {(uintptr_t)buf_b + 2048, 64, mr_b->lkey};
	struct ibv_recv_wr r = {.wr_id = 4, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK(!ibv_post_recv(b, &r, &rbad), "post_recv");
	struct ibv_sge ss = {(uintptr_t)buf_a, 8, mr_a->lkey};
	struct ibv_send_wr s = {.wr_id = 5, .sg_list = &ss, .num_sge = 1,
				.opcode = IBV_WR_SEND_WITH_INV,
				.send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = rkey}, *bad;
	CHECK(!ibv_post_send(a, &s, &bad), "post SEND_WITH_INV");
	int seen = 0;
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc = next_wc(cq);
		CHECK(wc.status == IBV_WC_SUCCESS, "SEND_WITH_INV wr %llu status %d",
		      (unsigned long long)wc.wr_id, wc.status);
		if (wc.wr_id == 4) {
			CHECK(wc.opcode == IBV_WC_RECV && (wc.wc_flags & IBV_WC_WITH_INV) &&
			      wc.invalidated_rkey == rkey, "receive with invalidate: flags %#x "
			      "rkey %#x", wc.wc_flags, wc.invalidated_rkey);
			seen++;
		}
	}
	CHECK(seen == 1, "the receive completion");
	CHECK(rdma(a, IBV_WR_RDMA_WRITE, (uintptr_t)buf_b + 256, rkey, 8) ==
	      IBV_WC_REM_ACCESS_ERR, "WRITE through an invalidated window");
	drain();
	unpair(a, b);
	/* Bound again (it is free), then LOCAL_INV. */
	pair(&a, &b);
	rkey = bind2(b, mw);
	CHECK(rdma(a, IBV_WR_RDMA_READ, (uintptr_t)buf_b + 256, rkey, 8) == IBV_WC_SUCCESS,
	      "READ through the rebound window");
	struct ibv_send_wr li = {.wr_id = 6, .opcode = IBV_WR_LOCAL_INV,
				 .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = rkey};
	CHECK(!ibv_post_send(b, &li, &bad), "post LOCAL_INV");
	struct ibv_wc wc = next_wc(cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV && wc.wr_id == 6,
	      "LOCAL_INV completion %d %d", wc.status, wc.opcode);
	CHECK(rdma(a, IBV_WR_RDMA_READ, (uintptr_t)buf_b + 256, rkey, 8) ==
	      IBV_WC_REM_ACCESS_ERR, "READ through a locally invalidated window");
	drain();
	unpair(a, b);
	CHECK(!ibv_dealloc_mw(mw), "ibv_dealloc_mw type 2");
	printf("PASS type2\n");
}

static void rereg(void)
{
	struct ibv_qp *a, *b;
	char *other = calloc(1, LEN);
	struct ibv_mr *m = ibv_reg_mr(pd, buf_b, LEN, IBV_ACCESS_LOCAL_WRITE);
	CHECK(m && m->rkey == m->lkey, "reg_mr local only: rkey = lkey (rxe after 6.1, mlx5)");
	uint32_t lkey = m->lkey;
	CHECK(ibv_rereg_mr(m, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD && errno == EINVAL,
	      "flags 0");
	CHECK(ibv_rereg_mr(m, 8, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL, "unknown flag");
	CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0) ==
	      IBV_REREG_MR_ERR_INPUT, "translation without memory");
	CHECK(!ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, ACCESS),
	      "CHANGE_ACCESS");
	CHECK(m->lkey == lkey && m->rkey == lkey, "keys %#x %#x (lkey was %#x)", m->lkey,
	      m->rkey, lkey);
	pair(&a, &b);
	memset(buf_a, 'r', 16);
	CHECK(rdma(a, IBV_WR_RDMA_WRITE, (uintptr_t)buf_b + 8, m->rkey, 16) == IBV_WC_SUCCESS &&
	      buf_b[8] == 'r', "WRITE with the new right");
	CHECK(!ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, other, LEN, 0),
	      "CHANGE_TRANSLATION");
	CHECK(m->addr == other && m->lkey == lkey, "new translation");
	memset(buf_a, 't', 16);
	CHECK(rdma(a, IBV_WR_RDMA_WRITE, (uintptr_t)other + 16, m->rkey, 16) ==
	      IBV_WC_SUCCESS && other[16] == 't', "WRITE lands in the new memory");
	CHECK(rdma(a, IBV_WR_RDMA_WRITE, (uintptr_t)buf_b + 8, m->rkey, 16) ==
	      IBV_WC_REM_ACCESS_ERR, "the old range is gone");
	drain();
	unpair(a, b);
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	CHECK(pd2 && !ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) &&
	      m->pd == pd2, "CHANGE_PD");
	CHECK(ibv_dealloc_pd(pd2) == EBUSY, "the region is in pd2 now");
	CHECK(!ibv_dereg_mr(m) && !ibv_dealloc_pd(pd2), "teardown");
	free(other);
	printf("PASS rereg\n");
}

static void resize(void)
{
	struct ibv_cq *c = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(c, "ibv_create_cq");
	struct ibv_qp_init_attr ia = {
		.send_cq = c, .recv_cq = c, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			.max_recv_sge = 1},
	};
	struct ibv_qp *q = ibv_create_qp(pd, &ia);
	CHECK(q, "ibv_create_qp");
	struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	CHECK(!ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				     IBV_QP_ACCESS_FLAGS), "INIT");
	for (int i = 0; i < 4; i++) {
		struct ibv_sge s = {(uintptr_t)buf_a, 8, mr_a->lkey};
		struct ibv_recv_wr r = {.wr_id = i, .sg_list = &s, .num_sge = 1}, *bad;
		CHECK(!ibv_post_recv(q, &r, &bad), "post_recv %d", i);
	}
	/* To ERR: the four receives are flushed into the CQ at once, which is full. */
	at.qp_state = IBV_QPS_ERR;
	CHECK(!ibv_modify_qp(q, &at, IBV_QP_STATE), "ERR");
	CHECK(ibv_resize_cq(c, 3) == EINVAL, "shrinking below the 4 held");
	CHECK(ibv_resize_cq(c, 0) == EINVAL, "size 0");
	CHECK(!ibv_resize_cq(c, 8) && c->cqe == 8, "grow to 8: cqe %d", c->cqe);
	for (int i = 0; i < 4; i++) {
		struct ibv_wc wc;
		CHECK(ibv_poll_cq(c, 1, &wc) == 1 && wc.wr_id == (uint64_t)i &&
		      wc.status == IBV_WC_WR_FLUSH_ERR, "completion %d kept", i);
	}
	CHECK(!ibv_resize_cq(c, 1) && c->cqe == 1, "shrink an empty CQ to 1");
	CHECK(!ibv_destroy_qp(q) && !ibv_destroy_cq(c), "teardown");
	printf("PASS resize\n");
}

static uint64_t rt_now(void)
{
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	CHECK(!ibv_query_rt_values_ex(ctx, &v) && v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK,
	      "ibv_query_rt_values_ex");
	return (uint64_t)v.raw_clock.tv_sec * 1000000000ull + v.raw_clock.tv_nsec;
}

/* Completion timestamps: ticks of the clock ibv_query_rt_values_ex reads, at
 * hca_core_clock kHz, between the clock before the post and after the poll. */
static void timestamps(void)
{
	struct ibv_device_attr_ex dx;
	CHECK(!ibv_query_device_ex(ctx, NULL, &dx), "ibv_query_device_ex");
	CHECK(dx.hca_core_clock == 1000000 && dx.completion_timestamp_mask == UINT64_MAX,
	      "clock %llu kHz, mask %#llx", (unsigned long long)dx.hca_core_clock,
	      (unsigned long long)dx.completion_timestamp_mask);
	struct ibv_cq_init_attr_ex cx = {
		.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cx);
	CHECK(cqx, "ibv_create_cq_ex with timestamps");
	struct ibv_cq *saved = cq;
	cq = ibv_cq_ex_to_cq(cqx);
	struct ibv_qp *a, *b;
	pair(&a, &b);
	uint64_t t0 = rt_now();
	struct ibv_sge s = {(uintptr_t)buf_a, 8, mr_a->lkey};
	struct ibv_send_wr w = {.wr_id = 9, .sg_list = &s, .num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED}, *bad;
	w.wr.rdma.remote_addr = (uintptr_t)buf_b;
	w.wr.rdma.rkey = mr_b->rkey;
	CHECK(!ibv_post_send(a, &w, &bad), "post");
	struct ibv_poll_cq_attr pa = {0};
	double end = now() + 10;
	int r;
	while ((r = ibv_start_poll(cqx, &pa)) == ENOENT && now() < end)
		;
	CHECK(r == 0 && cqx->wr_id == 9 && cqx->status == IBV_WC_SUCCESS, "start_poll %d", r);
	uint64_t ts = ibv_wc_read_completion_ts(cqx);
	ibv_end_poll(cqx);
	uint64_t t1 = rt_now();
	CHECK(t0 <= ts && ts <= t1, "timestamp %llu not in [%llu, %llu]",
	      (unsigned long long)ts, (unsigned long long)t0, (unsigned long long)t1);
	unpair(a, b);
	cq = saved;
	CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), "destroy cq_ex");
	printf("PASS timestamps\n");
}

int main(int argc, char **argv)
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
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq");
	buf_a = calloc(1, LEN);
	buf_b = calloc(1, LEN);
	mr_a = ibv_reg_mr(pd, buf_a, LEN, ACCESS);
	mr_b = ibv_reg_mr(pd, buf_b, LEN, ACCESS | IBV_ACCESS_MW_BIND);
	CHECK(mr_a && mr_b, "ibv_reg_mr");
	const char *only = argc > 1 ? argv[1] : NULL;
	if (!only || !strcmp(only, "query"))
		query();
	if (!only || !strcmp(only, "type1"))
		type1();
	if (!only || !strcmp(only, "type2"))
		type2();
	if (!only || !strcmp(only, "rereg"))
		rereg();
	if (!only || !strcmp(only, "resize"))
		resize();
	if (!only || !strcmp(only, "timestamps"))
		timestamps();
	CHECK(!ibv_dereg_mr(mr_a) && !ibv_dereg_mr(mr_b), "dereg");
	CHECK(!ibv_destroy_cq(cq), "destroy_cq");
	CHECK(!ibv_dealloc_pd(pd), "dealloc_pd");
	CHECK(!ibv_close_device(ctx), "close");
	ibv_free_device_list(list);
	printf("PASS teardown\n");
	return 0;
}
