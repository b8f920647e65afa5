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
//
// The addresses of Go memory come as integers, here and in
// pslite_send_pack, so that cgo does not check each call's arguments for Go
// pointers (they point to byte arrays, which hold none); the Go side keeps
// the memory alive across the call.
long long pslite_send_msg(void *sock, int n, int flags,
	uintptr_t data0, size_t size0, uintptr_t hint0,
	uintptr_t data1, size_t size1, uintptr_t hint1,
	uintptr_t data2, size_t size2, uintptr_t hint2,
	uintptr_t data3, size_t size3, uintptr_t hint3);

// pslite_send_pack sends messages whose frames lie end to end at buf_addr:
// frame i is the low 31 bits of sizes[i] bytes (sizes at sizes_addr), and the high bit says that
// another frame of the same message follows. Every frame is copied by
// libzmq, and sent with flags (plus ZMQ_SNDMORE within a message). It
// returns the frames sent, all of whole messages, plus, when it stopped at
// a message libzmq refused, the error number times 2^32 (EAGAIN: the queue
// is full).
#define PSLITE_PACK_MORE 0x80000000u
long long pslite_send_pack(void *sock, uintptr_t buf_addr, uintptr_t sizes_addr, int n, int flags);

// pslite_reader receives whole messages, a batch of them with one call:
// the first message, then as many more as have arrived already, as long as
// every frame so far was small and there is room. Frames of at most
// PSLITE_PACK_MAX bytes are copied, one after the other (each 8-aligned), into pack (and
// given back to libzmq), so that Go copies them all at once; the other
// frames (only in a batch's last message) stay open in msgs until the next
// call or pslite_reader_release.
#define PSLITE_PACK_MAX 4096
// PSLITE_BATCH_ROOM is the pack room a batch needs to take another message.
#define PSLITE_BATCH_ROOM (4 * PSLITE_PACK_MAX)
typedef struct {
	int cap;          // entries in msgs, size and packed: frames of a batch
	int msg_cap;      // frames of one message kept (the rest are dropped)
	int count;        // frames kept in this batch
	int open;         // entries of msgs that may hold a frame
	int unpacked;     // a frame of the batch was not packed: it ends the batch
	int drained;      // the batch ended because no more messages waited
	size_t used;      // bytes of pack in use
	zmq_msg_t *msgs;  // the frames, cap of them
	size_t *size;     // their sizes
	long long *packed;  // offset of a frame's copy in pack, or -1
	char *pack;       // pack_cap bytes
	size_t pack_cap;
	int nmsgs;        // messages in this batch
	int max_msgs;     // entries of the per-message arrays
	int *msg_first;   // index of a message's first frame in msgs
	int *msg_kept;    // its frames kept
	int *msg_frames;  // its frames received (kept or not)
	long long *msg_bytes;  // its bytes received
	char *msg_proc;   // its sender's process incarnation (PSLITE_PROC_LEN bytes each, NUL-ended)
} pslite_reader;

// PSLITE_PROC_LEN bounds the process incarnation a message's connection
// presented (its X-Pslite-Process property), NUL included; a longer one
// is cut.
#define PSLITE_PROC_LEN 40

// pslite_set_metadata adds "name:value" (prop, len bytes) to the properties
// a socket presents on the connections it makes (ZMQ_METADATA). It returns 0
// or minus the error number.
int pslite_set_metadata(void *sock, const char *prop, size_t len);

// pslite_reader_new allocates a reader keeping up to msg_cap frames of a
// message and batches of up to max_msgs messages.
pslite_reader *pslite_reader_new(int msg_cap, int max_msgs);

// pslite_reader_free closes the reader's frames and frees it.
void pslite_reader_free(pslite_reader *r);

// pslite_recv_batch receives the next message into r (with flags), then,
// without waiting, up to max_msgs-1 more that are there already. Up to
// msg_cap frames of each are kept, the rest are read and dropped (counted
// in msg_frames and msg_bytes). It returns the number of messages, or minus
// the error number.
int pslite_recv_batch(void *sock, pslite_reader *r, int flags);

// pslite_reader_release closes frame i of the batch.
void pslite_reader_release(pslite_reader *r, int i);

// pslite_reader_release_all closes every frame of the batch.
void pslite_reader_release_all(pslite_reader *r);

// pslite_reader_take moves frame i of the batch out of r into a
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
