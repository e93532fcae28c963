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
 * (each QP's number is known only once it exists; tests/conform_agent.rs does that).
 *
 * The files: main.c (this one: options, the device and its RoCE v2 IPv4 GID, the TCP
 * loop), proto.c and proto.h (a request line into its command and arguments, the checks
 * on numbers, names and flag lists, the reply line), verbs.c (the script's objects and
 * the commands hello, reset, mr, post_recv, post_send, poll, event, read), qp.c (the QP
 * and its states: qp, modify, state), agent.h (what they share). */
#define _GNU_SOURCE
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
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

#define DEFAULT_PORT 7471

/* ---- the device --------------------------------------------------------------------- */

struct ibv_context *ctx;
struct ibv_device *dev;
struct ibv_device_attr dattr;
char target_name[64];

/* ---- the device's RoCE v2 IPv4 GID -------------------------------------------------- */

static int is_v4_mapped(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	return memcmp(g->raw, prefix, 12) == 0;
}

/* The first GID index of port 1 that is RoCE v2 and IPv4-mapped: its index, and the
 * address in `ip`; -1 when there is none (looked up at each use: rxe's GIDs follow the
 * interface's addresses). */
int roce_v2_ipv4(char *ip, size_t iplen)
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
