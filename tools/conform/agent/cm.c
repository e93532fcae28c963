/* The connection manager's commands (`role cm_passive` scripts, spec/FORMAT.md): the
 * target as a program using librdmacm (Debian 12's) on the device: cm_listen, cm_event,
 * cm_accept, cm_reject, cm_disconnect. The kernel's rdma_cm and IB CM answer the scripted
 * peer's MADs on QP1; this file only does what a program does (rping's server side).
 *
 * librdmacm opens its own verbs context for the device (id->verbs): the accept's PD, CQ
 * and QP live on it, not on the agent's `ctx`. */
#define _GNU_SOURCE
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <string.h>

#define MAX_LISTEN 4
#define MAX_CONNS 16

static struct rdma_event_channel *ch;
static struct rdma_cm_id *listeners[MAX_LISTEN];
static int nlisteners;
/* Every id a CONNECT_REQUEST made (destroyed at reset); the last is the connection. */
static struct rdma_cm_id *conns[MAX_CONNS];
static int nconns;
static struct ibv_pd *cm_pd;
static struct ibv_cq *cm_cq;

static int cm_err(const char *call)
{
	return err("%s: %s", call, strerror(errno));
}

int cmd_cm_listen(void)
{
	static const char *const k[] = { "ps", "port", NULL };
	uint64_t port;
	const char *ps = get("ps");
	char ip[INET_ADDRSTRLEN];
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct rdma_cm_id *id;
	if (only(k) || num("port", 65535, 1, 0, &port))
		return -1;
	enum rdma_port_space space = ps && strcmp(ps, "udp") == 0 ? RDMA_PS_UDP : RDMA_PS_TCP;
	if (nlisteners == MAX_LISTEN)
		return err("%d listeners exist: reset first", MAX_LISTEN);
	if (roce_v2_ipv4(ip, sizeof(ip)) < 0 || inet_pton(AF_INET, ip, &sin.sin_addr) != 1)
		return err("no IPv4 RoCE v2 address");
	sin.sin_port = htons((uint16_t)port);
	/* No rdma_cm here (no /dev/infiniband/rdma_cm: the drop-in libibverbs without a
	 * librdmacm of its own): the CM scripts are not applicable. */
	if (!ch && !(ch = rdma_create_event_channel()))
		return errno == ENOENT || errno == ENODEV
			       ? unsupported("rdma_cm (rdma_create_event_channel: %s)", strerror(errno))
			       : cm_err("rdma_create_event_channel");
	if (rdma_create_id(ch, &id, NULL, space))
		return cm_err("rdma_create_id");
	listeners[nlisteners++] = id;
	if (rdma_bind_addr(id, (struct sockaddr *)&sin))
		return cm_err("rdma_bind_addr");
	if (rdma_listen(id, 8))
		return cm_err("rdma_listen");
	rprintf("ok");
	return 0;
}

/* The next event within `ms` (acknowledged), or NULL and *none. */
static int next_event(int ms, struct rdma_cm_event **ev)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	int r = poll(&p, 1, ms);
	if (r < 0)
		return cm_err("poll");
	if (r == 0) {
		*ev = NULL;
		return 0;
	}
	if (rdma_get_cm_event(ch, ev))
		return cm_err("rdma_get_cm_event");
	return 0;
}

int cmd_cm_event(void)
{
	static const char *const k[] = { "ms", NULL };
	uint64_t ms;
	struct rdma_cm_event *ev;
	if (only(k) || num("ms", MAX_POLL_MS, 0, 0, &ms))
		return -1;
	if (!ch) {
		rprintf("ok none");
		return 0;
	}
	if (next_event((int)ms, &ev))
		return -1;
	if (!ev) {
		rprintf("ok none");
		return 0;
	}
	const char *name = rdma_event_str(ev->event);
	if (strncmp(name, "RDMA_CM_EVENT_", 14) == 0)
		name += 14;
	int status = ev->status;
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && nconns < MAX_CONNS)
		conns[nconns++] = ev->id;
	rdma_ack_cm_event(ev);
	rprintf("ok event=%s status=%d", name, status);
	return 0;
}

static struct rdma_cm_id *conn(void)
{
	return nconns ? conns[nconns - 1] : NULL;
}

int cmd_cm_accept(void)
{
	static const char *const k[] = { NULL };
	struct rdma_cm_id *id = conn();
	struct ibv_qp_init_attr init = { 0 };
	struct rdma_conn_param param = { 0 };
	struct ibv_qp_attr attr;
	if (only(k))
		return -1;
	if (!id)
		return err("no connection request yet");
	if (!cm_pd && !(cm_pd = ibv_alloc_pd(id->verbs)))
		return cm_err("ibv_alloc_pd");
	if (!cm_cq && !(cm_cq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0)))
		return cm_err("ibv_create_cq");
	init.send_cq = cm_cq;
	init.recv_cq = cm_cq;
	init.cap.max_send_wr = 16;
	init.cap.max_recv_wr = 16;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.qp_type = id->ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
	if (rdma_create_qp(id, cm_pd, &init))
		return cm_err("rdma_create_qp");
	param.responder_resources = 1;
	param.initiator_depth = 1;
	param.retry_count = 7;
	param.rnr_retry_count = 7;
	param.qp_num = id->qp->qp_num;
	if (rdma_accept(id, &param))
		return cm_err("rdma_accept");
	uint32_t rq_psn = 0;
	if (init.qp_type == IBV_QPT_RC) {
		struct ibv_qp_init_attr qi;
		if (ibv_query_qp(id->qp, &attr, IBV_QP_RQ_PSN, &qi))
			return cm_err("ibv_query_qp");
		rq_psn = attr.rq_psn;
	}
	rprintf("ok qpn=0x%x rq_psn=0x%x", id->qp->qp_num, rq_psn);
	return 0;
}

int cmd_cm_reject(void)
{
	static const char *const k[] = { NULL };
	if (only(k))
		return -1;
	if (!conn())
		return err("no connection request yet");
	if (rdma_reject(conn(), NULL, 0))
		return cm_err("rdma_reject");
	rprintf("ok");
	return 0;
}

int cmd_cm_disconnect(void)
{
	static const char *const k[] = { NULL };
	if (only(k))
		return -1;
	if (!conn())
		return err("no connection request yet");
	if (rdma_disconnect(conn()))
		return cm_err("rdma_disconnect");
	rprintf("ok");
	return 0;
}

/* cm_destroy: the connection's QP and id go, as when a program exits. */
int cmd_cm_destroy(void)
{
	static const char *const k[] = { NULL };
	struct rdma_cm_id *id = conn();
	if (only(k))
		return -1;
	if (!id)
		return err("no connection request yet");
	if (id->qp)
		rdma_destroy_qp(id);
	if (rdma_destroy_id(id))
		return cm_err("rdma_destroy_id");
	nconns--;
	rprintf("ok");
	return 0;
}

/* Destroys the script's ids (a connected one sends its DREQ, as a program that exits),
 * their QPs, and the events left (a CONNECT_REQUEST's new id with them). */
void cm_reset(void)
{
	struct rdma_cm_event *ev;
	while (ch && next_event(0, &ev) == 0 && ev) {
		struct rdma_cm_id *id = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->id : NULL;
		rdma_ack_cm_event(ev);
		if (id)
			rdma_destroy_id(id);
	}
	for (int i = 0; i < nconns; i++) {
		if (conns[i]->qp)
			rdma_destroy_qp(conns[i]);
		rdma_destroy_id(conns[i]);
	}
	nconns = 0;
	for (int i = 0; i < nlisteners; i++)
		rdma_destroy_id(listeners[i]);
	nlisteners = 0;
	if (cm_cq)
		ibv_destroy_cq(cm_cq);
	cm_cq = NULL;
	if (cm_pd)
		ibv_dealloc_pd(cm_pd);
	cm_pd = NULL;
	rclear();
}
