// SPDX-License-Identifier: GPL-2.0-only
/*
 * gpunvme_fuzz: seeded random call sequences against the gpunvme module (and
 * the GPU stand-in), from several processes at once, for a bounded time.
 *
 *   gpunvme_fuzz [--seed N] [--procs P] [--seconds S]
 *   gpunvme_fuzz --seed N --worker W --sequence K --replay   (one sequence, verbose)
 *
 * Without arguments the settings come from $GPUNVME_DIR/fuzz.env
 * (FUZZ_SEED=, FUZZ_PROCS=, FUZZ_SECONDS=; the VM suite writes it), else
 * seed = time, 4 processes, 30 s.
 *
 * What it does. The parent loads gpunvme (and gpunvme_standin when it is
 * there), binds the controller at $GPUNVME_BDF and the edu device, then
 * forks P workers. Worker W runs sequences 0, 1, 2, ...; sequence K starts
 * from the seed mix(seed, W, K), so any sequence can be run again alone.
 * A sequence is 10..79 random calls, then everything it holds is closed:
 *   open of /dev/gpunvme0 and the namespace nodes (and wild names, flags),
 *   dup, close; every ioctl of uapi/gpunvme.h (GET_INFO, CLAIM_OWNER,
 *   CREATE_QPAIR shared and raw with wild depths and flags, DESTROY_QPAIR,
 *   MAP_HOST of valid, unaligned, huge, NULL, read-only, PROT_NONE, shared
 *   memfd, stack and device-mapped ranges, UNMAP, MAP_DMABUF of udmabufs,
 *   of gpunvme's own exports, of the stand-in's no-P2P buffer and of wild
 *   fds, EXPORT of each kind) with valid, boundary and wild arguments
 *   (wrong size/version, random bytes, NULL, read-only, kernel and half-
 *   mapped argument pointers), wild ioctl numbers and sizes, read/write/
 *   poll/lseek on the nodes, dma-buf ioctls and mmap of the exports; the
 *   per-file quotas (module parameters) set to small values, none, or
 *   their defaults meanwhile (EDQUOT), and CLAIM_OWNER then close, which
 *   resets the controller before other files are admitted;
 *   mmap/munmap at every offset the UAPI defines (and wild ones, partial
 *   lengths, MAP_PRIVATE, other files' queues), partial munmap, reads and
 *   writes of the mapped pages (SIGBUS/SIGSEGV caught); random SQEs written
 *   into a shared pair's shadow SQ and its doorbell cell rung: about half
 *   are valid reads/writes/flushes into the worker's own MAP_HOST or udmabuf
 *   buffers (PRP1, PRP2, PRP lists in the pool), so real I/O happens, the
 *   rest are mutated or random; fork (the child does a few calls on the
 *   inherited fds and mappings, then exits, or is killed); SIGKILL of a
 *   sibling worker mid-sequence (the parent starts it again); worker 0 also
 *   unbinds and rebinds the controller through sysfs and the edu device
 *   from the stand-in; and the stand-in imports the exports (and udmabufs),
 *   DMAs into and out of them, releases them, or has them revoked by a
 *   destroy, close or unbind.
 *
 * What it never does, on purpose: owner mode is trusted by design (a raw
 * pair's SQ and doorbell page are the real ones; an SQE there can make the
 * controller DMA anywhere the IOMMU lets it, which would corrupt the VM,
 * not find a module bug). So for raw pairs (and anything exported from or
 * imported into the stand-in from them) it only creates, maps, reads,
 * exports, imports, releases and destroys: it never writes their mapped
 * pages, never rings their doorbell and never lets the stand-in write to
 * them. Nor does it use the stand-in's RAW_WRITE32 (DMA to any bus address).
 *
 * What it checks and prints (KTAP): no worker died other than by a
 * sibling's SIGKILL, no call took longer than --stuck seconds (the kernel
 * stack of the stuck task is printed), the kernel log (read live from
 * /dev/kmsg, so nothing is lost to a wrapped ring buffer) has no warning,
 * BUG, KASAN/KFENCE/lockdep/DMA-API report or call trace, and the run
 * exercised the driver (calls made, real I/O completed successfully). Then
 * the figures: sequences, calls, processes, seconds, each distinct errno
 * (with the calls that got it) and NVMe status seen. Every worker keeps the
 * seed of the sequence it is in and its last calls in shared memory; on any
 * failure they are printed with a "# replay:" command line.
 */
#include <linux/dma-buf.h>
#include <linux/udmabuf.h>
#include <poll.h>
#include <regex.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "nvme_io.h"
#include "standin_uapi.h"

#define PAGE 4096ul
#define MAXW 32		/* workers */
#define NERR 256	/* errno values counted; 200 + signal for faulting touches */
#define ERR_SIG 200
#define RING 16		/* last calls kept per worker */
#define RINGLEN 120

enum op {
	OP_OPEN, OP_OPEN_NS, OP_OPEN_WILD, OP_CLOSE, OP_DUP, OP_GET_INFO, OP_CLAIM, OP_CREATE, OP_DESTROY,
	OP_MAP_HOST, OP_UNMAP, OP_MAP_DMABUF, OP_EXPORT, OP_WILD_IOCTL, OP_FOPS,
	OP_MMAP, OP_MUNMAP, OP_TOUCH, OP_SUBMIT, OP_FORK, OP_KILL, OP_UNBIND,
	OP_BIND, OP_EDU_REBIND, OP_SI_OPEN, OP_SI_IMPORT, OP_SI_DMA, OP_SI_RELEASE,
	OP_SI_NOP2P, OP_UDMABUF, OP_DBUF_IOCTL, OP_DBUF_MMAP, OP_BUF_MUNMAP, OP_QUOTA, NOPS
};
static const char *const op_name[NOPS] = {
	"open_ctrl", "open_ns", "open_wild", "close", "dup", "GET_INFO", "CLAIM_OWNER", "CREATE_QPAIR", "DESTROY_QPAIR",
	"MAP_HOST", "UNMAP", "MAP_DMABUF", "EXPORT", "wild_ioctl", "fops",
	"mmap", "munmap", "touch", "submit", "fork", "kill", "unbind",
	"bind", "edu_rebind", "standin_open", "standin_IMPORT", "standin_DMA", "standin_RELEASE",
	"standin_NO_P2P", "udmabuf", "dmabuf_ioctl", "dmabuf_mmap", "buf_munmap", "quota",
};
/* Relative weights of the ops a sequence picks (fork children skip some). */
static const int op_weight[NOPS] = {
	[OP_OPEN] = 10, [OP_CLOSE] = 3, [OP_DUP] = 2, [OP_GET_INFO] = 4, [OP_CLAIM] = 1,
	[OP_CREATE] = 10, [OP_DESTROY] = 4, [OP_MAP_HOST] = 8, [OP_UNMAP] = 4,
	[OP_MAP_DMABUF] = 4, [OP_EXPORT] = 6, [OP_WILD_IOCTL] = 4, [OP_FOPS] = 2,
	[OP_MMAP] = 12, [OP_MUNMAP] = 4, [OP_TOUCH] = 8, [OP_SUBMIT] = 14, [OP_FORK] = 2,
	[OP_KILL] = 1, [OP_UNBIND] = 3, [OP_BIND] = 1, [OP_EDU_REBIND] = 1,
	[OP_SI_OPEN] = 1, [OP_SI_IMPORT] = 4, [OP_SI_DMA] = 3, [OP_SI_RELEASE] = 2,
	[OP_SI_NOP2P] = 1, [OP_UDMABUF] = 3, [OP_DBUF_IOCTL] = 2, [OP_DBUF_MMAP] = 2,
	[OP_BUF_MUNMAP] = 1, [OP_QUOTA] = 1,
};

/* ---- shared statistics (one page-aligned block, MAP_SHARED) ------------- */

struct wstat {
	volatile pid_t pid;
	volatile uint64_t seq, seq_seed, prev_seq;	/* the sequence it is in */
	volatile uint64_t opno;			/* call index in it */
	volatile uint64_t op_start_ms;		/* 0: not in a call */
	volatile uint32_t ring_pos;
	volatile int stuck_reported;
	uint64_t sequences, calls, forks, kills, restarts, unbinds;
	uint64_t sqes, sqes_valid, cqes, cqes_ok, io_timeouts;
	uint32_t err[NOPS][NERR];
	uint32_t status[8][256];	/* CQE status (SCT, SC) seen */
	char ring[RING][RINGLEN];
};

/*
 * Which pids a sibling sent SIGKILL to, indexed by pid % KILLED_SLOTS and
 * written before the kill. Keyed by pid, not by worker slot: a sibling that
 * read a worker's pid before it was reaped and restarted sends a stale kill
 * that fails with ESRCH, and must not clear the expectation of a kill sent to
 * the restarted worker.
 */
#define KILLED_SLOTS 4096

struct gstat {
	volatile uint64_t start_ms, deadline_ms;
	volatile int stop;
	int procs;
	uint64_t seed;
	volatile pid_t killed[KILLED_SLOTS];
	struct wstat w[MAXW];
};

static struct gstat *G;
static struct wstat *W;		/* this worker's */
static int me = -1;		/* worker index */
static int in_child;		/* a fork child of a worker */
static int verbose;
static int have_standin;
static int no_unbind, no_kill;
static const char *bdf;

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- random numbers --------------------------------------------------- */

static uint64_t rs;
static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}
static uint64_t rnd(void) { return splitmix(&rs); }
static uint32_t rn(uint32_t n) { return n ? (uint32_t)(rnd() % n) : 0; }
static int pct(int p) { return rn(100) < (uint32_t)p; }
static uint64_t seq_seed(uint64_t seed, int w, uint64_t k)
{
	uint64_t x = seed ^ ((uint64_t)(w + 1) * 0xD1B54A32D192ED03ull) ^ ((k + 1) * 0x8CB92BA72F3D8DD7ull);
	return splitmix(&x);
}
/* A "wild" 64-bit value: boundaries more often than uniform noise. */
static uint64_t wild64(void)
{
	static const uint64_t v[] = { 0, 1, 2, 3, 7, 8, 63, 64, 4095, 4096, 4097, 65535, 65536,
		0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ull, 1ull << 52, 0x7fffffffffffffffull,
		0x8000000000000000ull, 0xfffffffffffff000ull, ~0ull };
	switch (rn(4)) {
	case 0: return v[rn(sizeof(v) / sizeof(v[0]))];
	case 1: return rnd();
	case 2: return rnd() & 0xffff;
	default: return v[rn(sizeof(v) / sizeof(v[0]))] + rn(3) - 1;
	}
}

/* ---- call records ------------------------------------------------------- */

static void ring(const char *fmt, ...)
{
	char *slot;
	va_list ap;
	if (!W)
		return;
	slot = W->ring[__atomic_fetch_add(&W->ring_pos, 1, __ATOMIC_RELAXED) % RING];
	va_start(ap, fmt);
	vsnprintf(slot, RINGLEN, fmt, ap);
	va_end(ap);
	if (verbose) {
		printf("# [w%d%s] %s\n", me, in_child ? " child" : "", slot);
		fflush(stdout);
	}
}

static int cur_op;
static char cur_desc[96];
/* Start a call: its description goes to the ring (and its start time to the
 * stuck watch) before the call, so a hang shows what hung. */
static void begin(int op, const char *fmt, ...)
{
	va_list ap;
	cur_op = op;
	va_start(ap, fmt);
	vsnprintf(cur_desc, sizeof(cur_desc), fmt, ap);
	va_end(ap);
	W->opno++;
	W->op_start_ms = now_ms();
	ring("s%llu#%llu %s %s ...", (unsigned long long)W->seq, (unsigned long long)W->opno,
	     op_name[op], cur_desc);
}
/* End it: r < 0 means failed with errno (or -(ERR_SIG + sig) for a fault). */
static long end(long r)
{
	int e = 0;
	if (r < 0)
		e = r <= -ERR_SIG ? (int)-r : errno;
	if (e < 0 || e >= NERR)
		e = NERR - 1;
	__atomic_fetch_add(&W->err[cur_op][e], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&W->calls, 1, __ATOMIC_RELAXED);
	W->op_start_ms = 0;
	ring("s%llu#%llu %s %s = %ld%s%s", (unsigned long long)W->seq, (unsigned long long)W->opno,
	     op_name[cur_op], cur_desc, r, e ? " " : "", e >= ERR_SIG ? strsignal(e - ERR_SIG) : e ? (strerrorname_np(e) ?: "?") : "");
	if (r < 0 && e < ERR_SIG)
		errno = e;
	return r;
}
#define CALL(op, expr, ...) (begin(op, __VA_ARGS__), end((long)(expr)))

/* ---- what a worker holds -------------------------------------------------- */

#define MAXF 4
#define MAXQ 6
#define MAXB 8
#define MAXM 24
#define MAXD 8
#define MAXI 8
#define MAXKIDS 4

struct qrec {
	int used, raw, live;
	struct gpunvme_qpair_create c;
	uint32_t tail, head, phase;
	uint16_t cid;
};
struct frec {
	int fd;
	uint32_t node_nsid;
	int owner, have_info;
	struct gpunvme_info info;
	struct qrec q[MAXQ];
};
struct brec {
	int used, fi, io_ok, dmabuf;
	uint32_t handle;
	uint8_t *p;		/* our mapping to munmap at cleanup, or NULL */
	size_t maplen;
	uint32_t npages;
	uint64_t *dma;
};
struct mrec {
	int used, write_ok, fi, kind;
	uint16_t qid;
	uint8_t *addr;
	size_t len;
	uint64_t mask;		/* mapped pages (first 64) */
};
struct drec {
	int fd, write_ok, kind;	/* kind: 1 export, 2 udmabuf, 3 no-P2P */
	uint64_t len;
	uint8_t *p;		/* udmabuf's memfd mapping */
	int memfd;
};
struct irec {
	int used, write_ok;
	uint32_t handle;
	uint64_t len;
};

static struct frec F[MAXF];
static struct brec B[MAXB];
static struct mrec M[MAXM];
static struct drec D[MAXD];
static struct irec I[MAXI];
static int sfd = -1;		/* /dev/gpunvme_standin */
static pid_t kids[MAXKIDS];
static uint8_t *arena;		/* [RW][RO][RW][NONE]: argument placements */
#define ARENA_RO (arena + PAGE)
#define ARENA_END (arena + 3 * PAGE)	/* the PROT_NONE page starts here */

static void hold_init(void)
{
	for (int i = 0; i < MAXF; i++)
		F[i].fd = -1;
	for (int i = 0; i < MAXD; i++)
		D[i].fd = -1, D[i].memfd = -1;
	memset(B, 0, sizeof(B));
	memset(M, 0, sizeof(M));
	memset(I, 0, sizeof(I));
}

static int pick_file(void)
{
	int c[MAXF], n = 0;
	for (int i = 0; i < MAXF; i++)
		if (F[i].fd >= 0)
			c[n++] = i;
	return n ? c[rn(n)] : -1;
}
static int free_file(void)
{
	for (int i = 0; i < MAXF; i++)
		if (F[i].fd < 0)
			return i;
	return -1;
}
/* A queue record of file fi (live ones preferred), or -1. */
static int pick_q(int fi, int want_live)
{
	int c[MAXQ], n = 0;
	for (int i = 0; i < MAXQ; i++)
		if (F[fi].q[i].used && (!want_live || F[fi].q[i].live))
			c[n++] = i;
	return n ? c[rn(n)] : -1;
}
static int free_slot_q(int fi)
{
	for (int i = 0; i < MAXQ; i++)
		if (!F[fi].q[i].used)
			return i;
	/* Reuse a destroyed one. */
	for (int i = 0; i < MAXQ; i++)
		if (!F[fi].q[i].live)
			return i;
	return -1;
}

/* ---- argument placement: valid, NULL, read-only, half-mapped, kernel ---- */

enum { PL_OK, PL_NULL, PL_RO, PL_HALF, PL_KERNEL, PL_LOW };
static const char *const pl_name[] = { "", " arg=NULL", " arg=RO", " arg=half", " arg=kernel", " arg=low" };

static int pick_placement(void)
{
	int r = rn(100);
	if (r < 86) return PL_OK;
	if (r < 89) return PL_NULL;
	if (r < 94) return PL_RO;
	if (r < 97) return PL_HALF;
	if (r < 99) return PL_KERNEL;
	return PL_LOW;
}
/* Where to pass a struct of `len` bytes now held in `s`. */
static void *place(void *s, size_t len, int how)
{
	switch (how) {
	case PL_NULL: return NULL;
	case PL_RO:
		mprotect(ARENA_RO, PAGE, PROT_READ | PROT_WRITE);
		memcpy(ARENA_RO, s, len);
		mprotect(ARENA_RO, PAGE, PROT_READ);
		return ARENA_RO;
	case PL_HALF: {
		/* Straddles into the PROT_NONE page. */
		uint8_t *p = ARENA_END - len / 2;
		memcpy(p, s, len / 2);
		return p;
	}
	case PL_KERNEL: return (void *)0xffff888000001000ull;
	case PL_LOW: return (void *)0x1000;
	default: return s;
	}
}

/* Maybe break a struct's header or a reserved field (15%). */
static const char *mangle_hdr(void *s, size_t len)
{
	uint32_t *h = s;
	if (!pct(15))
		return "";
	switch (rn(5)) {
	case 0: h[0] = (uint32_t)wild64(); return " size=wild";
	case 1: h[0] = len + (rn(2) ? 8 : -8); return " size=+-8";
	case 2: h[1] = rn(2) ? 1 : (uint32_t)wild64(); return " version=wild";
	case 3: ((uint8_t *)s)[len - 1 - rn(16)] = 1 + rn(255); return " tail=nonzero";
	/* Not in the middle: a flipped length or output pointer would have the
	 * kernel write past our own buffers, at our request. */
	default: ((uint8_t *)s)[len - 1 - rn(16)] ^= 1 << rn(8); return " bitflip";
	}
}

/* An ioctl with a struct argument placed somewhere. */
static long ioctl_placed(int op, int fd, unsigned long cmd, void *s, size_t len, const char *what)
{
	int how = pick_placement();
	const char *m = mangle_hdr(s, len);
	void *arg = place(s, len, how);
	return CALL(op, ioctl(fd, cmd, arg), "fd=%d %s%s%s", fd, what, m, pl_name[how]) < 0 ? -1 : (how == PL_OK ? 0 : 1);
}

/* ---- ops ------------------------------------------------------------------ */

static void op_open(void)
{
	static const char *const wild[] = { "/dev/gpunvme0n2", "/dev/gpunvme0n4", "/dev/gpunvme1",
		"/dev/gpunvme_standin" };
	static const int flags[] = { O_RDWR, O_RDWR, O_RDWR, O_RDWR | O_CLOEXEC, O_RDONLY, O_WRONLY,
		O_RDWR | O_NONBLOCK, O_RDWR | O_SYNC };
	int fi = free_file();
	int r = rn(100);
	const char *path = r < 60 ? "/dev/gpunvme0" : r < 85 ? "/dev/gpunvme0n1" : wild[rn(4)];
	int fl = flags[rn(sizeof(flags) / sizeof(flags[0]))];
	int fd = CALL(r < 60 ? OP_OPEN : r < 85 ? OP_OPEN_NS : OP_OPEN_WILD, open(path, fl), "%s flags=%#x", path, fl);
	if (fd < 0)
		return;
	if (fi < 0 || strstr(path, "standin")) {
		close(fd);
		return;
	}
	memset(&F[fi], 0, sizeof(F[fi]));
	F[fi].fd = fd;
	struct gpunvme_info info;
	UAPI_INIT(info);
	if (CALL(OP_GET_INFO, ioctl(fd, GPUNVME_IOC_GET_INFO, &info), "fd=%d (after open)", fd) == 0) {
		F[fi].info = info;
		F[fi].have_info = 1;
		F[fi].node_nsid = info.node_nsid;
	}
}

static void drop_file_records(int fi)
{
	for (int i = 0; i < MAXB; i++)
		if (B[i].used && B[i].fi == fi)
			B[i].io_ok = 0, B[i].fi = -1;
	for (int i = 0; i < MAXM; i++)
		if (M[i].used && M[i].fi == fi)
			M[i].fi = -1;	/* stays mapped: later touches fault or read */
	F[fi].fd = -1;
}

static void op_close(void)
{
	int r = rn(3);
	if (r == 0) {	/* a dma-buf */
		int d = rn(MAXD);
		if (D[d].fd >= 0) {
			CALL(OP_CLOSE, close(D[d].fd), "dmabuf fd=%d", D[d].fd);
			D[d].fd = -1;
			return;
		}
	}
	int fi = pick_file();
	if (fi < 0)
		return;
	CALL(OP_CLOSE, close(F[fi].fd), "fd=%d", F[fi].fd);
	drop_file_records(fi);
}

static void op_dup(void)
{
	int fi = pick_file();
	if (fi < 0)
		return;
	int nfd = CALL(OP_DUP, dup(F[fi].fd), "fd=%d", F[fi].fd);
	if (nfd < 0)
		return;
	if (rn(2)) {
		close(nfd);
	} else {	/* same file, new number: the old one goes */
		close(F[fi].fd);
		F[fi].fd = nfd;
	}
}

static int op_get_info(int fi)
{
	struct gpunvme_info info;
	UAPI_INIT(info);
	int r = ioctl_placed(OP_GET_INFO, F[fi].fd, GPUNVME_IOC_GET_INFO, &info, sizeof(info), "");
	if (r == 0 && info.size == sizeof(info)) {
		F[fi].info = info;
		F[fi].have_info = 1;
		F[fi].node_nsid = info.node_nsid;
	}
	return r;
}

static void op_claim(int fi)
{
	struct gpunvme_owner o;
	UAPI_INIT(o);
	if (pct(10))
		o.flags = (uint32_t)wild64();
	if (ioctl_placed(OP_CLAIM, F[fi].fd, GPUNVME_IOC_CLAIM_OWNER, &o, sizeof(o), "") == 0)
		F[fi].owner = 1;
}

static void op_create(int fi)
{
	struct gpunvme_qpair_create c;
	uint32_t max = F[fi].have_info ? F[fi].info.max_queue_entries : 64;
	UAPI_INIT(c);
	switch (rn(10)) {
	case 0: c.depth = 2; break;
	case 1: c.depth = max; break;
	case 2: c.depth = rn(2) ? max + 1 : rn(2); break;
	case 3: c.depth = (uint32_t)wild64(); break;
	default: c.depth = 2 + rn(max > 64 ? 63 : max - 1); break;
	}
	int r = rn(100);
	if (r < 80)
		c.flags = 0;
	else if (r < 90)
		c.flags = GPUNVME_QPAIR_RAW;
	else if (r < 94) {
		/* The CQ in a mapping of the file: a handle it may or may not have. */
		c.flags = GPUNVME_QPAIR_RAW | GPUNVME_QPAIR_CQ_IN_MAP;
		c.cq_handle = rn(2) ? 1 + rn(8) : (uint32_t)wild64();
	} else
		c.flags = (uint32_t)wild64();
	char what[80];
	snprintf(what, sizeof(what), "depth=%u flags=%#x cq_handle=%u", c.depth, c.flags, c.cq_handle);
	uint32_t flags = c.flags;
	if (ioctl_placed(OP_CREATE, F[fi].fd, GPUNVME_IOC_CREATE_QPAIR, &c, sizeof(c), what) != 0)
		return;
	int qi = free_slot_q(fi);
	if (qi < 0)
		return;	/* the file keeps it until close */
	struct qrec *q = &F[fi].q[qi];
	memset(q, 0, sizeof(*q));
	q->used = q->live = 1;
	q->c = c;
	/* Raw (owner) pairs are never written: see the header. A pair without a
	 * PRP pool is treated as raw whatever the flags said. */
	q->raw = (flags & GPUNVME_QPAIR_RAW) || !c.prp_size;
	q->phase = 1;
}

static void op_destroy(int fi)
{
	struct gpunvme_qpair_destroy d;
	int qi = pick_q(fi, 0);
	UAPI_INIT(d);
	d.qid = qi >= 0 && pct(85) ? F[fi].q[qi].c.qid : (uint16_t)wild64();
	char what[32];
	snprintf(what, sizeof(what), "qid=%u", d.qid);
	if (ioctl_placed(OP_DESTROY, F[fi].fd, GPUNVME_IOC_DESTROY_QPAIR, &d, sizeof(d), what) == 0)
		for (int i = 0; i < MAXQ; i++)
			if (F[fi].q[i].used && F[fi].q[i].c.qid == d.qid)
				F[fi].q[i].live = 0;
}

static int free_b(void)
{
	for (int i = 0; i < MAXB; i++)
		if (!B[i].used)
			return i;
	return -1;
}

static void op_map_host(int fi)
{
	int bi = free_b();
	struct gpunvme_map_host m;
	uint64_t npages = 1 + rn(rn(4) ? 8 : 64);
	uint8_t *p = NULL;
	size_t maplen = 0;
	int valid = 0, kind = rn(100);
	const char *what;
	uint64_t *dma;
	static uint64_t stackpage[1024] __attribute__((aligned(4096)));

	if (kind < 2)
		npages = GPUNVME_MAX_MAP_BYTES / PAGE;	/* the largest allowed */
	UAPI_INIT(m);
	m.len = npages * PAGE;
	if (kind < 60) {
		what = "anon";
		maplen = m.len;
		p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		valid = 1;
	} else if (kind < 66) {
		what = "memfd-shared";
		int mfd = memfd_create("fuzz", MFD_CLOEXEC);
		maplen = m.len;
		if (mfd >= 0 && !ftruncate(mfd, maplen))
			p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
		if (mfd >= 0)
			close(mfd);
		valid = 1;
	} else if (kind < 72) {
		what = "read-only";
		maplen = m.len;
		p = mmap(NULL, maplen, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	} else if (kind < 76) {
		what = "PROT_NONE";
		maplen = m.len;
		p = mmap(NULL, maplen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	} else if (kind < 80) {
		what = "unaligned";
		maplen = m.len + PAGE;
		p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		m.addr = (uintptr_t)p + 8 * (1 + rn(511));
	} else if (kind < 84) {
		what = "device-mapping";
		int mi = rn(MAXM);
		if (M[mi].used) {
			m.addr = (uintptr_t)M[mi].addr;
			m.len = M[mi].len & ~(PAGE - 1);
		}
	} else if (kind < 86) {
		what = "static";
		m.addr = (uintptr_t)stackpage;
		m.len = sizeof(stackpage);
	} else if (kind < 92) {
		what = "wild-len";
		maplen = 2 * PAGE;
		p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		m.len = wild64();
	} else {
		what = "wild-addr";
		m.addr = wild64() & ~(rn(2) ? PAGE - 1 : 0);
		m.len = rn(2) ? PAGE : wild64();
	}
	if (p == MAP_FAILED)
		p = NULL, maplen = 0;
	if (p && !m.addr)
		m.addr = (uintptr_t)p;
	/* The DMA address array: right-sized, NULL, read-only or too short. */
	size_t n = m.len / PAGE;
	if (n > GPUNVME_MAX_MAP_BYTES / PAGE)
		n = 1;
	dma = calloc(n ? n : 1, sizeof(uint64_t));
	m.dma_addrs = (uintptr_t)dma;
	switch (rn(20)) {
	case 0: m.dma_addrs = 0; valid = 0; break;
	case 1: m.dma_addrs = (uintptr_t)ARENA_RO; valid = 0; break;
	case 2: m.dma_addrs = (uintptr_t)(ARENA_END - 8); valid = 0; break; /* too short */
	}
	char desc[96];
	snprintf(desc, sizeof(desc), "%s addr=%#llx len=%#llx", what, (unsigned long long)m.addr,
		 (unsigned long long)m.len);
	int r = ioctl_placed(OP_MAP_HOST, F[fi].fd, GPUNVME_IOC_MAP_HOST, &m, sizeof(m), desc);
	if (r != 0 || bi < 0) {
		if (r == 0 && p)
			p = NULL;	/* pinned, no record: stays until close */
		if (p)
			munmap(p, maplen);
		free(dma);
		return;
	}
	if (p && valid) /* make the pages ours for real before the device writes them */
		memset(p, 0xa5, m.len);
	B[bi] = (struct brec){ .used = 1, .fi = fi, .io_ok = valid && m.dma_addrs == (uintptr_t)dma,
			       .handle = m.handle, .p = p, .maplen = maplen, .npages = m.len / PAGE, .dma = dma };
}

static void op_unmap(int fi)
{
	struct gpunvme_unmap u;
	int bi = rn(MAXB);
	UAPI_INIT(u);
	u.handle = B[bi].used && B[bi].fi == fi && pct(85) ? B[bi].handle : (uint32_t)wild64();
	char what[32];
	snprintf(what, sizeof(what), "handle=%u", u.handle);
	if (ioctl_placed(OP_UNMAP, F[fi].fd, GPUNVME_IOC_UNMAP, &u, sizeof(u), what) == 0 &&
	    B[bi].used && B[bi].fi == fi && B[bi].handle == u.handle) {
		if (B[bi].p)
			munmap(B[bi].p, B[bi].maplen);
		free(B[bi].dma);
		memset(&B[bi], 0, sizeof(B[bi]));
	}
}

static int pick_d(void)
{
	int c[MAXD], n = 0;
	for (int i = 0; i < MAXD; i++)
		if (D[i].fd >= 0)
			c[n++] = i;
	return n ? c[rn(n)] : -1;
}
static int free_d(void)
{
	for (int i = 0; i < MAXD; i++)
		if (D[i].fd < 0)
			return i;
	return -1;
}

static void op_map_dmabuf(int fi)
{
	int di = pick_d(), bi = free_b(), valid = 0;
	struct gpunvme_map_dmabuf m;
	UAPI_INIT(m);
	if (di >= 0 && pct(80)) {
		m.fd = D[di].fd;
		valid = D[di].write_ok;
	} else {
		static const int wild[] = { -1, 0, 1, 2, 1023, 0x7fffffff };
		m.fd = rn(2) ? F[fi].fd : wild[rn(6)];
	}
	uint64_t want = di >= 0 ? (D[di].len + PAGE - 1) / PAGE : 1;
	switch (rn(8)) {
	case 0: m.max_pages = 0; break;
	case 1: m.max_pages = want > 1 ? want - 1 : 0; break;
	case 2: m.max_pages = wild64(); break;
	case 3: m.max_pages = GPUNVME_MAX_MAP_BYTES / PAGE + rn(2); break;
	default: m.max_pages = want; break;
	}
	uint64_t n = m.max_pages && m.max_pages <= GPUNVME_MAX_MAP_BYTES / PAGE ? m.max_pages : 1;
	uint64_t *dma = calloc(n, sizeof(uint64_t));
	m.dma_addrs = rn(12) ? (uintptr_t)dma : (rn(2) ? 0 : (uintptr_t)ARENA_RO);
	char what[64];
	snprintf(what, sizeof(what), "dmabuf=%d max_pages=%llu", m.fd, (unsigned long long)m.max_pages);
	if (ioctl_placed(OP_MAP_DMABUF, F[fi].fd, GPUNVME_IOC_MAP_DMABUF, &m, sizeof(m), what) != 0 || bi < 0) {
		free(dma);
		return;
	}
	B[bi] = (struct brec){ .used = 1, .fi = fi, .dmabuf = 1, .handle = m.handle, .npages = m.len / PAGE,
			       .io_ok = valid && m.dma_addrs == (uintptr_t)dma && m.len / PAGE <= n, .dma = dma };
}

static void op_export(int fi)
{
	struct gpunvme_export e;
	int qi = pick_q(fi, 0), di = free_d();
	UAPI_INIT(e);
	e.qid = qi >= 0 && pct(90) ? F[fi].q[qi].c.qid : (uint16_t)wild64();
	e.kind = pct(85) ? 1 + rn(4) : (uint16_t)wild64();
	e.flags = pct(85) ? (uint32_t)(O_CLOEXEC | O_RDWR) : pct(50) ? 0 : (uint32_t)wild64();
	char what[64];
	snprintf(what, sizeof(what), "qid=%u kind=%u flags=%#x", e.qid, e.kind, e.flags);
	if (ioctl_placed(OP_EXPORT, F[fi].fd, GPUNVME_IOC_EXPORT, &e, sizeof(e), what) != 0)
		return;
	if (di < 0) {
		close(e.fd);
		return;
	}
	/* Writable by the stand-in or for I/O only if it is a shared pair's. */
	int shared = 0;
	for (int i = 0; i < MAXQ; i++)
		if (F[fi].q[i].used && F[fi].q[i].live && F[fi].q[i].c.qid == e.qid && !F[fi].q[i].raw)
			shared = 1;
	D[di] = (struct drec){ .fd = e.fd, .write_ok = shared, .kind = 1, .len = e.length, .memfd = -1 };
}

static void op_wild_ioctl(void)
{
	static const unsigned long valid[] = { GPUNVME_IOC_GET_INFO, GPUNVME_IOC_CREATE_QPAIR,
		GPUNVME_IOC_DESTROY_QPAIR, GPUNVME_IOC_MAP_HOST, GPUNVME_IOC_UNMAP, GPUNVME_IOC_EXPORT,
		GPUNVME_IOC_MAP_DMABUF, GPUNVME_IOC_CLAIM_OWNER };
	int fi = pick_file();
	if (fi < 0)
		return;
	unsigned long cmd;
	switch (rn(5)) {
	case 0: cmd = _IOC(rn(4), GPUNVME_IOC_MAGIC, rn(16), rn(1 << 14)); break;
	case 1: cmd = (valid[rn(8)] & ~(_IOC_SIZEMASK << _IOC_SIZESHIFT)) |
		      ((unsigned long)rn(512) << _IOC_SIZESHIFT); break;	/* wrong size */
	case 2: cmd = (valid[rn(8)] & ~(_IOC_DIRMASK << _IOC_DIRSHIFT)) |
		      ((unsigned long)rn(4) << _IOC_DIRSHIFT); break;	/* wrong direction */
	case 3: cmd = (uint32_t)rnd(); break;
	default: cmd = valid[rn(8)]; break;	/* valid number, random bytes */
	}
	uint8_t *buf = arena;
	for (int i = 0; i < 512; i++)
		buf[i] = rn(4) ? 0 : (uint8_t)rnd();
	/* A plausible header half of the time, so the body gets parsed. */
	if (rn(2)) {
		((uint32_t *)buf)[0] = _IOC_SIZE(cmd);
		((uint32_t *)buf)[1] = GPUNVME_UAPI_VERSION;
	}
	/* No random output array pointer: the kernel would write wherever it
	 * points, our own data included (NULL gets EFAULT). */
	if (cmd == GPUNVME_IOC_MAP_HOST)
		memset(buf + offsetof(struct gpunvme_map_host, dma_addrs), 0, 8);
	if (cmd == GPUNVME_IOC_MAP_DMABUF)
		memset(buf + offsetof(struct gpunvme_map_dmabuf, dma_addrs), 0, 8);
	int how = pick_placement();
	void *arg = how == PL_OK ? buf : place(buf, 64, how);
	CALL(OP_WILD_IOCTL, ioctl(F[fi].fd, cmd, arg), "fd=%d cmd=%#lx%s", F[fi].fd, cmd, pl_name[how]);
}

static void op_fops(void)
{
	int fd, isd = 0;
	int di = pick_d(), fi = pick_file();
	if (di >= 0 && (fi < 0 || rn(2)))
		fd = D[di].fd, isd = 1;
	else if (fi >= 0)
		fd = F[fi].fd;
	else
		return;
	char buf[64];
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT | POLLPRI };
	struct stat st;
	switch (rn(6)) {
	case 0: CALL(OP_FOPS, read(fd, buf, sizeof(buf)), "read %s fd=%d", isd ? "dmabuf" : "node", fd); break;
	case 1: CALL(OP_FOPS, write(fd, buf, rn(64)), "write %s fd=%d", isd ? "dmabuf" : "node", fd); break;
	case 2: CALL(OP_FOPS, lseek(fd, wild64(), rn(5)), "lseek %s fd=%d", isd ? "dmabuf" : "node", fd); break;
	case 3: CALL(OP_FOPS, poll(&p, 1, 0), "poll %s fd=%d", isd ? "dmabuf" : "node", fd); break;
	case 4: CALL(OP_FOPS, fstat(fd, &st), "fstat fd=%d", fd); break;
	default: CALL(OP_FOPS, fcntl(fd, F_SETFL, rn(2) ? O_NONBLOCK : O_ASYNC | O_APPEND), "fcntl fd=%d", fd); break;
	}
}

static int free_m(void)
{
	for (int i = 0; i < MAXM; i++)
		if (!M[i].used)
			return i;
	return -1;
}
static uint64_t obj_size(const struct qrec *q, int kind)
{
	switch (kind) {
	case 1: return q->c.sq_size;
	case 2: return q->c.cq_size;
	case 3: return PAGE;
	case 4: return q->c.prp_size;
	}
	return PAGE;
}
static uint64_t obj_off(const struct qrec *q, int kind)
{
	switch (kind) {
	case 1: return q->c.sq_offset;
	case 2: return q->c.cq_offset;
	case 3: return q->c.db_offset;
	case 4: return q->c.prp_offset;
	}
	return 0;
}

static void op_mmap(void)
{
	int fi = pick_file(), mi = free_m();
	if (fi < 0 || mi < 0)
		return;
	int qi = pick_q(fi, 0), kind = 1 + rn(4), own = 1, exact = 0;
	uint64_t off, len;
	struct qrec *q = qi >= 0 ? &F[fi].q[qi] : NULL;
	if (q && pct(80)) {
		off = obj_off(q, kind);
		len = obj_size(q, kind);
		if (!off)	/* a raw pair's PRP pool: ask for the offset it would have */
			off = (((uint64_t)kind << 16) | q->c.qid) * PAGE;
		exact = off == obj_off(q, kind);
		switch (rn(10)) {
		case 0: len = len > PAGE ? len - PAGE : 2 * PAGE; break;
		case 1: len += PAGE; break;
		case 2: off += PAGE; exact = 0; break;	/* the next qid's */
		case 3: len = PAGE; break;
		}
	} else {
		switch (rn(4)) {
		case 0: off = (((uint64_t)rn(8) << 16) | (uint16_t)wild64()) * PAGE; break;
		case 1: off = wild64() & ~(PAGE - 1); break;
		case 2: off = (((uint64_t)kind << 16) | rn(70)) * PAGE; break;
		default: off = 0; break;
		}
		len = PAGE * (1 + rn(4));
		own = 0;
	}
	int fd = F[fi].fd;
	if (pct(10)) {	/* the queue named on another file */
		int o = pick_file();
		if (o >= 0 && o != fi)
			fd = F[o].fd, own = 0;
	}
	int prot = pct(80) ? PROT_READ | PROT_WRITE : rn(2) ? PROT_READ : rn(2) ? PROT_NONE : PROT_READ | PROT_WRITE | PROT_EXEC;
	int fl = pct(92) ? MAP_SHARED : MAP_PRIVATE;
	if (len > (64ull << 20))
		len = PAGE;
	void *p = (void *)CALL(OP_MMAP, (long)mmap(NULL, len, prot, fl, fd, off),
			       "fd=%d off=%#llx len=%#llx prot=%d %s", fd, (unsigned long long)off,
			       (unsigned long long)len, prot, fl == MAP_SHARED ? "shared" : "private");
	if (p == MAP_FAILED)
		return;
	uint32_t np = len / PAGE;
	M[mi] = (struct mrec){ .used = 1, .fi = fi, .kind = kind, .addr = p, .len = len,
			       .mask = np >= 64 ? ~0ull : (1ull << np) - 1 };
	/* Writes go only to a shared pair's own shadows, through its own file. */
	M[mi].write_ok = own && exact && q && !q->raw && (prot & PROT_WRITE) && fl == MAP_SHARED && !in_child;
	M[mi].qid = q ? q->c.qid : 0;
}

static int pick_m(void)
{
	int c[MAXM], n = 0;
	for (int i = 0; i < MAXM; i++)
		if (M[i].used && M[i].mask)
			c[n++] = i;
	return n ? c[rn(n)] : -1;
}

static void op_munmap(void)
{
	int mi = pick_m();
	if (mi < 0)
		return;
	struct mrec *m = &M[mi];
	uint32_t np = m->len / PAGE;
	if (np > 64 || pct(50)) {
		CALL(OP_MUNMAP, munmap(m->addr, m->len), "%p len=%#zx", m->addr, m->len);
		memset(m, 0, sizeof(*m));
		return;
	}
	uint32_t pg = rn(np);
	size_t len = PAGE - (rn(4) ? 0 : rn(PAGE - 1));	/* rounds up to one page */
	CALL(OP_MUNMAP, munmap(m->addr + pg * PAGE, len), "%p page %u of %u", m->addr, pg, np);
	m->mask &= ~(1ull << pg);
	if (!m->mask)
		memset(m, 0, sizeof(*m));
}

static sigjmp_buf fault_jmp;
static volatile sig_atomic_t fault_armed;
static void on_fault(int sig)
{
	if (!fault_armed) {
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	siglongjmp(fault_jmp, sig);
}

/* Read (and for a shared pair's own shadow, write) words of a mapping. */
static void op_touch(void)
{
	int mi = pick_m();
	if (mi < 0)
		return;
	struct mrec *m = &M[mi];
	uint32_t np = m->len / PAGE, pg;
	do
		pg = rn(np > 64 ? 64 : np);
	while (!(m->mask & (1ull << pg)));
	volatile uint32_t *w = (volatile uint32_t *)(m->addr + pg * PAGE + 4 * rn(PAGE / 4));
	int wr = m->write_ok && rn(2), all = pct(10);
	uint32_t val = m->kind == 3 ? rn(70) : (uint32_t)rnd();
	begin(OP_TOUCH, "%p page %u %s%s", m->addr, pg, all ? "all pages " : "", wr ? "write" : "read");
	int sig = sigsetjmp(fault_jmp, 1);
	if (sig) {
		fault_armed = 0;
		end(-(ERR_SIG + sig));
		return;
	}
	fault_armed = 1;
	if (all) {
		for (uint32_t i = 0; i < np && i < 64; i++)
			if (m->mask & (1ull << i))
				(void)*(volatile uint32_t *)(m->addr + i * PAGE);
	} else if (wr) {
		*w = val;
	} else {
		(void)*w;
	}
	fault_armed = 0;
	end(0);
}

/* ---- submissions on a shared pair ---------------------------------------- */

static void *map_obj(int fi, struct qrec *q, int kind)
{
	uint64_t len = obj_size(q, kind);
	void *p = (void *)CALL(OP_MMAP, (long)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, F[fi].fd,
					 obj_off(q, kind)), "submit: qid %u kind %d", q->c.qid, kind);
	return p == MAP_FAILED ? NULL : p;
}

/* A buffer this file can do I/O with (MAP_HOST or udmabuf), or -1. */
static int pick_io_buf(int fi)
{
	int c[MAXB], n = 0;
	for (int i = 0; i < MAXB; i++)
		if (B[i].used && B[i].fi == fi && B[i].io_ok && B[i].npages)
			c[n++] = i;
	return n ? c[rn(n)] : -1;
}

/* A valid command for namespace ns of this file: read, write, flush or
 * write zeroes, PRPs inside buffer bi (a PRP list at `pool_off` in the
 * pair's pool when more than two pages). */
static struct sqe valid_sqe(int fi, struct qrec *q, volatile uint64_t *pool, int bi)
{
	struct gpunvme_info *in = &F[fi].info;
	struct sqe c = { 0 };
	int nsi = 0;
	if (F[fi].node_nsid) {
		for (uint32_t i = 0; i < in->num_namespaces; i++)
			if (in->ns[i].nsid == F[fi].node_nsid)
				nsi = i;
	} else {
		nsi = rn(in->num_namespaces ? in->num_namespaces : 1);
	}
	uint32_t lbs = in->ns[nsi].lba_size ? in->ns[nsi].lba_size : 512;
	uint64_t cap = in->ns[nsi].capacity_lbas;
	c.nsid = in->ns[nsi].nsid;
	int r = rn(100);
	if (r < 5) {
		c.opcode = OPC_FLUSH;
		return c;
	}
	struct brec *b = &B[bi];
	uint64_t maxbytes = (uint64_t)b->npages * PAGE;
	if (maxbytes > in->shared_max_transfer && in->shared_max_transfer)
		maxbytes = in->shared_max_transfer;
	if (maxbytes > 513 * PAGE)
		maxbytes = 513 * PAGE;
	uint32_t maxlb = maxbytes / lbs;
	if (!maxlb || !cap)
		return c;
	uint32_t nlb = 1 + rn(rn(2) ? (maxlb < 8 ? maxlb : 8) : maxlb);
	if (nlb > cap)
		nlb = cap;
	uint64_t slba = rnd() % (cap - nlb + 1);
	if (r < 10)
		slba = rn(2) ? 0 : cap - nlb;
	c.opcode = r < 15 ? OPC_WRITE_ZEROES : r < 55 ? OPC_READ : OPC_WRITE;
	c.cdw10 = (uint32_t)slba;
	c.cdw11 = (uint32_t)(slba >> 32);
	c.cdw12 = nlb - 1;
	if (c.opcode == OPC_WRITE_ZEROES)
		return c;
	uint32_t np = ((uint64_t)nlb * lbs + PAGE - 1) / PAGE;
	c.prp1 = b->dma[0];
	if (np == 2)
		c.prp2 = b->dma[1];
	else if (np > 2 && pool) {
		uint64_t slots = q->c.prp_size / PAGE, off = rn(slots ? slots : 1) * PAGE;
		for (uint32_t i = 1; i < np; i++)
			pool[off / 8 + i - 1] = b->dma[i];
		c.prp2 = q->c.prp_dma + off;
	}
	return c;
}

/* Break one thing in a valid command. */
static void mutate_sqe(struct sqe *c, int fi)
{
	uint64_t other = 0;
	int bi = rn(MAXB);
	/* Only pages that are ours to overwrite (a buffer made for I/O): a
	 * wild MAP_HOST may have pinned our own heap or stack. */
	if (B[bi].used && B[bi].io_ok && B[bi].dma && B[bi].npages)
		other = B[bi].dma[rn(B[bi].npages)];	/* maybe another file's */
	switch (rn(12)) {
	case 0: c->opcode = (uint8_t)rnd(); break;
	case 1: c->nsid = rn(2) ? 0 : rn(2) ? 0xffffffff : rn(8); break;
	case 2: c->cdw10 = (uint32_t)rnd(); c->cdw11 = (uint32_t)wild64(); break;
	case 3: c->cdw12 = (uint32_t)rnd(); break;
	case 4: c->prp1 = rn(2) ? wild64() : other; break;
	case 5: c->prp2 = rn(2) ? wild64() : other ? other : F[fi].fd; break;
	case 6: c->prp1 += 4 * (1 + rn(1023)); break;	/* offset into the page */
	case 7: c->flags = 1 << rn(8); break;		/* fused, PSDT (SGL) */
	case 8: c->mptr = wild64() | 1; break;
	case 9: c->prp2 = c->prp2 + 4; break;		/* unaligned list */
	case 10: c->cdw13 = (uint32_t)rnd(); c->cdw15 = (uint32_t)rnd(); break;
	default: c->cdw2 = (uint32_t)rnd(); break;
	}
}

/* A plain shared pair (valid arguments) for file fi; 0 or -1. */
static int setup_pair(int fi)
{
	struct gpunvme_qpair_create c;
	int qi = free_slot_q(fi);
	if (qi < 0)
		return -1;
	UAPI_INIT(c);
	c.depth = 2 + rn(31);
	if (CALL(OP_CREATE, ioctl(F[fi].fd, GPUNVME_IOC_CREATE_QPAIR, &c), "fd=%d depth=%u (for I/O)", F[fi].fd, c.depth))
		return -1;
	struct qrec *q = &F[fi].q[qi];
	memset(q, 0, sizeof(*q));
	*q = (struct qrec){ .used = 1, .live = 1, .raw = !c.prp_size, .c = c, .phase = 1 };
	return 0;
}

/* A plain MAP_HOST buffer of 1..16 pages for file fi. */
static void setup_buf(int fi)
{
	int bi = free_b();
	struct gpunvme_map_host m;
	if (bi < 0)
		return;
	size_t len = PAGE * (1 + rn(16));
	uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t *dma = calloc(len / PAGE, sizeof(uint64_t));
	if (p == MAP_FAILED || !dma) {
		free(dma);
		return;
	}
	memset(p, 0x5a, len);
	UAPI_INIT(m);
	m.addr = (uintptr_t)p;
	m.len = len;
	m.dma_addrs = (uintptr_t)dma;
	if (CALL(OP_MAP_HOST, ioctl(F[fi].fd, GPUNVME_IOC_MAP_HOST, &m), "fd=%d anon len=%#zx (for I/O)", F[fi].fd, len)) {
		munmap(p, len);
		free(dma);
		return;
	}
	B[bi] = (struct brec){ .used = 1, .fi = fi, .io_ok = 1, .handle = m.handle, .p = p, .maplen = len,
			       .npages = len / PAGE, .dma = dma };
}

static void op_submit(void)
{
	int fi = pick_file();
	if (fi < 0) {
		op_open();
		return;
	}
	if (!F[fi].have_info)
		return;
	int c[MAXQ], n = 0;
	for (int i = 0; i < MAXQ; i++)
		if (F[fi].q[i].used && F[fi].q[i].live && !F[fi].q[i].raw)
			c[n++] = i;
	if (pick_io_buf(fi) < 0 && pct(70))
		setup_buf(fi);
	if (!n) {
		if (pct(70))
			setup_pair(fi);
		return;
	}
	struct qrec *q = &F[fi].q[c[rn(n)]];
	volatile struct sqe *sq = map_obj(fi, q, 1);
	volatile struct cqe *cq = map_obj(fi, q, 2);
	volatile uint8_t *db = map_obj(fi, q, 3);
	volatile uint64_t *pool = map_obj(fi, q, 4);
	uint32_t depth = q->c.depth, k = 1 + rn(depth - 1 < 8 ? depth - 1 : 8);
	if (!sq || !cq || !db)
		goto out;
	begin(OP_SUBMIT, "fd=%d qid=%u %u SQEs at tail %u", F[fi].fd, q->c.qid, k, q->tail);
	if (sigsetjmp(fault_jmp, 1)) {	/* unbound meanwhile: SIGBUS */
		fault_armed = 0;
		end(-(ERR_SIG + SIGBUS));
		goto out;
	}
	fault_armed = 1;
	int valid_n = 0;
	for (uint32_t i = 0; i < k; i++) {
		struct sqe s;
		int bi = pick_io_buf(fi), r = rn(100);
		if (r < 55 && bi >= 0) {
			s = valid_sqe(fi, q, pool, bi);
			valid_n++;
		} else if (r < 85 && bi >= 0) {
			s = valid_sqe(fi, q, pool, bi);
			mutate_sqe(&s, fi);
		} else {
			uint64_t *w = (uint64_t *)&s;
			for (int j = 0; j < 8; j++)
				w[j] = rn(3) ? rnd() : 0;
			if (rn(2))
				s.opcode = rn(2) ? OPC_READ : OPC_WRITE;
		}
		s.cid = ++q->cid;
		sq[q->tail] = s;
		q->tail = (q->tail + 1) % depth;
	}
	__atomic_fetch_add(&W->sqes, k, __ATOMIC_RELAXED);
	__atomic_fetch_add(&W->sqes_valid, valid_n, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	int ring = rn(100);
	if (ring < 88)
		*(volatile uint32_t *)(db + q->c.sq_db) = q->tail;
	else if (ring < 96)
		*(volatile uint32_t *)(db + q->c.sq_db) = rn(2) ? (uint32_t)wild64() : depth + rn(4);
	/* Reap what comes within 500 ms. */
	uint64_t t0 = now_ms();
	uint32_t got = 0;
	while (got < k && now_ms() - t0 < 500) {
		if ((cq[q->head].status & 1) != q->phase) {
			usleep(200);
			continue;
		}
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		uint16_t st = cq[q->head].status >> 1;
		__atomic_fetch_add(&W->status[(st >> 8) & 7][st & 0xff], 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&W->cqes, 1, __ATOMIC_RELAXED);
		if (!st)
			__atomic_fetch_add(&W->cqes_ok, 1, __ATOMIC_RELAXED);
		if (++q->head == depth)
			q->head = 0, q->phase ^= 1;
		got++;
		if (rn(8))
			*(volatile uint32_t *)(db + q->c.cq_db) = q->head;
	}
	*(volatile uint32_t *)(db + q->c.cq_db) = pct(95) ? q->head : (uint32_t)wild64();
	if (got < k)
		__atomic_fetch_add(&W->io_timeouts, 1, __ATOMIC_RELAXED);
	fault_armed = 0;
	end(got);
out:
	if (sq)
		munmap((void *)sq, q->c.sq_size);
	if (cq)
		munmap((void *)cq, q->c.cq_size);
	if (db)
		munmap((void *)db, PAGE);
	if (pool)
		munmap((void *)pool, q->c.prp_size);
}

/* ---- processes ----------------------------------------------------------- */

static void do_op(int op);
static int pick_op(void);

static void reap_kids(int block)
{
	for (int i = 0; i < MAXKIDS; i++) {
		if (!kids[i])
			continue;
		int st;
		if (!block) {
			if (waitpid(kids[i], &st, WNOHANG) == kids[i])
				kids[i] = 0;
			continue;
		}
		/* A child makes at most 8 calls: 60 s is far beyond any of them. */
		uint64_t t0 = now_ms();
		while (waitpid(kids[i], &st, WNOHANG) == 0) {
			if (now_ms() - t0 > 60000) {
				printf("# w%d: fork child %d did not exit within 60 s; killing it\n", me, kids[i]);
				kill(kids[i], SIGKILL);
				waitpid(kids[i], &st, 0);
				break;
			}
			usleep(10000);
		}
		if (WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL) {
			printf("# w%d: fork child died of %s in sequence %llu\n", me, strsignal(WTERMSIG(st)),
			       (unsigned long long)W->seq);
		}
		kids[i] = 0;
	}
}

static void op_fork(void)
{
	int slot = -1;
	reap_kids(0);
	for (int i = 0; i < MAXKIDS; i++)
		if (!kids[i])
			slot = i;
	if (slot < 0)
		return;
	uint64_t child_seed = rnd();
	begin(OP_FORK, "");
	pid_t pid = fork();
	if (pid == 0) {
		W->op_start_ms = 0;	/* the parent ends the call */
		in_child = 1;
		rs = child_seed;
		memset(kids, 0, sizeof(kids));
		for (int i = 0; i < MAXM; i++)
			M[i].write_ok = 0;	/* the parent's view: don't write through it */
		int n = 1 + rn(8);
		for (int i = 0; i < n && !G->stop; i++)
			do_op(pick_op());
		_exit(0);
	}
	end(pid);
	if (pid > 0) {
		__atomic_fetch_add(&W->forks, 1, __ATOMIC_RELAXED);
		kids[slot] = pid;
		if (pct(20)) {	/* kill it mid-way */
			usleep(rn(200000));
			kill(pid, SIGKILL);
		}
	}
}

static void op_kill(void)
{
	if (no_kill || G->procs < 2 || in_child)
		return;
	int t = rn(G->procs);
	if (t == me)
		return;
	pid_t pid = G->w[t].pid;
	if (pid <= 0 || G->stop)
		return;
	G->killed[pid % KILLED_SLOTS] = pid;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (CALL(OP_KILL, kill(pid, SIGKILL), "worker %d pid %d", t, pid) == 0)
		__atomic_fetch_add(&W->kills, 1, __ATOMIC_RELAXED);
}

static int gpunvme_bound(void)
{
	char drv[64];
	pci_driver_of(bdf, drv, sizeof(drv));
	return !strcmp(drv, "gpunvme");
}

static void do_bind(void)
{
	if (gpunvme_bound())
		return;
	CALL(OP_BIND, sysfs_write("/sys/bus/pci/drivers/gpunvme/bind", bdf), "%s", bdf);
}

static void op_unbind(void)
{
	if (me != 0 || in_child || no_unbind)
		return;
	if (!gpunvme_bound()) {
		do_bind();
		return;
	}
	if (CALL(OP_UNBIND, sysfs_write("/sys/bus/pci/drivers/gpunvme/unbind", bdf), "%s", bdf) == 0)
		__atomic_fetch_add(&W->unbinds, 1, __ATOMIC_RELAXED);
	if (pct(90)) {
		usleep(rn(300000));
		do_bind();
	}
}

/* The per-file quotas (module parameters) change under the other calls:
 * a small limit makes EDQUOT common; 0 lifts it. Defaults come back at the
 * end of the run (quota_defaults). */
static const char *const quota_param[] = { "max_qpairs_per_file", "max_maps_per_file", "max_exports_per_qpair" };
static const char *const quota_default[] = { "8", "64", "4" };

static void op_quota(void)
{
	static const char *const v[] = { "0", "1", "2", "3", "8", "64" };
	char path[96];
	int p = rn(3);
	const char *val = v[rn(6)];
	snprintf(path, sizeof(path), "/sys/module/gpunvme/parameters/%s", quota_param[p]);
	CALL(OP_QUOTA, sysfs_write(path, val), "%s=%s", quota_param[p], val);
}

static void quota_defaults(void)
{
	char path[96];
	for (int p = 0; p < 3; p++) {
		snprintf(path, sizeof(path), "/sys/module/gpunvme/parameters/%s", quota_param[p]);
		sysfs_write(path, quota_default[p]);
	}
}

static void op_edu_rebind(void)
{
	if (me != 0 || in_child || no_unbind || !have_standin)
		return;
	const char *edu = env_or("EDU_BDF", "0000:00:06.0");
	CALL(OP_EDU_REBIND, sysfs_write("/sys/bus/pci/drivers/gpunvme_standin/unbind", edu), "unbind %s", edu);
	usleep(rn(100000));
	CALL(OP_EDU_REBIND, sysfs_write("/sys/bus/pci/drivers/gpunvme_standin/bind", edu), "bind %s", edu);
}

/* ---- stand-in, udmabuf, dma-buf fds -------------------------------------- */

static void op_si_open(void)
{
	if (!have_standin)
		return;
	if (sfd >= 0 && rn(2)) {
		CALL(OP_SI_OPEN, close(sfd), "close standin fd=%d", sfd);
		sfd = -1;
		memset(I, 0, sizeof(I));
		return;
	}
	if (sfd < 0)
		sfd = CALL(OP_SI_OPEN, open("/dev/gpunvme_standin", O_RDWR | O_CLOEXEC), "");
}

static void op_si_import(void)
{
	if (sfd < 0) {
		op_si_open();
		return;
	}
	int di = pick_d(), ii = -1;
	for (int i = 0; i < MAXI; i++)
		if (!I[i].used)
			ii = i;
	struct standin_import imp = { 0 };
	imp.fd = di >= 0 && pct(90) ? D[di].fd : rn(2) ? -1 : pick_file() >= 0 ? F[pick_file()].fd : 0;
	if (CALL(OP_SI_IMPORT, ioctl(sfd, STANDIN_IOC_IMPORT, &imp), "dmabuf fd=%d", imp.fd) < 0)
		return;
	if (ii < 0) {
		struct standin_release r = { .handle = imp.handle };
		ioctl(sfd, STANDIN_IOC_RELEASE, &r);
		return;
	}
	I[ii] = (struct irec){ .used = 1, .handle = imp.handle, .len = imp.len,
			       .write_ok = di >= 0 && imp.fd == D[di].fd && D[di].write_ok };
}

static int pick_i(void)
{
	int c[MAXI], n = 0;
	for (int i = 0; i < MAXI; i++)
		if (I[i].used)
			c[n++] = i;
	return n ? c[rn(n)] : -1;
}

static void op_si_dma(void)
{
	int ii = pick_i();
	if (sfd < 0 || ii < 0)
		return;
	struct irec *im = &I[ii];
	uint64_t off = pct(85) && im->len >= 4 ? 4 * rn(im->len / 4) : wild64();
	if (im->write_ok && rn(2)) {
		struct standin_write32 w = { .handle = im->handle, .value = rn(2) ? rn(70) : (uint32_t)rnd(),
					     .offset = off };
		CALL(OP_SI_DMA, ioctl(sfd, STANDIN_IOC_WRITE32, &w), "WRITE32 handle=%u off=%#llx",
		     im->handle, (unsigned long long)off);
	} else {
		static uint8_t buf[STANDIN_MAX_READ];
		struct standin_read r = { .handle = im->handle, .offset = off & ~3ull,
					  .len = pct(90) ? 1 + rn(STANDIN_MAX_READ) : (uint32_t)wild64(),
					  .buf = (uintptr_t)buf };
		if (r.offset + r.len > im->len && pct(80) && im->len > r.offset)
			r.len = im->len - r.offset;
		CALL(OP_SI_DMA, ioctl(sfd, STANDIN_IOC_READ, &r), "READ handle=%u off=%#llx len=%u",
		     im->handle, (unsigned long long)r.offset, r.len);
	}
}

static void op_si_release(void)
{
	int ii = pick_i();
	if (sfd < 0)
		return;
	struct standin_release r = { .handle = ii >= 0 && pct(85) ? I[ii].handle : (uint32_t)wild64() };
	if (CALL(OP_SI_RELEASE, ioctl(sfd, STANDIN_IOC_RELEASE, &r), "handle=%u", r.handle) == 0 && ii >= 0 &&
	    I[ii].handle == r.handle)
		I[ii].used = 0;
}

static void op_si_nop2p(void)
{
	int di = free_d();
	if (sfd < 0 || di < 0)
		return;
	int fd = CALL(OP_SI_NOP2P, ioctl(sfd, STANDIN_IOC_EXPORT_NO_P2P), "");
	if (fd >= 0)
		D[di] = (struct drec){ .fd = fd, .write_ok = 0, .kind = 3, .len = PAGE, .memfd = -1 };
}

static void op_udmabuf(void)
{
	int di = free_d();
	if (di < 0)
		return;
	int dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
	if (dev < 0)
		return;
	size_t len = PAGE * (1 + rn(8));
	int mfd = memfd_create("fuzz-udmabuf", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	if (mfd < 0 || ftruncate(mfd, len) || fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK)) {
		close(dev);
		if (mfd >= 0)
			close(mfd);
		return;
	}
	struct udmabuf_create c = { .memfd = mfd, .flags = UDMABUF_FLAGS_CLOEXEC, .size = len };
	int fd = CALL(OP_UDMABUF, ioctl(dev, UDMABUF_CREATE, &c), "%zu bytes", len);
	close(dev);
	if (fd < 0) {
		close(mfd);
		return;
	}
	D[di] = (struct drec){ .fd = fd, .write_ok = 1, .kind = 2, .len = len, .memfd = mfd };
}

static void op_dbuf_ioctl(void)
{
	int di = pick_d();
	if (di < 0)
		return;
	int valid = pct(80);
	struct dma_buf_sync s = { .flags = valid ? (rn(2) ? DMA_BUF_SYNC_START : DMA_BUF_SYNC_END) |
						   (1 + rn(3)) : wild64() };
	/* The kernel's udmabuf maps its table with the direction of the first
	 * SYNC_START and syncs later calls with theirs, which DMA-API debug
	 * reports as a driver bug (udmabuf's, not gpunvme's): on udmabufs
	 * every SYNC uses one direction. */
	if (D[di].kind == 2 && valid)
		s.flags = (s.flags & DMA_BUF_SYNC_END) | DMA_BUF_SYNC_RW;
	char name[40];
	switch (rn(3)) {
	case 0:
		CALL(OP_DBUF_IOCTL, ioctl(D[di].fd, DMA_BUF_IOCTL_SYNC, &s), "SYNC fd=%d flags=%#llx",
		     D[di].fd, (unsigned long long)s.flags);
		break;
	case 1:
		snprintf(name, sizeof(name), "fuzz-%u", rn(1000));
		CALL(OP_DBUF_IOCTL, ioctl(D[di].fd, DMA_BUF_SET_NAME_B, name), "SET_NAME fd=%d", D[di].fd);
		break;
	default: {
		struct dma_buf_export_sync_file e = { .flags = 1 + rn(3), .fd = -1 };
		if (CALL(OP_DBUF_IOCTL, ioctl(D[di].fd, DMA_BUF_IOCTL_EXPORT_SYNC_FILE, &e), "EXPORT_SYNC_FILE fd=%d",
			 D[di].fd) == 0)
			close(e.fd);
	}
	}
}

static void op_dbuf_mmap(void)
{
	int di = pick_d(), mi = free_m();
	if (di < 0 || mi < 0)
		return;
	uint64_t len = D[di].len && pct(80) ? D[di].len : PAGE * (1 + rn(4));
	uint64_t off = pct(85) ? 0 : PAGE * rn(4);
	int prot = rn(2) ? PROT_READ : PROT_READ | PROT_WRITE;
	void *p = (void *)CALL(OP_DBUF_MMAP, (long)mmap(NULL, len, prot, MAP_SHARED, D[di].fd, off),
			       "fd=%d len=%#llx off=%#llx", D[di].fd, (unsigned long long)len, (unsigned long long)off);
	if (p == MAP_FAILED)
		return;
	uint32_t np = len / PAGE;
	M[mi] = (struct mrec){ .used = 1, .fi = -1, .addr = p, .len = len, .mask = np >= 64 ? ~0ull : (1ull << np) - 1,
			       .write_ok = D[di].write_ok && (prot & PROT_WRITE) && !in_child };
}

static void op_buf_munmap(void)
{
	int bi = rn(MAXB);
	if (!B[bi].used || !B[bi].p)
		return;
	/* The pages stay pinned for the device; our view goes. */
	CALL(OP_BUF_MUNMAP, munmap(B[bi].p, B[bi].maplen), "handle=%u %p", B[bi].handle, B[bi].p);
	B[bi].p = NULL;
}

/* ---- the sequence loop ---------------------------------------------------- */

static int pick_op(void)
{
	static int total;
	if (!total)
		for (int i = 0; i < NOPS; i++)
			total += op_weight[i];
	int r = rn(total);
	for (int i = 0; i < NOPS; i++) {
		if (r < op_weight[i])
			return i;
		r -= op_weight[i];
	}
	return OP_GET_INFO;
}

static void do_op(int op)
{
	int fi = pick_file();
	switch (op) {
	case OP_OPEN: op_open(); return;
	case OP_CLOSE: op_close(); return;
	case OP_DUP: op_dup(); return;
	case OP_WILD_IOCTL: op_wild_ioctl(); return;
	case OP_FOPS: op_fops(); return;
	case OP_MMAP: op_mmap(); return;
	case OP_MUNMAP: op_munmap(); return;
	case OP_TOUCH: op_touch(); return;
	case OP_SUBMIT: op_submit(); return;
	case OP_FORK: if (!in_child) op_fork(); return;
	case OP_KILL: op_kill(); return;
	case OP_UNBIND: op_unbind(); return;
	case OP_BIND: if (me == 0 && !in_child) do_bind(); return;
	case OP_EDU_REBIND: if (pct(30)) op_edu_rebind(); return;
	case OP_SI_OPEN: op_si_open(); return;
	case OP_SI_IMPORT: op_si_import(); return;
	case OP_SI_DMA: op_si_dma(); return;
	case OP_SI_RELEASE: op_si_release(); return;
	case OP_SI_NOP2P: op_si_nop2p(); return;
	case OP_UDMABUF: op_udmabuf(); return;
	case OP_DBUF_IOCTL: op_dbuf_ioctl(); return;
	case OP_DBUF_MMAP: op_dbuf_mmap(); return;
	case OP_BUF_MUNMAP: op_buf_munmap(); return;
	case OP_QUOTA: op_quota(); return;
	}
	if (fi < 0) {
		op_open();
		return;
	}
	switch (op) {
	case OP_GET_INFO: op_get_info(fi); return;
	case OP_CLAIM: op_claim(fi); return;
	case OP_CREATE: op_create(fi); return;
	case OP_DESTROY: op_destroy(fi); return;
	case OP_MAP_HOST: op_map_host(fi); return;
	case OP_UNMAP: op_unmap(fi); return;
	case OP_MAP_DMABUF: op_map_dmabuf(fi); return;
	case OP_EXPORT: op_export(fi); return;
	}
}

/* Close everything the sequence holds, in a random order of kinds. */
static void cleanup(void)
{
	reap_kids(1);
	int order = rn(2);
	for (int pass = 0; pass < 2; pass++) {
		if ((pass == 0) == (order == 0)) {
			for (int i = 0; i < MAXF; i++)
				if (F[i].fd >= 0) {
					close(F[i].fd);
					F[i].fd = -1;
				}
		} else {
			for (int i = 0; i < MAXD; i++) {
				if (D[i].fd >= 0)
					close(D[i].fd);
				if (D[i].memfd >= 0)
					close(D[i].memfd);
				D[i].fd = D[i].memfd = -1;
			}
			if (sfd >= 0)
				close(sfd);
			sfd = -1;
		}
	}
	for (int i = 0; i < MAXM; i++)
		if (M[i].used)
			munmap(M[i].addr, M[i].len);
	for (int i = 0; i < MAXB; i++) {
		if (B[i].used && B[i].p)
			munmap(B[i].p, B[i].maplen);
		if (B[i].used)
			free(B[i].dma);
	}
	hold_init();
}

static void run_sequence(uint64_t k)
{
	W->prev_seq = W->seq;
	W->seq = k;
	W->seq_seed = seq_seed(G->seed, me, k);
	W->opno = 0;
	rs = W->seq_seed;
	ring("sequence %llu seed %#llx", (unsigned long long)k, (unsigned long long)W->seq_seed);
	if (me == 0 && !no_unbind && !gpunvme_bound())
		do_bind();
	int n = 10 + rn(70);
	for (int i = 0; i < n && !G->stop; i++)
		do_op(pick_op());
	cleanup();
	__atomic_fetch_add(&W->sequences, 1, __ATOMIC_RELAXED);
}

static void worker_setup(int w)
{
	struct sigaction sa = { .sa_handler = on_fault };
	me = w;
	W = &G->w[w];
	W->pid = getpid();
	sigaction(SIGBUS, &sa, NULL);
	sigaction(SIGSEGV, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	arena = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (arena == MAP_FAILED)
		_exit(3);
	mprotect(ARENA_RO, PAGE, PROT_READ);
	mprotect(ARENA_END, PAGE, PROT_NONE);
	hold_init();
}

static void worker(int w, uint64_t first)
{
	worker_setup(w);
	for (uint64_t k = first; !G->stop && now_ms() < G->deadline_ms; k++)
		run_sequence(k);
	_exit(0);
}

/* ---- the parent: spawn, watch, report ------------------------------------ */

static const char *const KLOG_BAD =
	"WARNING:|BUG:|Oops|KASAN|KFENCE|possible circular locking|INFO: possible|inconsistent lock state|"
	"lockdep (disabled|off)|DEBUG_LOCKS_WARN_ON|Call Trace:|Kernel panic|general protection fault|"
	"UBSAN:|detected stalls|blocked for more than|unreferenced object";

static int failures;
static int klog_bad_lines;

static void show_worker(int w, const char *why)
{
	struct wstat *s = &G->w[w];
	printf("# worker %d (pid %d) %s: sequence %llu (seed %#llx), call %llu; its last calls:\n", w, s->pid, why,
	       (unsigned long long)s->seq, (unsigned long long)s->seq_seed, (unsigned long long)s->opno);
	uint32_t pos = s->ring_pos;
	for (uint32_t i = pos > RING ? pos - RING : 0; i < pos; i++)
		printf("#     %s\n", s->ring[i % RING]);
	printf("# replay: gpunvme_fuzz --seed %llu --procs %d --worker %d --sequence %llu --replay\n",
	       (unsigned long long)G->seed, G->procs, w, (unsigned long long)s->seq);
	if (s->prev_seq != s->seq)
		printf("# replay (the sequence before): gpunvme_fuzz --seed %llu --procs %d --worker %d --sequence %llu --replay\n",
		       (unsigned long long)G->seed, G->procs, w, (unsigned long long)s->prev_seq);
}

static void show_stack(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/stack", pid);
	FILE *f = fopen(path, "r");
	printf("# kernel stack of pid %d:\n", pid);
	while (f && fgets(line, sizeof(line), f))
		printf("#     %s", line);
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/wchan", pid);
	f = fopen(path, "r");
	if (f && fgets(line, sizeof(line), f))
		printf("#   wchan: %s\n", line);
	if (f)
		fclose(f);
}

static regex_t klog_re;
static int kmsg = -1;

/* Every kernel log record while the fuzzer runs. A report is printed whole:
 * the records before the first line that matches and the next 80 (its
 * stack trace), so it survives a ring buffer that wraps, and the console's
 * loglevel (lowered while fuzzing) does not matter. */
static void scan_kmsg(void)
{
	static char prev[8][300];
	static unsigned nprev, dump_left, printed;
	char rec[2048];
	if (kmsg < 0)
		return;
	for (;;) {
		ssize_t n = read(kmsg, rec, sizeof(rec) - 1);
		if (n < 0 && errno == EPIPE)
			continue;	/* overwritten records: the next read resumes */
		if (n <= 0)
			return;
		rec[n] = 0;
		char *msg = strchr(rec, ';');
		msg = msg ? msg + 1 : rec;
		msg[strcspn(msg, "\n")] = 0;
		int bad = !regexec(&klog_re, msg, 0, NULL, 0);
		if (bad) {
			klog_bad_lines++;
			if (!dump_left && printed < 600) {
				for (unsigned i = nprev > 8 ? nprev - 8 : 0; i < nprev; i++)
					printf("# klog:   %s\n", prev[i % 8]);
			}
			dump_left = 80;
		}
		if (dump_left && printed < 600) {
			printf("# klog: %s %s\n", bad ? "!!" : "  ", msg);
			dump_left--;
			printed++;
		} else if (dump_left) {
			dump_left--;
		}
		snprintf(prev[nprev++ % 8], sizeof(prev[0]), "%s", msg);
		if (bad && klog_bad_lines == 1) {
			printf("# the first report; what every worker was doing:\n");
			for (int w = 0; w < G->procs; w++)
				show_worker(w, "at the first kernel report");
		}
	}
}

static pid_t spawn(int w, uint64_t first)
{
	pid_t pid = fork();
	if (pid == 0)
		worker(w, first);
	if (pid > 0)
		G->w[w].pid = pid;
	return pid;
}

static void errno_figures(void)
{
	uint64_t tot[NERR] = { 0 };
	int distinct = 0;
	for (int w = 0; w < G->procs; w++)
		for (int o = 0; o < NOPS; o++)
			for (int e = 0; e < NERR; e++)
				tot[e] += G->w[w].err[o][e];
	printf("# distinct errnos:");
	for (int e = 1; e < NERR; e++)
		if (tot[e]) {
			distinct++;
			if (e >= ERR_SIG)
				printf(" %s(%llu)", e - ERR_SIG == SIGBUS ? "SIGBUS" : e - ERR_SIG == SIGSEGV ? "SIGSEGV" : "SIG?",
				       (unsigned long long)tot[e]);
			else
				printf(" %s(%llu)", strerrorname_np(e) ?: "?", (unsigned long long)tot[e]);
		}
	printf("\n# distinct errnos seen: %d (successful calls: %llu)\n", distinct, (unsigned long long)tot[0]);
	for (int o = 0; o < NOPS; o++) {
		uint64_t n = 0;
		char line[1024];
		int len = 0;
		for (int e = 0; e < NERR; e++) {
			uint64_t c = 0;
			for (int w = 0; w < G->procs; w++)
				c += G->w[w].err[o][e];
			n += c;
			if (c && len < (int)sizeof(line) - 40)
				len += snprintf(line + len, sizeof(line) - len, " %s=%llu",
						!e ? "ok" : e >= ERR_SIG ? (e - ERR_SIG == SIGBUS ? "SIGBUS" : "SIGSEGV")
							  : strerrorname_np(e) ?: "?", (unsigned long long)c);
		}
		if (n)
			printf("#   %-16s %8llu:%s\n", op_name[o], (unsigned long long)n, line);
	}
	printf("# NVMe completion status (SCT/SC) seen:");
	for (int t = 0; t < 8; t++)
		for (int c = 0; c < 256; c++) {
			uint64_t n = 0;
			for (int w = 0; w < G->procs; w++)
				n += G->w[w].status[t][c];
			if (n)
				printf(" %x/%02x(%llu)", t, c, (unsigned long long)n);
		}
	printf("\n");
}

static int setup_devices(void)
{
	int r = load_module();
	if (r) {
		printf("# loading gpunvme.ko: %s\n", strerror(-r));
		return r;
	}
	r = bind_gpunvme(bdf);
	if (r) {
		printf("# binding %s to gpunvme: %s\n", bdf, strerror(-r));
		return r;
	}
	char path[256];
	snprintf(path, sizeof(path), "%s/gpunvme_standin.ko", env_or("GPUNVME_DIR", "/opt/gpunvme"));
	if (access(path, F_OK) == 0 || access("/sys/module/gpunvme_standin", F_OK) == 0) {
		const char *edu = env_or("EDU_BDF", "0000:00:06.0");
		char drv[64];
		if (!load_module_named("gpunvme_standin")) {
			pci_driver_of(edu, drv, sizeof(drv));
			if (strcmp(drv, "gpunvme_standin")) {
				snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver_override", edu);
				sysfs_write(path, "gpunvme_standin");
				sysfs_write("/sys/bus/pci/drivers_probe", edu);
			}
			pci_driver_of(edu, drv, sizeof(drv));
			have_standin = !strcmp(drv, "gpunvme_standin");
		}
	}
	printf("# gpunvme bound at %s; stand-in %s; udmabuf %s\n", bdf, have_standin ? "bound to edu" : "absent",
	       access("/dev/udmabuf", F_OK) ? "absent" : "present");
	return 0;
}

static void read_env_file(uint64_t *seed, int *procs, int *seconds, int *have_seed)
{
	char path[256], line[128];
	snprintf(path, sizeof(path), "%s/fuzz.env", env_or("GPUNVME_DIR", "/opt/gpunvme"));
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "FUZZ_SEED=", 10))
			*seed = strtoull(line + 10, NULL, 0), *have_seed = 1;
		else if (!strncmp(line, "FUZZ_PROCS=", 11))
			*procs = atoi(line + 11);
		else if (!strncmp(line, "FUZZ_SECONDS=", 13))
			*seconds = atoi(line + 13);
	}
	if (f)
		fclose(f);
}

static void usage(void)
{
	puts("usage: gpunvme_fuzz [--seed N] [--procs P] [--seconds S] [--stuck S] [--no-unbind] [--no-kill] [--verbose]\n"
	     "       gpunvme_fuzz --seed N --worker W --sequence K --replay\n"
	     "Defaults from $GPUNVME_DIR/fuzz.env (FUZZ_SEED, FUZZ_PROCS, FUZZ_SECONDS), else time, 4, 30.");
}

int main(int argc, char **argv)
{
	uint64_t seed = 0, sequence = 0;
	int procs = 4, seconds = 30, have_seed = 0, replay = 0, rworker = 0, stuck_s = 90;

	setvbuf(stdout, NULL, _IOLBF, 0);
	read_env_file(&seed, &procs, &seconds, &have_seed);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--seed") && v)
			seed = strtoull(v, NULL, 0), have_seed = 1, i++;
		else if (!strcmp(a, "--procs") && v)
			procs = atoi(v), i++;
		else if (!strcmp(a, "--seconds") && v)
			seconds = atoi(v), i++;
		else if (!strcmp(a, "--worker") && v)
			rworker = atoi(v), i++;
		else if (!strcmp(a, "--sequence") && v)
			sequence = strtoull(v, NULL, 0), i++;
		else if (!strcmp(a, "--stuck") && v)
			stuck_s = atoi(v), i++;
		else if (!strcmp(a, "--replay"))
			replay = 1;
		else if (!strcmp(a, "--verbose"))
			verbose = 1;
		else if (!strcmp(a, "--no-unbind"))
			no_unbind = 1;
		else if (!strcmp(a, "--no-kill"))
			no_kill = 1;
		else {
			usage();
			return !!strcmp(a, "--help") && strcmp(a, "-h");
		}
	}
	if (!have_seed)
		seed = (uint64_t)time(NULL);
	if (procs < 1 || procs > MAXW || seconds < 1 || rworker < 0 || rworker >= MAXW) {
		usage();
		return 2;
	}
	bdf = gpunvme_bdf();

	printf("TAP version 13\n1..4\n");
	printf("# gpunvme_fuzz --seed %llu --procs %d --seconds %d%s\n", (unsigned long long)seed, procs, seconds,
	       replay ? " (replay)" : "");
	G = mmap(NULL, sizeof(*G), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (G == MAP_FAILED)
		return 1;
	memset(G, 0, sizeof(*G));
	G->seed = seed;
	G->procs = procs;	/* a replay too: op choices depend on it */
	if (replay && rworker >= procs) {
		usage();
		return 2;
	}
	if (setup_devices()) {
		printf("Bail out! controller not bound to gpunvme\n");
		return 1;
	}
	regcomp(&klog_re, KLOG_BAD, REG_EXTENDED | REG_NOSUB);
	kmsg = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (kmsg >= 0)
		lseek(kmsg, 0, SEEK_END);
	/* Console: errors and worse only; the ring buffer (and this
	 * program, through /dev/kmsg) still gets every line. The module's
	 * per-call warnings would otherwise crawl out of the emulated UART. */
	char saved_printk[64] = "";
	FILE *pf = fopen("/proc/sys/kernel/printk", "r");
	if (pf && fgets(saved_printk, sizeof(saved_printk), pf))
		sysfs_write("/proc/sys/kernel/printk", "4");
	if (pf)
		fclose(pf);
	prctl(PR_SET_CHILD_SUBREAPER, 1);

	G->start_ms = now_ms();
	G->deadline_ms = G->start_ms + (uint64_t)seconds * 1000;
	if (replay) {
		verbose = 1;
		pid_t pid = fork();
		if (pid == 0) {
			worker_setup(rworker);
			W->pid = getpid();
			run_sequence(sequence);
			_exit(0);
		}
		G->w[rworker].pid = pid;
	} else {
		for (int w = 0; w < procs; w++)
			spawn(w, 0);
	}
	int live = replay ? 1 : procs, hung = 0, died = 0;
	uint64_t last_progress = now_ms(), grace_ms = 120000;
	while (live > 0) {
		int st;
		pid_t pid;
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
			int w = -1;
			for (int i = 0; i < G->procs; i++)
				if (G->w[i].pid == pid)
					w = i;
			if (w < 0)
				continue;	/* an orphaned fork child: done */
			struct wstat *s = &G->w[w];
			live--;
			if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
				s->pid = 0;
				continue;
			}
			if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && G->killed[pid % KILLED_SLOTS] == pid) {
				G->killed[pid % KILLED_SLOTS] = 0;
				s->pid = 0;
				s->restarts++;
				if (!G->stop && now_ms() < G->deadline_ms && spawn(w, s->seq + 1) > 0)
					live++;
				continue;
			}
			died++;
			failures++;
			char why[96];
			if (WIFSIGNALED(st))
				snprintf(why, sizeof(why), "died of %s", strsignal(WTERMSIG(st)));
			else
				snprintf(why, sizeof(why), "exited with status %d", WEXITSTATUS(st));
			show_worker(w, why);
			s->pid = 0;
			if (!G->stop && now_ms() < G->deadline_ms && spawn(w, s->seq + 1) > 0)
				live++;
		}
		scan_kmsg();
		uint64_t t = now_ms();
		if (t >= G->deadline_ms && !G->stop)
			G->stop = 1;
		for (int w = 0; w < G->procs; w++) {
			struct wstat *s = &G->w[w];
			uint64_t since = s->op_start_ms;
			if (s->pid > 0 && since && t > since + (uint64_t)stuck_s * 1000 && !s->stuck_reported) {
				s->stuck_reported = 1;
				hung++;
				failures++;
				char why[64];
				snprintf(why, sizeof(why), "is stuck in one call for %llu s", (unsigned long long)(t - since) / 1000);
				show_worker(w, why);
				show_stack(s->pid);
			}
		}
		if (t >= G->deadline_ms + 120000 + 30000) {
			printf("# %d worker(s) could not be killed (stuck in the kernel): giving up on them\n", live);
			break;
		}
		if (t >= G->deadline_ms + grace_ms) {
			for (int w = 0; w < G->procs; w++)
				if (G->w[w].pid > 0) {
					if (!G->w[w].stuck_reported) {
						hung++;
						failures++;
						show_worker(w, "did not finish within the grace time");
						show_stack(G->w[w].pid);
					}
					kill(G->w[w].pid, SIGKILL);
				}
			grace_ms += 10000;
		}
		if (!replay && t - last_progress >= 30000) {
			uint64_t seqs = 0, calls = 0;
			for (int w = 0; w < G->procs; w++)
				seqs += G->w[w].sequences, calls += G->w[w].calls;
			printf("# t=%llus: %llu sequences, %llu calls\n", (unsigned long long)(t - G->start_ms) / 1000,
			       (unsigned long long)seqs, (unsigned long long)calls);
			last_progress = t;
		}
		usleep(50000);
	}
	/* Fork children of killed workers (re-parented here) must be gone too. */
	uint64_t t0 = now_ms();
	while (waitpid(-1, NULL, WNOHANG) >= 0 && now_ms() - t0 < 30000)
		usleep(50000);
	usleep(500000);
	quota_defaults();
	scan_kmsg();
	if (saved_printk[0])
		sysfs_write("/proc/sys/kernel/printk", saved_printk);

	uint64_t seqs = 0, calls = 0, forks = 0, kills = 0, restarts = 0, unbinds = 0;
	uint64_t sqes = 0, sqes_valid = 0, cqes = 0, cqes_ok = 0, io_to = 0;
	for (int w = 0; w < G->procs; w++) {
		struct wstat *s = &G->w[w];
		seqs += s->sequences, calls += s->calls, forks += s->forks, kills += s->kills;
		restarts += s->restarts, unbinds += s->unbinds;
		sqes += s->sqes, sqes_valid += s->sqes_valid, cqes += s->cqes, cqes_ok += s->cqes_ok;
		io_to += s->io_timeouts;
	}
	double secs = (now_ms() - G->start_ms) / 1000.0;
	printf("%s 1 no worker died unexpectedly\n", died ? "not ok" : "ok");
	printf("%s 2 no call hung (limit %d s)\n", hung ? "not ok" : "ok", stuck_s);
	if (kmsg < 0)
		printf("ok 3 kernel log clean during the run # SKIP no /dev/kmsg\n");
	else
		printf("%s 3 kernel log clean during the run (%d bad lines)\n", klog_bad_lines ? "not ok" : "ok",
		       klog_bad_lines);
	int exercised = replay ? calls > 0 : (seqs > 0 && calls > 0 && cqes_ok > 0);
	printf("%s 4 the run exercised the driver (calls made%s)\n", exercised ? "ok" : "not ok",
	       replay ? "" : ", commands completed successfully");
	printf("# seed: %llu\n", (unsigned long long)seed);
	printf("# sequences: %llu\n# calls: %llu\n", (unsigned long long)seqs, (unsigned long long)calls);
	printf("# processes: %d workers (%llu restarted after a sibling's SIGKILL, %llu kills), %llu fork children\n",
	       replay ? 1 : procs, (unsigned long long)restarts, (unsigned long long)kills, (unsigned long long)forks);
	printf("# seconds: %.1f (%.2f minutes)\n", secs, secs / 60);
	printf("# unbinds: %llu\n", (unsigned long long)unbinds);
	printf("# SQEs written: %llu (%llu valid), CQEs reaped: %llu (%llu successful), reaps cut short: %llu\n",
	       (unsigned long long)sqes, (unsigned long long)sqes_valid, (unsigned long long)cqes,
	       (unsigned long long)cqes_ok, (unsigned long long)io_to);
	errno_figures();
	printf("# kernel reports during the run: %d\n", klog_bad_lines);
	if (failures || klog_bad_lines || !exercised)
		printf("# FAILED: replay a failing sequence with the '# replay:' line(s) above\n");
	int fail = died + hung + (klog_bad_lines > 0) + !exercised;
	printf("%d passed, %d failed\n", 4 - fail, fail);
	return fail ? 1 : 0;
}
