// Small helpers around libzmq's message API for zmqmsg.go: sending a frame
// without copying it, and receiving frames with one call each.
#include <errno.h>
#include <stdint.h>
#include <zmq.h>

#include "_cgo_export.h"
#include "zmqmsg.h"
#ifdef __GLIBC__
#include <malloc.h>
#endif

// release is libzmq's free function for a frame sent without a copy: it runs
// (on a libzmq thread) once libzmq no longer needs the frame, and tells Go
// to unpin it.
static void release(void *data, void *hint) {
	(void)data;
	pslite_release_frame((uintptr_t)hint);
}

int pslite_send_frame(void *sock, void *data, size_t size, int flags, uintptr_t hint) {
	zmq_msg_t msg;
	if (zmq_msg_init_data(&msg, data, size, release, (void *)hint) != 0) {
		return -zmq_errno();
	}
	int rc;
	do {
		rc = zmq_msg_send(&msg, sock, flags);
	} while (rc < 0 && zmq_errno() == EINTR);
	if (rc < 0) {
		int err = zmq_errno();
		zmq_msg_close(&msg); // releases the frame
		return -err;
	}
	return rc;
}

int pslite_recv_frame(void *sock, pslite_frame *f, int flags) {
	int rc;
	do {
		rc = zmq_msg_recv(&f->msg, sock, flags);
	} while (rc < 0 && zmq_errno() == EINTR);
	if (rc < 0) {
		return -zmq_errno();
	}
	f->data = zmq_msg_data(&f->msg);
	f->more = zmq_msg_more(&f->msg);
	return rc;
}

int pslite_socket_type(void *sock) {
	int type = -1;
	size_t len = sizeof type;
	if (zmq_getsockopt(sock, ZMQ_TYPE, &type, &len) != 0) {
		return -1;
	}
	return type;
}

void pslite_release_memory(void) {
#ifdef __GLIBC__
	malloc_trim(0);
#endif
}
