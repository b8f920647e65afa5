#ifndef PSLITE_ZMQMSG_H
#define PSLITE_ZMQMSG_H
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

// pslite_send_frame sends size bytes at data as one frame without copying
// them; libzmq hands hint to pslite_release_frame when it is done with them.
// It returns the size sent, or minus the error number.
int pslite_send_frame(void *sock, void *data, size_t size, int flags, uintptr_t hint);

// pslite_send_msg sends n (1 to 4) frames as one message: frame i is
// size_i bytes at data_i, copied by libzmq, or, when hint_i is not zero,
// handed over without a copy (libzmq gives hint_i to pslite_release_frame
// when it is done; a frame not sent is released at once). flags apply to
// every frame (ZMQ_SNDMORE is added to all but the last). It returns the
// bytes sent, or -(errno*8 + i) for a failure at frame i.
long long pslite_send_msg(void *sock, int n, int flags,
	void *data0, size_t size0, uintptr_t hint0,
	void *data1, size_t size1, uintptr_t hint1,
	void *data2, size_t size2, uintptr_t hint2,
	void *data3, size_t size3, uintptr_t hint3);

// pslite_reader receives whole messages with one call: the frames of the
// last message stay open in msgs until the next call (or
// pslite_reader_release); frames of at most PSLITE_PACK_MAX bytes are also
// copied, one after the other, into pack, so that Go copies them all at
// once.
#define PSLITE_PACK_MAX 4096
typedef struct {
	int cap;          // entries in msgs, size and packed
	int count;        // frames of the last message (may exceed cap)
	int open;         // entries of msgs holding a frame
	long long bytes;  // bytes of the last message
	size_t used;      // bytes of pack in use
	zmq_msg_t *msgs;  // the frames, cap of them
	size_t *size;     // their sizes
	long long *packed;  // offset of a frame's copy in pack, or -1
	char *pack;       // pack_cap bytes
	size_t pack_cap;
} pslite_reader;

// pslite_reader_new allocates a reader keeping up to cap frames.
pslite_reader *pslite_reader_new(int cap);

// pslite_reader_free closes the reader's frames and frees it.
void pslite_reader_free(pslite_reader *r);

// pslite_recv_msg receives the next message into r: up to cap frames are
// kept, the rest are read and dropped (counted in count and bytes). It
// returns the number of frames, or minus the error number.
int pslite_recv_msg(void *sock, pslite_reader *r, int flags);

// pslite_reader_release closes frame i of the last message.
void pslite_reader_release(pslite_reader *r, int i);

// pslite_reader_release_all closes every frame of the last message.
void pslite_reader_release_all(pslite_reader *r);

// pslite_reader_take moves frame i of the last message out of r into a
// message of its own (malloc'd), or returns NULL when memory is short.
zmq_msg_t *pslite_reader_take(pslite_reader *r, int i);

// pslite_msg_free closes and frees a message from pslite_reader_take.
void pslite_msg_free(zmq_msg_t *m);

// pslite_msg_poison overwrites the bytes of m with 0xDB and returns their
// number.
size_t pslite_msg_poison(zmq_msg_t *m);

// pslite_release_memory gives memory the C allocator holds free back to
// the system (glibc's malloc_trim; a no-op elsewhere).
void pslite_release_memory(void);

// pslite_keep_memory makes the C allocator serve large blocks from memory
// it keeps (one arena, no mmap per block, no trimming) rather than from
// fresh pages: libzmq's buffers for large received messages then reuse
// memory whose pages are already there. It returns 0 where unsupported.
int pslite_keep_memory(void);

// pslite_socket_type returns the ZMQ_TYPE of sock, or -1.
int pslite_socket_type(void *sock);
#endif
