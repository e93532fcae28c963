/* What the conformance agent's files share: the device (main.c), the current script's
 * objects (verbs.c), and the commands (verbs.c, qp.c) that handle() in proto.c runs. */
#ifndef AGENT_H
#define AGENT_H

#include <infiniband/verbs.h>

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#pragma GCC visibility push(hidden) /* as in proto.h */

#define MAX_MRS 16
#define MAX_SGE 16
#define MAX_MR_LEN (256ul << 20) /* one region, and all of them together */
#define MAX_READ (1ul << 20)
#define MAX_POLL_MS 600000ul
#define MAX_QUEUE 16384ul

/* ---- the device (main.c) ------------------------------------------------------------ */

extern struct ibv_context *ctx;
extern struct ibv_device *dev;
extern struct ibv_device_attr dattr;
extern char target_name[64];

/* The first RoCE v2 IPv4-mapped GID index of port 1 (its address in `ip`), or -1. */
int roce_v2_ipv4(char *ip, size_t iplen);

/* ---- the current script's objects (verbs.c) ----------------------------------------- */

#define MAX_QPS 4

extern struct ibv_pd *pd;
extern struct ibv_cq *cq;
extern struct ibv_qp *qp; /* the first of qps: what modify, state, post_* act on */
extern struct ibv_qp *qps[MAX_QPS];
extern int nqps;
extern struct ibv_srq *srq;
extern struct ibv_ah *ah; /* UD sends' address handle, made by qp_ah() */
extern const struct flag access_flags[];

/* Frees every object; nothing is kept between connections. */
void reset_all(void);
int need_pd(void);

/* ---- the commands: 0 after `ok ...`, -1 after `err ...` or `unsupported ...` -------- */

int cmd_hello(void);
int cmd_reset(void);
int cmd_mr(void);
int cmd_post_recv(void);
int cmd_post_send(void);
int cmd_poll(void);
int cmd_event(void);
int cmd_read(void);
/* qp.c */
int cmd_qp(void);
int cmd_modify(void);
int cmd_state(void);
/* The first QP's peer QPN and Q_Key, and the address handle to the peer (made on first
 * use; NULL after an `err` reply). */
uint32_t qp_peer_qpn(void);
uint32_t qp_qkey(void);
struct ibv_ah *qp_ah(void);
/* srq.c */
int cmd_srq(void);
int cmd_modify_srq(void);
int cmd_post_srq_recv(void);
int cmd_port(void);
int parse_sges(struct ibv_sge *sg, int *n, int inside);
/* cm.c: the connection manager through librdmacm */
int cmd_cm_listen(void);
int cmd_cm_event(void);
int cmd_cm_accept(void);
int cmd_cm_reject(void);
int cmd_cm_disconnect(void);
int cmd_cm_destroy(void);
void cm_reset(void);

#pragma GCC visibility pop

#endif
