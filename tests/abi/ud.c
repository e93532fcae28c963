/* UD on the drop-in, from C: two UD QPs of one device exchange datagrams through address
 * handles (classic post_send with wr.ud, and ibv_wr_set_ud_addr), the receive completion
 * carries src_qp, IBV_WC_GRH and sl 2 (IPv4, for UCX), the 40-byte slot holds 20 zero
 * bytes and an IPv4 header whose checksum is valid, ibv_init_ah_from_wc and
 * ibv_create_ah_from_wc turn it into the reply's address handle, and what UD refuses
 * fails cleanly (an AH without GRH, a privileged Q_Key, RDMA WRITE, a wrong Q_Key drops
 * silently, multicast). Prints "PASS <step>" per step; tests/abi_paths.rs counts them. */
#include "common.h"

/* common.h's RC helper is not used here. */
__attribute__((unused)) static void (*const unused_connect)(struct ibv_qp *, uint32_t) = connect_qp;

#define QKEY 0x11111111u

static struct ibv_qp *ud_qp(struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp(UD)");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
	      "UD INIT");
	a.qp_state = IBV_QPS_RTR;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE), "UD RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x123;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "UD RTS");
	return qp;
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, char *at, uint32_t len, uint64_t id)
{
	struct ibv_sge s = {(uintptr_t)at, len, mr->lkey};
	struct ibv_recv_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
	CHECK(!ibv_post_recv(qp, &w, &bad), "post_recv");
}

static int send_ud(struct ibv_qp *qp, struct ibv_mr *mr, char *at, uint32_t len,
		   struct ibv_ah *ah, uint32_t qpn, uint32_t qkey, enum ibv_wr_opcode op)
{
	struct ibv_sge s = {(uintptr_t)at, len, mr->lkey};
	struct ibv_send_wr w = {.wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = op,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	w.wr.ud.ah = ah;
	w.wr.ud.remote_qpn = qpn;
	w.wr.ud.remote_qkey = qkey;
	return ibv_post_send(qp, &w, &bad);
}

static uint16_t sum16(const uint8_t *h, int n)
{
	uint32_t s = 0;
	for (int i = 0; i < n; i += 2)
		s += (h[i] << 8) | h[i + 1];
	while (s > 0xffff)
		s = (s & 0xffff) + (s >> 16);
	return s;
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "ibv_get_device_list: %d", n);
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "pd");
	CHECK(!ibv_query_gid(ctx, 1, GIDX, &gid), "gid");
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	char *buf = calloc(1, 65536);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 65536, ACCESS);
	CHECK(cq && buf && mr, "cq/mr");
	struct ibv_qp *a = ud_qp(cq), *b = ud_qp(cq);

	/* ---- address handles ---- */
	struct ibv_ah_attr aa = {.port_num = 1, .dlid = 0xc000};
	CHECK(!ibv_create_ah(pd, &aa) && errno == EINVAL, "an AH without GRH must be EINVAL");
	aa.is_global = 1;
	aa.grh.dgid = gid;
	aa.grh.hop_limit = 255;
	aa.grh.sgid_index = GIDX;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah && ah->pd == pd && ah->context == ctx, "ibv_create_ah");
	struct ibv_qp_attr qa = {.qkey = 0x80010000};
	CHECK(ibv_modify_qp(a, &qa, IBV_QP_QKEY) == EPERM, "a privileged Q_Key must be EPERM");
	printf("PASS address handles\n");

	/* ---- a datagram and its completion ---- */
	strcpy(buf, "a datagram");
	post_recv(b, mr, buf + 4096, 40 + 1024, 11);
	CHECK(!send_ud(a, mr, buf, 64, ah, b->qp_num, QKEY, IBV_WR_SEND_WITH_IMM), "post_send UD");
	struct ibv_wc s = next_wc(cq), r = next_wc(cq);
	if (s.wr_id == 11) {
		struct ibv_wc t = s;
		s = r;
		r = t;
	}
	CHECK(s.status == IBV_WC_SUCCESS && s.opcode == IBV_WC_SEND, "send completion");
	CHECK(r.status == IBV_WC_SUCCESS && r.opcode == IBV_WC_RECV && r.wr_id == 11, "recv");
	CHECK(r.byte_len == 40 + 64, "byte_len %u", r.byte_len);
	CHECK(r.src_qp == a->qp_num && r.qp_num == b->qp_num, "src_qp %u", r.src_qp);
	CHECK((r.wc_flags & IBV_WC_GRH) && (r.wc_flags & IBV_WC_WITH_IMM), "wc_flags %#x",
	      r.wc_flags);
	CHECK(r.sl == 2, "IPv4 UD receives report sl 2 (UCX), got %u", r.sl);
	CHECK(!strcmp(buf + 4096 + 40, "a datagram"), "payload after the 40-byte slot");
	const uint8_t *g = (const uint8_t *)buf + 4096;
	for (int i = 0; i < 20; i++)
		CHECK(g[i] == 0, "byte %d of the slot must be 0", i);
	CHECK(g[20] == 0x45 && g[29] == 17 && sum16(g + 20, 20) == 0xffff,
	      "an IPv4 header with a valid checksum at byte 20");
	CHECK(!memcmp(g + 32, (uint8_t *)&gid + 12, 4) && !memcmp(g + 36, (uint8_t *)&gid + 12, 4),
	      "the header's addresses");
	printf("PASS a datagram: src_qp, GRH, sl, the IPv4 header slot\n");

	/* ---- the reply's address handle from the completion ---- */
	struct ibv_ah_attr from;
	CHECK(!ibv_init_ah_from_wc(ctx, 1, &r, (struct ibv_grh *)g, &from), "ibv_init_ah_from_wc");
	CHECK(from.is_global && !memcmp(&from.grh.dgid, &gid, 16) && from.grh.sgid_index == GIDX &&
		      from.grh.hop_limit == 64 && from.port_num == 1 && from.sl == 2,
	      "the AH attributes from the completion");
	struct ibv_ah *back = ibv_create_ah_from_wc(pd, &r, (struct ibv_grh *)g, 1);
	CHECK(back, "ibv_create_ah_from_wc");
	post_recv(a, mr, buf + 8192, 40 + 1024, 12);
	strcpy(buf + 100, "the reply");
	CHECK(!send_ud(b, mr, buf + 100, 32, back, r.src_qp, QKEY, IBV_WR_SEND), "reply");
	int got = 0;
	for (int i = 0; i < 2; i++) {
		struct ibv_wc w = next_wc(cq);
		CHECK(w.status == IBV_WC_SUCCESS, "reply completion");
		got += w.wr_id == 12 && w.src_qp == b->qp_num;
	}
	CHECK(got == 1 && !strcmp(buf + 8192 + 40, "the reply"), "the reply arrived");
	printf("PASS ibv_init_ah_from_wc, ibv_create_ah_from_wc\n");

	/* ---- the extended post API ---- */
	post_recv(b, mr, buf + 12288, 40 + 1024, 13);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
	ibv_wr_start(x);
	x->wr_id = 14;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_ud_addr(x, ah, b->qp_num, QKEY);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, 16);
	CHECK(!ibv_wr_complete(x), "ibv_wr_complete");
	got = 0;
	for (int i = 0; i < 2; i++)
		got += next_wc(cq).wr_id == 13;
	CHECK(got == 1, "ibv_wr_set_ud_addr's datagram arrived");
	printf("PASS ibv_wr_set_ud_addr\n");

	/* ---- what UD refuses ---- */
	CHECK(send_ud(a, mr, buf, 8, ah, b->qp_num, QKEY, IBV_WR_RDMA_WRITE) == EINVAL,
	      "RDMA WRITE on UD must be EINVAL");
	CHECK(send_ud(a, mr, buf, 8, NULL, b->qp_num, QKEY, IBV_WR_SEND) == EINVAL,
	      "a UD send without an AH must be EINVAL");
	post_recv(b, mr, buf + 16384, 40 + 1024, 15);
	CHECK(!send_ud(a, mr, buf, 8, ah, b->qp_num, QKEY + 1, IBV_WR_SEND), "wrong Q_Key");
	CHECK(next_wc(cq).wr_id == 7, "the sender completes");
	double end = now() + 0.3;
	struct ibv_wc w;
	while (now() < end)
		CHECK(ibv_poll_cq(cq, 1, &w) == 0, "a wrong Q_Key must not be delivered");
	CHECK(ibv_attach_mcast(a, &gid, 0) == EOPNOTSUPP, "multicast must be EOPNOTSUPP");
	printf("PASS refusals: WRITE, no AH, wrong Q_Key, multicast\n");

	CHECK(!ibv_destroy_ah(back) && !ibv_destroy_ah(ah), "ibv_destroy_ah");
	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b), "destroy QPs");
	CHECK(!ibv_dereg_mr(mr) && !ibv_destroy_cq(cq) && !ibv_dealloc_pd(pd), "teardown");
	CHECK(!ibv_close_device(ctx), "close");
	printf("PASS teardown\n");
	return 0;
}
