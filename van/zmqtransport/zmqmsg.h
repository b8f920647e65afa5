#ifndef PSLITE_ZMQMSG_H
#define PSLITE_ZMQMSG_H
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

// pslite_frame is the receive loop's reusable message: one frame at a time.
typedef struct {
	zmq_msg_t msg;
	void *data;
	int more;
} pslite_frame;

// pslite_send_frame sends size bytes at data as one frame without copying
// them; libzmq hands hint to pslite_release_frame when it is done with them.
// It returns the size sent, or minus the error number.
int pslite_send_frame(void *sock, void *data, size_t size, int flags, uintptr_t hint);

// pslite_recv_frame receives the next frame into f; it returns its size, or
// minus the error number.
int pslite_recv_frame(void *sock, pslite_frame *f, int flags);

// pslite_release_memory gives memory the C allocator holds free back to
// the system (glibc's malloc_trim; a no-op elsewhere).
void pslite_release_memory(void);

// pslite_socket_type returns the ZMQ_TYPE of sock, or -1.
int pslite_socket_type(void *sock);
#endif
