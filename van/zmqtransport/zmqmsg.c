// Small helpers around libzmq's message API for zmqmsg.go: sending a frame
// without copying it, and sending or receiving a whole message with one
// call (each call from Go costs the runtime's system-call bookkeeping).
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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

// send_one sends one frame of a message, copied or (hint != 0) not.
static int send_one(void *sock, void *data, size_t size, uintptr_t hint, int flags) {
	if (hint != 0) {
		return pslite_send_frame(sock, data, size, flags, hint);
	}
	int rc;
	do {
		rc = zmq_send(sock, data, size, flags);
	} while (rc < 0 && zmq_errno() == EINTR);
	return rc < 0 ? -zmq_errno() : rc;
}

long long pslite_send_msg(void *sock, int n, int flags,
	uintptr_t data0, size_t size0, uintptr_t hint0,
	uintptr_t data1, size_t size1, uintptr_t hint1,
	uintptr_t data2, size_t size2, uintptr_t hint2,
	uintptr_t data3, size_t size3, uintptr_t hint3) {
	void *data[4] = {(void *)data0, (void *)data1, (void *)data2, (void *)data3};
	size_t size[4] = {size0, size1, size2, size3};
	uintptr_t hint[4] = {hint0, hint1, hint2, hint3};
	long long total = 0;
	for (int i = 0; i < n; i++) {
		int rc = send_one(sock, data[i], size[i], hint[i], i < n - 1 ? flags | ZMQ_SNDMORE : flags);
		if (rc < 0) {
			// The failed frame was released; release those never handed over.
			for (int j = i + 1; j < n; j++) {
				if (hint[j] != 0) {
					pslite_release_frame(hint[j]);
				}
			}
			return -((long long)(-rc) * 8 + i);
		}
		total += rc;
	}
	return total;
}

long long pslite_send_pack(void *sock, uintptr_t buf_addr, uintptr_t sizes_addr, int n, int flags) {
	const char *buf = (const char *)buf_addr;
	const uint32_t *sizes = (const uint32_t *)sizes_addr;
	int i = 0;
	while (i < n) {
		// One message: frames i..j.
		int j = i;
		while (j < n - 1 && (sizes[j] & PSLITE_PACK_MORE)) {
			j++;
		}
		const char *p = buf;
		for (int k = i; k <= j; k++) {
			size_t size = sizes[k] & ~PSLITE_PACK_MORE;
			int rc;
			do {
				rc = zmq_send(sock, p, size, k < j ? flags | ZMQ_SNDMORE : flags);
			} while (rc < 0 && zmq_errno() == EINTR);
			if (rc < 0) {
				// Only a message's first frame can be refused; the rest of
				// one whose first frame was taken is always taken.
				return ((long long)zmq_errno() << 32) | i;
			}
			p += size;
		}
		buf = p;
		i = j + 1;
	}
	return n;
}

pslite_reader *pslite_reader_new(int msg_cap, int max_msgs) {
	pslite_reader *r = calloc(1, sizeof *r);
	if (r == NULL) {
		return NULL;
	}
	r->msg_cap = msg_cap;
	r->cap = msg_cap + 128; // room for a batch of small messages
	r->max_msgs = max_msgs;
	r->msgs = calloc((size_t)r->cap, sizeof *r->msgs);
	r->size = calloc((size_t)r->cap, sizeof *r->size);
	r->packed = calloc((size_t)r->cap, sizeof *r->packed);
	r->pack_cap = 4 * PSLITE_BATCH_ROOM;
	r->pack = malloc(r->pack_cap);
	r->msg_first = calloc((size_t)max_msgs, sizeof *r->msg_first);
	r->msg_kept = calloc((size_t)max_msgs, sizeof *r->msg_kept);
	r->msg_frames = calloc((size_t)max_msgs, sizeof *r->msg_frames);
	r->msg_bytes = calloc((size_t)max_msgs, sizeof *r->msg_bytes);
	r->msg_proc = calloc((size_t)max_msgs, PSLITE_PROC_LEN);
	if (r->msgs == NULL || r->size == NULL || r->packed == NULL || r->pack == NULL ||
		r->msg_first == NULL || r->msg_kept == NULL || r->msg_frames == NULL || r->msg_bytes == NULL ||
		r->msg_proc == NULL) {
		pslite_reader_free(r);
		return NULL;
	}
	return r;
}

// close_open closes the frames of the last message.
static void close_open(pslite_reader *r) {
	for (int i = 0; i < r->open; i++) {
		zmq_msg_close(&r->msgs[i]);
	}
	r->open = 0;
}

void pslite_reader_free(pslite_reader *r) {
	if (r == NULL) {
		return;
	}
	if (r->msgs != NULL) {
		close_open(r);
	}
	free(r->msgs);
	free(r->size);
	free(r->packed);
	free(r->pack);
	free(r->msg_first);
	free(r->msg_kept);
	free(r->msg_frames);
	free(r->msg_bytes);
	free(r->msg_proc);
	free(r);
}

void pslite_reader_release_all(pslite_reader *r) {
	close_open(r);
}

void pslite_reader_release(pslite_reader *r, int i) {
	zmq_msg_close(&r->msgs[i]);
	zmq_msg_init(&r->msgs[i]);
}

zmq_msg_t *pslite_reader_take(pslite_reader *r, int i) {
	zmq_msg_t *m = malloc(sizeof *m);
	if (m == NULL) {
		return NULL;
	}
	zmq_msg_init(m);
	if (zmq_msg_move(m, &r->msgs[i]) != 0) {
		free(m);
		return NULL;
	}
	return m;
}

void pslite_msg_free(zmq_msg_t *m) {
	zmq_msg_close(m);
	free(m);
}

size_t pslite_msg_poison(zmq_msg_t *m) {
	size_t n = zmq_msg_size(m);
	memset(zmq_msg_data(m), 0xDB, n);
	return n;
}

// recv_one receives one message into r after the frames it holds; it
// returns 0, or minus the error number when no message was received.
static int recv_one(void *sock, pslite_reader *r, int flags) {
	int first = r->count, frames = 0;
	long long bytes = 0;
	zmq_msg_t drop;
	for (;;) {
		int keep = frames < r->msg_cap && r->count < r->cap;
		zmq_msg_t *m = keep ? &r->msgs[r->count] : &drop;
		zmq_msg_init(m);
		int rc;
		do {
			rc = zmq_msg_recv(m, sock, flags);
		} while (rc < 0 && zmq_errno() == EINTR);
		if (rc < 0) {
			int err = zmq_errno();
			zmq_msg_close(m);
			if (frames == 0) {
				return -err;
			}
			// Cannot happen within a message (libzmq delivers whole
			// messages); keep what was had.
			break;
		}
		flags &= ~ZMQ_DONTWAIT; // the rest of the message is there
		if (frames == 0) {
			// The connection's properties travel with every frame.
			char *proc = r->msg_proc + (size_t)r->nmsgs * PSLITE_PROC_LEN;
			const char *p = zmq_msg_gets(m, "X-Pslite-Process");
			proc[0] = 0;
			if (p != NULL) {
				strncpy(proc, p, PSLITE_PROC_LEN - 1);
				proc[PSLITE_PROC_LEN - 1] = 0;
			}
		}
		int more = zmq_msg_more(m);
		bytes += rc;
		frames++;
		if (!keep) {
			zmq_msg_close(&drop);
		} else {
			int i = r->count++;
			r->open = r->count;
			r->size[i] = (size_t)rc;
			r->packed[i] = -1;
			// Each frame starts 8-aligned, so that its keys and values
			// can be read in place.
			size_t at = (r->used + 7) & ~(size_t)7;
			if ((size_t)rc <= PSLITE_PACK_MAX && at + (size_t)rc <= r->pack_cap) {
				memcpy(r->pack + at, zmq_msg_data(m), (size_t)rc);
				r->packed[i] = (long long)at;
				r->used = at + (size_t)rc;
				zmq_msg_close(m); // copied: give it back now
				zmq_msg_init(m);
			} else {
				r->unpacked = 1;
			}
		}
		if (!more) {
			break;
		}
	}
	int k = r->nmsgs++;
	r->msg_first[k] = first;
	r->msg_kept[k] = r->count - first;
	r->msg_frames[k] = frames;
	r->msg_bytes[k] = bytes;
	if (frames > r->msg_cap) {
		r->unpacked = 1; // an oversized message ends the batch too
	}
	return 0;
}

int pslite_recv_batch(void *sock, pslite_reader *r, int flags) {
	close_open(r);
	r->count = 0;
	r->used = 0;
	r->nmsgs = 0;
	r->unpacked = 0;
	r->drained = 0;
	int rc = recv_one(sock, r, flags);
	if (rc < 0) {
		return rc;
	}
	while (r->nmsgs < r->max_msgs && !r->unpacked && r->cap - r->count >= r->msg_cap &&
		r->pack_cap - r->used >= PSLITE_BATCH_ROOM) {
		if (recv_one(sock, r, ZMQ_DONTWAIT) < 0) {
			r->drained = 1;
			break;
		}
	}
	return r->nmsgs;
}

// ZMQ_METADATA is in libzmq's draft API in its headers (4.3), and in its
// library when built with it; without it setting it fails (EINVAL).
#ifndef ZMQ_METADATA
#define ZMQ_METADATA 95
#endif

int pslite_set_metadata(void *sock, const char *prop, size_t len) {
	return zmq_setsockopt(sock, ZMQ_METADATA, prop, len) == 0 ? 0 : -zmq_errno();
}

int pslite_socket_type(void *sock) {
	int type = -1;
	size_t len = sizeof type;
	if (zmq_getsockopt(sock, ZMQ_TYPE, &type, &len) != 0) {
		return -1;
	}
	return type;
}

int pslite_keep_memory(void) {
#ifdef __GLIBC__
	return mallopt(M_ARENA_MAX, 1) && mallopt(M_MMAP_MAX, 0) && mallopt(M_TRIM_THRESHOLD, 0x7fffffff);
#else
	return 0;
#endif
}

void pslite_release_memory(void) {
#ifdef __GLIBC__
	malloc_trim(0);
#endif
}
