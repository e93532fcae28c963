/* An id pointer the library does not know (one destroyed, one never made) given to
 * rdma_resolve_addr, and an id destroyed twice: -1 with errno EINVAL, never a crash.
 * perftest 4.5 (-R) does both after a REJECTED connect; the drop-in aborted on them.
 * Prints "stale: EINVAL", "foreign: EINVAL", "destroyed twice: EINVAL" and exits 0. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

int main(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in dst;
	static char junk[256];

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		perror("create");
		return 2;
	}
	memset(&dst, 0, sizeof(dst));
	dst.sin_family = AF_INET;
	dst.sin_port = htons(7999);
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (rdma_destroy_id(id)) {
		perror("destroy");
		return 2;
	}
	errno = 0;
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 1000) != -1 || errno != EINVAL) {
		printf("stale: %s\n", strerror(errno));
		return 1;
	}
	printf("stale: EINVAL\n");
	errno = 0;
	if (rdma_resolve_addr((struct rdma_cm_id *)(junk + 3), NULL, (struct sockaddr *)&dst, 1000) != -1 ||
	    errno != EINVAL) {
		printf("foreign: %s\n", strerror(errno));
		return 1;
	}
	printf("foreign: EINVAL\n");
	errno = 0;
	if (rdma_destroy_id(id) != -1 || errno != EINVAL) {
		printf("destroyed twice: %s\n", strerror(errno));
		return 1;
	}
	printf("destroyed twice: EINVAL\n");
	rdma_destroy_event_channel(ch);
	return 0;
}
