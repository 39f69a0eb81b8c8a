// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// gpunvme_hostrun.cpp - the device library (kernels/include/gpunvme) and
// the example kernels (kernels/examples), compiled as plain host C++,
// driving a real (in CI: QEMU-emulated) NVMe controller through the
// gpunvme UAPI. Host threads are lanes: hostgroup::run_group()
// (host_group.h) starts one thread per lane of a workgroup, sets the
// library's host_lane_id / host_group_id / host_group_size in each and
// installs the group's barrier as gpunvme::host_barrier, so sync_lanes()
// is a real barrier and group_submit()/group_reap() run with 1 to 8 lanes
// exactly as a GPU workgroup runs them, one workgroup per queue pair.
//
// The queue-pair view is built the way a GPU gets it: SQ, CQ and the
// doorbell page mmapped from /dev/gpunvme<N> (for a shared pair the shadow
// SQ, the CQ mirror and the shadow doorbell cells), doorbells = doorbell
// page + sq_db / cq_db. Two kinds of workloads:
//  - this file's lane loop (pair_job_run): per round, a batch of writes of
//    a known pattern, then reads of it back into poisoned pages, every SQE
//    built by sqe_write()/sqe_read() + prp_pair(), every batch submitted
//    and reaped by group_submit()/group_reap(); CIDs, SQ ids, statuses,
//    every byte and every lane's ring position checked; several pairs side
//    by side, wrap, partial batches, timeout and stop with all lanes
//    agreeing;
//  - write.hip, read_verify.hip and sweep.hip themselves, launched with
//    one workgroup per queue pair (their groups one after another: see
//    launch()), results, ring positions and the data checked by the host;
//  - pthread_io.hip (the per-thread API) and guide_read.hip, the
//    programming guide's kernel (kernels/README.md), its groups all at
//    once on pairs they share.
// Plus a PRP-list transfer (the list in a shared pair's PRP pool, or in
// the buffer for a raw pair) and, on shared pairs, SQEs the module must
// reject. Each runs first on shared pairs (flags 0: the module checks and
// relays every SQE; its debugfs counters must show it did), then on raw
// pairs after the file claims owner mode (GPUNVME_IOC_CLAIM_OWNER); when
// the claim is refused with EPERM (no CAP_SYS_RAWIO, lockdown, no
// translating IOMMU) the raw tests are reported as skipped, with the
// reason.
// Built with -DGPUNVME_HOSTRUN_PASSTHROUGH (make -C kernels hostrun-pt,
// linked with the gpunvme library's static archive) the same tests run on
// a namespace the kernel drives, through the library's passthrough back end
// (userspace/gpunvme/src/passthrough: shadow pairs laid out as the module's
// shared pairs, a relay thread that checks each SQE and submits it through
// io_uring NVMe passthrough): GPUNVME_PT_DEVICE (/dev/ngXnY, /dev/nvmeXnY or
// a partition) and GPUNVME_PT_OPTIONS (gpunvme_passthrough.h's options, e.g.
// "partition=/dev/nvme0n1p2") instead of a module and a BDF; the UAPI calls
// are the same, answered by the library; shared pairs only (raw ones need
// owner mode, which a passthrough back end has not).
// Output: KTAP. Environment: GPUNVME_BDF, GPUNVME_DIR (module load and
// bind as in tests/selftests/vmenv.h); GPUNVME_BDF2, a second controller
// for pthread_two_controllers; GPUNVME_HOSTRUN_ONLY (comma-separated test
// names: run only those) and GPUNVME_HOSTRUN_MODES ("shared" or "raw":
// only that half).

#include <gpunvme/gpunvme.h>

#include "host_group.h"

/* The example kernels, verbatim: extern "C" host functions in this build. */
#include "../examples/write.hip"
#include "../examples/read_verify.hip"
#include "../examples/sweep.hip"
#include "../examples/pthread_io.hip"
#include "../examples/guide_read.hip"
#include "../examples/guide_array.hip"

#include "gpunvme.h" /* uapi/gpunvme.h */
#ifdef GPUNVME_HOSTRUN_PASSTHROUGH
#include "gpunvme_passthrough.h" /* userspace/gpunvme/include */
#endif
#include "vmenv.h"   /* tests/selftests/vmenv.h (-isystem: its -Wformat-truncation is not ours) */

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <poll.h>
#include <sys/wait.h>
#include <string>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace gpunvme;

#define UAPI_INIT(s)                                                        \
	do {                                                                \
		std::memset(&(s), 0, sizeof(s));                            \
		(s).size = sizeof(s);                                       \
		(s).version = GPUNVME_UAPI_VERSION;                         \
	} while (0)

static constexpr uint32_t PAGE = 4096;
static constexpr uint64_t TICK_HZ = 1000000000ull; /* host ticks are ns */
static constexpr uint64_t WAIT_TICKS = gpunvme::WAIT_CAP_SECONDS * TICK_HZ;

/* ---- KTAP ------------------------------------------------------------ */

static int g_n, g_pass, g_fail, g_skipped;
static std::atomic<bool> g_ok;
static std::string g_skip; /* set by a test that cannot run here: why */
static std::mutex g_print;

static void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void diag(const char *fmt, ...)
{
	std::lock_guard<std::mutex> l(g_print);
	va_list ap;
	va_start(ap, fmt);
	std::printf("# ");
	std::vprintf(fmt, ap);
	std::printf("\n");
	std::fflush(stdout);
	va_end(ap);
}

#define CHECK(cond, ...)                                                    \
	do {                                                                \
		if (!(cond)) {                                              \
			diag("%s:%d: %s", __FILE__, __LINE__, #cond);       \
			diag(__VA_ARGS__);                                  \
			g_ok = false;                                       \
		}                                                           \
	} while (0)

/* ---- the controller, the file, the data buffer ------------------------ */

static int g_fd = -1;
static gpunvme_info g_info;
#ifdef GPUNVME_HOSTRUN_PASSTHROUGH
static gpunvme_pt *g_pt; /* the back end; g_fd is its memfd (for mmap) */
#endif

/* A UAPI ioctl on the controller: the module's node, or the passthrough
 * back end, which answers the same structs. */
static int dev_ioctl(unsigned long request, void *arg)
{
#ifdef GPUNVME_HOSTRUN_PASSTHROUGH
	return gpunvme_pt_ioctl(g_pt, request, arg);
#else
	return ioctl(g_fd, request, arg);
#endif
}

/* The same on a given file: another node's (the array's controllers), or
 * the back end's own memfd in passthrough builds, which have only that one. */
static int fd_ioctl(int fd, unsigned long request, void *arg)
{
#ifdef GPUNVME_HOSTRUN_PASSTHROUGH
	if (fd != g_fd) {
		errno = EBADF;
		return -1;
	}
	return gpunvme_pt_ioctl(g_pt, request, arg);
#else
	return ioctl(fd, request, arg);
#endif
}
static uint32_t g_nsid, g_lba_size, g_blocks_per_page;
static uint64_t g_lba_next; /* LBA cursor: every batch gets fresh blocks */
static uint64_t g_lba_end;

static constexpr uint32_t BUF_PAGES = 64;
static uint8_t *g_buf;
static uint64_t g_dma[BUF_PAGES];
static uint32_t g_buf_handle;
/* Owner mode's PRP pools: a window of POOL_WIN pages per pair. */
static constexpr uint32_t POOL_WIN = 16, POOL_PAGES = 4 * POOL_WIN;
static uint8_t *g_pool;
static uint64_t g_pool_dma[POOL_PAGES];
static uint32_t g_pool_handle;

static uint8_t *buf_page(uint32_t p) { return g_buf + (size_t)p * PAGE; }

/* Deterministic pattern: every byte depends on seed, LBA and offset. */
static uint8_t pattern_byte(uint32_t seed, uint64_t lba, uint32_t off)
{
	uint64_t x = (seed * 0x9E3779B97F4A7C15ull) ^
		     (lba * 0xBF58476D1CE4E5B9ull) ^
		     ((off / 8 + 1) * 0x94D049BB133111EBull);
	x ^= x >> 31;
	x *= 0xD6E8FEB86659FD93ull;
	x ^= x >> 29;
	return (uint8_t)(x >> ((off % 8) * 8));
}

static std::mutex g_lba_lock;
static uint64_t lba_alloc(uint32_t pages)
{
	std::lock_guard<std::mutex> l(g_lba_lock);
	uint64_t need = (uint64_t)pages * g_blocks_per_page;
	if (g_lba_next + need > g_lba_end)
		g_lba_next = g_lba_end / 2; /* plenty for CI; reuse is still fresh seeds */
	uint64_t lba = g_lba_next;
	g_lba_next += need;
	return lba;
}

static const char *iommu_name(uint32_t m)
{
	switch (m) {
	case GPUNVME_IOMMU_NONE: return "none";
	case GPUNVME_IOMMU_IDENTITY: return "identity (passthrough)";
	case GPUNVME_IOMMU_STRICT: return "strict";
	case GPUNVME_IOMMU_LAZY: return "lazy";
	default: return "other";
	}
}

#ifdef GPUNVME_HOSTRUN_PASSTHROUGH
static int open_controller(std::string &why)
{
	const char *dev = getenv("GPUNVME_PT_DEVICE");
	const char *opts = getenv("GPUNVME_PT_OPTIONS");
	if (!dev || !*dev) {
		why = "GPUNVME_PT_DEVICE is not set (a /dev/ngXnY, /dev/nvmeXnY or partition)";
		return -1;
	}
	char err[512] = "";
	g_pt = gpunvme_pt_open(dev, opts, err, sizeof(err));
	if (!g_pt) {
		why = std::string("gpunvme_pt_open ") + dev + ": " + err;
		return -1;
	}
	g_fd = gpunvme_pt_fd(g_pt);
	UAPI_INIT(g_info);
	if (dev_ioctl(GPUNVME_IOC_GET_INFO, &g_info)) {
		why = std::string("GET_INFO: ") + strerror(errno);
		return -1;
	}
	diag("passthrough %s (%s): %s %s, completions %s, shared max transfer %u bytes",
	     dev, opts ? opts : "whole namespace", g_info.bdf, g_info.model,
	     gpunvme_pt_polled(g_pt) ? "polled" : "by interrupt", g_info.shared_max_transfer);
	return g_fd;
}

/* The array's tests open other controllers' nodes: the passthrough build
 * has its one namespace only, so they fail with this reason. */
static int open_node(const char *bdf, gpunvme_info *, std::string &why)
{
	why = std::string("hostrun-pt opens no module node (") + bdf +
	      "): the array's tests need the module";
	errno = ENODEV;
	return -1;
}
#else
/* Load the module, bind bdf to it and open its /dev/gpunvme<N> (N is bind
 * order: the node whose GET_INFO names bdf); its info in *info. */
static int open_node(const char *bdf, gpunvme_info *info, std::string &why)
{
	int r = load_module();
	if (r) {
		why = std::string("load_module: ") + strerror(-r);
		return -1;
	}
	r = bind_gpunvme(bdf);
	if (r) {
		why = std::string("bind_gpunvme ") + bdf + ": " + strerror(-r);
		return -1;
	}
	for (int tries = 0; tries < 200; tries++) {
		for (int n = 0; n < 16; n++) {
			char path[64];
			std::snprintf(path, sizeof(path), "/dev/gpunvme%d", n);
			int fd = open(path, O_RDWR | O_CLOEXEC);
			if (fd < 0)
				continue;
			UAPI_INIT(*info);
			if (ioctl(fd, GPUNVME_IOC_GET_INFO, info) == 0 && !std::strcmp(info->bdf, bdf)) {
				diag("%s: %s on %s, io_queues %u, MQES+1 %u", path, info->model,
				     info->bdf, info->io_queues, info->max_queue_entries);
				return fd;
			}
			close(fd);
		}
		usleep(10000);
	}
	why = std::string("no /dev/gpunvme<N> for ") + bdf;
	return -1;
}

static int open_controller(std::string &why)
{
	int fd = open_node(gpunvme_bdf(), &g_info, why);
	if (fd >= 0)
		diag("IOMMU mode %s, modes %s%s, shared max transfer %u bytes, MDTS %u bytes",
		     iommu_name(g_info.iommu_mode),
		     (g_info.modes & GPUNVME_MODE_SHARED) ? "shared " : "",
		     (g_info.modes & GPUNVME_MODE_OWNER) ? "owner" : "",
		     g_info.shared_max_transfer, g_info.mdts_bytes);
	return fd;
}
#endif

static int setup(std::string &why)
{
	g_fd = open_controller(why);
	if (g_fd < 0)
		return -1;
	if (g_info.num_namespaces < 1 || g_info.page_size != PAGE) {
		why = "no namespace, or page size is not 4 KiB";
		return -1;
	}
	g_nsid = g_info.ns[0].nsid;
	g_lba_size = g_info.ns[0].lba_size;
	if (g_lba_size == 0 || g_lba_size > PAGE || PAGE % g_lba_size) {
		why = "LBA size " + std::to_string(g_lba_size) + " unsupported";
		return -1;
	}
	g_blocks_per_page = PAGE / g_lba_size;
	/* Second half of the namespace: clear of the other tests' blocks. */
	g_lba_end = g_info.ns[0].capacity_lbas / g_blocks_per_page * g_blocks_per_page;
	g_lba_next = g_lba_end / 2 / g_blocks_per_page * g_blocks_per_page;
	diag("nsid %u: %llu LBAs of %u bytes; hostrun uses LBAs from %llu",
	     g_nsid, (unsigned long long)g_info.ns[0].capacity_lbas,
	     g_lba_size, (unsigned long long)g_lba_next);

	g_buf = (uint8_t *)mmap(nullptr, BUF_PAGES * PAGE,
				PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (g_buf == MAP_FAILED) {
		why = "mmap buffer failed";
		return -1;
	}
	gpunvme_map_host m;
	UAPI_INIT(m);
	m.addr = (uintptr_t)g_buf;
	m.len = BUF_PAGES * PAGE;
	m.dma_addrs = (uintptr_t)g_dma;
	if (dev_ioctl(GPUNVME_IOC_MAP_HOST, &m)) {
		why = std::string("MAP_HOST: ") + strerror(errno);
		return -1;
	}
	g_buf_handle = m.handle;
	g_pool = (uint8_t *)mmap(nullptr, POOL_PAGES * PAGE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (g_pool == MAP_FAILED) {
		why = "mmap pool failed";
		return -1;
	}
	UAPI_INIT(m);
	m.addr = (uintptr_t)g_pool;
	m.len = POOL_PAGES * PAGE;
	m.dma_addrs = (uintptr_t)g_pool_dma;
	if (dev_ioctl(GPUNVME_IOC_MAP_HOST, &m)) {
		why = std::string("MAP_HOST (pool): ") + strerror(errno);
		return -1;
	}
	g_pool_handle = m.handle;
	return 0;
}

static void teardown()
{
	if (g_fd < 0)
		return;
	if (g_buf && g_buf != MAP_FAILED && g_buf_handle) {
		gpunvme_unmap u;
		UAPI_INIT(u);
		u.handle = g_buf_handle;
		if (dev_ioctl(GPUNVME_IOC_UNMAP, &u))
			diag("UNMAP: %s", strerror(errno));
	}
	if (g_pool_handle) {
		gpunvme_unmap u;
		UAPI_INIT(u);
		u.handle = g_pool_handle;
		if (dev_ioctl(GPUNVME_IOC_UNMAP, &u))
			diag("UNMAP (pool): %s", strerror(errno));
	}
#ifdef GPUNVME_HOSTRUN_PASSTHROUGH
	gpunvme_pt_close(g_pt); /* g_fd is its memfd */
	g_pt = nullptr;
#else
	close(g_fd);
#endif
}

/* ---- a queue pair as the GPU sees it ----------------------------------- */

struct pair {
	int fd = -1;       /* the file the pair belongs to */
	gpunvme_qpair_create c;
	void *sq = MAP_FAILED, *cq = MAP_FAILED, *db = MAP_FAILED;
	void *pool = MAP_FAILED; /* a shared pair's PRP pool */
	uint32_t stop = 0; /* the host's stop flag for this pair */
	qpair view{};      /* the kernel argument every lane starts from */
	bool live = false;
};

static int pair_open(pair &p, uint32_t depth, uint32_t flags, int fd = -1)
{
	p.fd = fd < 0 ? g_fd : fd;
	UAPI_INIT(p.c);
	p.c.depth = depth;
	p.c.flags = flags;
	if (fd_ioctl(p.fd, GPUNVME_IOC_CREATE_QPAIR, &p.c))
		return -errno;
	p.live = true;
	p.sq = mmap(nullptr, p.c.sq_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		    p.fd, p.c.sq_offset);
	p.cq = mmap(nullptr, p.c.cq_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		    p.fd, p.c.cq_offset);
	p.db = mmap(nullptr, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, p.fd,
		    p.c.db_offset);
	if (p.sq == MAP_FAILED || p.cq == MAP_FAILED || p.db == MAP_FAILED)
		return -errno;
	if (!(flags & GPUNVME_QPAIR_RAW)) {
		/* UAPI: a shared pair builds its PRP lists in its pool. */
		if (!p.c.prp_size || p.c.prp_dma % 8)
			return -EPROTO;
		p.pool = mmap(nullptr, p.c.prp_size, PROT_READ | PROT_WRITE,
			      MAP_SHARED, p.fd, p.c.prp_offset);
		if (p.pool == MAP_FAILED)
			return -errno;
	}

	qpair &q = p.view;
	q = qpair{};
	q.sq = (sqe *)p.sq;
	q.cq = (const cqe *)p.cq;
	q.sq_db = (volatile uint32_t *)((uint8_t *)p.db + p.c.sq_db);
	q.cq_db = (volatile uint32_t *)((uint8_t *)p.db + p.c.cq_db);
	q.stop = &p.stop;
	q.timeout_ticks = WAIT_TICKS;
	q.tick_hz = TICK_HZ;
	q.depth = depth;
	q.sq_tail = 0;
	q.cq_head = 0;
	q.phase = 1; /* UAPI: phase tag starts at 1 */
	q.inflight = 0;
	q.error = OK;
	return 0;
}

static void pair_close(pair &p)
{
	if (p.sq != MAP_FAILED)
		munmap(p.sq, p.c.sq_size);
	if (p.cq != MAP_FAILED)
		munmap(p.cq, p.c.cq_size);
	if (p.db != MAP_FAILED)
		munmap(p.db, PAGE);
	if (p.pool != MAP_FAILED)
		munmap(p.pool, p.c.prp_size);
	p.sq = p.cq = p.db = p.pool = MAP_FAILED;
	if (p.live) {
		gpunvme_qpair_destroy d;
		UAPI_INIT(d);
		d.qid = p.c.qid;
		if (fd_ioctl(p.fd, GPUNVME_IOC_DESTROY_QPAIR, &d)) {
			diag("DESTROY_QPAIR %u: %s", p.c.qid, strerror(errno));
			g_ok = false;
		}
		p.live = false;
	}
}

/* ---- lanes ------------------------------------------------------------- */

/*
 * One workgroup per queue pair: hostgroup::run_group() starts one host
 * thread per lane with its identity in the library's thread_locals and the
 * group's barrier behind sync_lanes(), so the lanes run group_submit() and
 * group_reap() as a GPU workgroup runs them, each lane on its own copy of
 * the qpair. What a kernel would keep in __shared__ memory is here, one per
 * group (groups of several pairs run side by side).
 */
static const hostgroup::limits LIMITS{
	std::chrono::milliseconds(60000),  /* at a barrier: > the wait cap */
	std::chrono::milliseconds(300000), /* a whole group */
};

struct group_shared {
	int32_t agg = OK;        /* group_reap()'s agreement */
	int32_t verdict = OK;    /* first failure of the group, any lane */
	std::vector<cqe> out;    /* this batch's CQE, per lane */
	std::vector<int32_t> rc; /* this batch's result, per lane */

	explicit group_shared(uint32_t lanes) : out(lanes), rc(lanes) {}
};

/* Verdicts of the test's own checks (the library's results are < 0 or NVMe). */
enum : int32_t {
	BAD_CQE = -74,  /* EBADMSG: wrong CID, SQ id or status in a CQE */
	BAD_DATA = -84, /* EILSEQ: read-back differs from what was written */
};

struct batch_spec {
	uint8_t opc;       /* NVME_OPC_WRITE or NVME_OPC_READ */
	uint32_t n;        /* commands, <= group size and <= depth-1 */
	uint32_t page0;    /* lane i uses buffer page page0 + i */
	uint64_t lba0;     /* lane i covers LBAs lba0 + i * blocks_per_page */
	uint32_t seed;
	uint16_t cid0;     /* lane i's command has CID cid0 + i */
};

static sqe lane_sqe(const batch_spec &b, uint32_t lane)
{
	uint64_t prp1, prp2;
	uint32_t page = b.page0 + lane;
	bool one = prp_pair(g_dma[page], PAGE, g_info.page_size, &prp1, &prp2);
	(void)one; /* one page, page-aligned: always a pair */
	uint64_t lba = b.lba0 + (uint64_t)lane * g_blocks_per_page;
	uint16_t nlb0 = (uint16_t)(g_blocks_per_page - 1);
	uint16_t cid = (uint16_t)(b.cid0 + lane);
	if (b.opc == NVME_OPC_WRITE)
		return sqe_write(cid, g_nsid, lba, nlb0, prp1, prp2);
	return sqe_read(cid, g_nsid, lba, nlb0, prp1, prp2);
}

/* The payload a lane writes before its SQE (a GPU lane would, too). */
static void lane_fill(const batch_spec &b, uint32_t lane)
{
	uint8_t *p = buf_page(b.page0 + lane);
	uint64_t lba = b.lba0 + (uint64_t)lane * g_blocks_per_page;
	for (uint32_t off = 0; off < PAGE; off++)
		p[off] = pattern_byte(b.seed, lba + off / g_lba_size,
				      off % g_lba_size);
}

/* The CQEs of a batch: CIDs cid0..cid0+n-1 each once, our SQ, success. */
static bool check_cqes(const group_shared &gs, const batch_spec &b,
		       uint16_t qid, uint32_t gid)
{
	bool ok = true;
	std::vector<int> seen(b.n, 0);
	for (uint32_t i = 0; i < b.n; i++) {
		const cqe &c = gs.out[i];
		uint16_t k = (uint16_t)(c.cid - b.cid0);
		if (k >= b.n || seen[k]++) {
			diag("group %u lane %u: unexpected CID %u (batch %u..%u)",
			     gid, i, c.cid, b.cid0, b.cid0 + b.n - 1);
			ok = false;
		}
		if (c.sqid != qid) {
			diag("group %u lane %u: CQE sqid %u, want %u", gid, i,
			     c.sqid, qid);
			ok = false;
		}
		if (!status_ok(cqe_status((uint32_t)c.sf << 16))) {
			diag("group %u lane %u: CID %u status 0x%x", gid, i,
			     c.cid, cqe_status((uint32_t)c.sf << 16));
			ok = false;
		}
	}
	return ok;
}

/* A lane's read-back page against the pattern, every byte. */
static bool verify_page(const batch_spec &b, uint32_t lane, uint32_t gid)
{
	const uint8_t *p = buf_page(b.page0 + lane);
	uint64_t lba = b.lba0 + (uint64_t)lane * g_blocks_per_page;
	uint32_t bad = 0, first = 0;
	for (uint32_t off = 0; off < PAGE; off++)
		if (p[off] != pattern_byte(b.seed, lba + off / g_lba_size,
					   off % g_lba_size)) {
			if (!bad++)
				first = off;
		}
	if (bad)
		diag("group %u lane %u: LBA %llu: %u of %u bytes differ, first at %u (0x%02x, want 0x%02x)",
		     gid, lane, (unsigned long long)lba, bad, PAGE, first,
		     p[first],
		     pattern_byte(b.seed, lba + first / g_lba_size,
				  first % g_lba_size));
	return bad == 0;
}

/*
 * One batch by the whole group, inside the lanes, the way a kernel does
 * it: lanes < n fill their page (write) or poison it (read) and build
 * their SQE; every lane calls group_submit() and group_reap(). After a
 * barrier lane 0 checks all lanes' CQEs and, for a read, each lane checks
 * its own page; after another, every lane reads the same verdict.
 */
static int32_t lane_batch(qpair &q, group_shared &gs, const batch_spec &b,
			  uint16_t qid)
{
	const uint32_t lane = lane_id();
	sqe e{};
	cqe c{};

	if (lane < b.n) {
		if (b.opc == NVME_OPC_WRITE)
			lane_fill(b, lane);
		else
			std::memset(buf_page(b.page0 + lane), 0xA5, PAGE);
		e = lane_sqe(b, lane);
	}
	int32_t rc = group_submit(q, lane, b.n, e);
	if (rc == OK)
		rc = group_reap(q, lane, b.n, &c, &gs.agg);
	gs.out[lane] = c;
	gs.rc[lane] = rc;
	if (rc != OK)
		atomic_set_if_relaxed(&gs.verdict, OK, rc);
	sync_lanes();
	if (lane == 0 && atomic_load_relaxed(&gs.verdict) == OK &&
	    !check_cqes(gs, b, qid, group_id()))
		atomic_set_if_relaxed(&gs.verdict, OK, BAD_CQE);
	if (b.opc == NVME_OPC_READ && lane < b.n && rc == OK &&
	    !verify_page(b, lane, group_id()))
		atomic_set_if_relaxed(&gs.verdict, OK, BAD_DATA);
	sync_lanes();
	return atomic_load_relaxed(&gs.verdict);
}

/* Every lane's private copy must have advanced identically. */
static bool lanes_agree(const std::vector<qpair> &q, uint32_t gid)
{
	for (uint32_t i = 1; i < q.size(); i++) {
		const qpair &a = q[0], &b = q[i];
		if (a.sq_tail != b.sq_tail || a.cq_head != b.cq_head ||
		    a.phase != b.phase || a.inflight != b.inflight ||
		    a.error != b.error) {
			diag("group %u: lane %u's qpair copy diverged from lane 0's",
			     gid, i);
			return false;
		}
	}
	return true;
}

/*
 * One queue pair, one workgroup: `rounds` rounds, each writing a batch of
 * n(round) pages of pattern and reading them back into poisoned pages.
 */
struct pair_job {
	pair *p;
	uint32_t gid, lanes, page0, rounds;
	uint32_t (*batch_n)(uint32_t round, uint32_t lanes, uint32_t depth);
	uint32_t seed;
	uint64_t commands = 0; /* out */
	bool ok = true;         /* out */
	qpair final{};          /* out: lane 0's copy at the end */
};

static void pair_job_run(pair_job &j)
{
	const uint32_t depth = j.p->view.depth;
	const uint16_t qid = j.p->c.qid;
	group_shared gs(j.lanes);
	std::vector<qpair> finals(j.lanes);
	/* The rounds' LBAs are the kernel's arguments: chosen before launch. */
	std::vector<uint64_t> lba(j.rounds);
	for (uint32_t r = 0; r < j.rounds; r++)
		lba[r] = lba_alloc(j.batch_n(r, j.lanes, depth));

	bool barrier_ok = hostgroup::run_group(j.gid, j.lanes, [&](uint32_t lane) {
		qpair q = j.p->view; /* the kernel argument, every lane its own */
		uint16_t cid = 1;
		uint64_t done = 0;
		bool ok = true;
		for (uint32_t r = 0; ok && r < j.rounds; r++) {
			uint32_t n = j.batch_n(r, j.lanes, depth);
			/* Each round writes its batch, then reads it back. */
			for (uint8_t opc : {NVME_OPC_WRITE, NVME_OPC_READ}) {
				batch_spec b{opc, n, j.page0, lba[r],
					     j.seed * 1000u + r, cid};
				int32_t v = lane_batch(q, gs, b, qid);
				if (v != OK) {
					if (lane == 0)
						diag("pair q%u round %u: %s batch of %u: %d (lane 0: %d)",
						     qid, r, opc == NVME_OPC_WRITE ? "write" : "read",
						     n, v, gs.rc[0]);
					ok = false;
					break;
				}
				cid = (uint16_t)(cid + n);
				done += n;
			}
		}
		finals[lane] = q;
		if (lane == 0)
			j.commands = done;
	}, LIMITS);

	if (!barrier_ok)
		diag("pair q%u: a lane never reached a barrier", qid);
	j.ok = barrier_ok && gs.verdict == OK && lanes_agree(finals, j.gid);
	j.final = finals[0];
}

/*
 * Shared pairs: the relay's debugfs counters must show that it checked and
 * relayed this pair's traffic (at least `commands` SQEs accepted and CQEs
 * mirrored, none rejected, doorbells rung). -1 when debugfs (or one
 * counter) is not there (a skip of that check, not a failure).
 */
static long long bridge_counter_of(const char *bdf, uint16_t qid, const char *name)
{
#ifdef GPUNVME_HOSTRUN_PASSTHROUGH
	/* The library's relay counts the same (no real doorbells: -1). */
	return gpunvme_pt_counter(g_pt, qid, name);
#endif
	char path[256];
	std::snprintf(path, sizeof(path), "/sys/kernel/debug/gpunvme-%s-q%u/%s",
		      bdf, qid, name);
	FILE *f = std::fopen(path, "r");
	if (!f)
		return -1;
	long long v = -1;
	if (std::fscanf(f, "%lld", &v) != 1)
		v = -1;
	std::fclose(f);
	return v;
}

static long long bridge_counter(uint16_t qid, const char *name)
{
	return bridge_counter_of(gpunvme_bdf(), qid, name);
}

static bool bridge_relayed(const pair &p, uint64_t commands)
{
	long long mirrored = bridge_counter(p.c.qid, "cqes_mirrored");
	long long sq = bridge_counter(p.c.qid, "sq_doorbell_writes");
	long long cq = bridge_counter(p.c.qid, "cq_doorbell_writes");
	long long bad = bridge_counter(p.c.qid, "bad_doorbell_values");
	long long accepted = bridge_counter(p.c.qid, "sqes_accepted");
	long long rejected = bridge_counter(p.c.qid, "sqes_rejected");
	if (mirrored < 0) {
		diag("q%u: no relay counters in debugfs; relay not checked", p.c.qid);
		return true;
	}
	diag("q%u relay: cqes_mirrored %lld sq_doorbell_writes %lld cq_doorbell_writes %lld bad_doorbell_values %lld sqes_accepted %lld sqes_rejected %lld",
	     p.c.qid, mirrored, sq, cq, bad, accepted, rejected);
	/* A passthrough relay rings no doorbells of its own (io_uring does). */
	const bool doorbells = sq >= 0 || cq >= 0;
	return mirrored >= (long long)commands && (!doorbells || (sq > 0 && cq > 0)) && bad == 0 &&
	       (accepted < 0 || accepted >= (long long)commands) && rejected <= 0;
}

static bool is_shared(uint32_t flags) { return !(flags & GPUNVME_QPAIR_RAW); }

/* Where the ring must be after `total` commands through a fresh pair. */
static bool ring_position_ok(const qpair &q, uint64_t total)
{
	uint32_t head = (uint32_t)(total % q.depth);
	uint32_t phase = 1u ^ (uint32_t)((total / q.depth) & 1);
	if (q.sq_tail != head || q.cq_head != head || q.phase != phase ||
	    q.inflight != 0 || q.error != OK) {
		diag("after %llu commands: sq_tail %u cq_head %u phase %u inflight %u error %d; want %u %u %u 0 0",
		     (unsigned long long)total, q.sq_tail, q.cq_head, q.phase,
		     q.inflight, q.error, head, head, phase);
		return false;
	}
	return true;
}

static uint32_t n_one(uint32_t, uint32_t, uint32_t) { return 1; }
static uint32_t n_full(uint32_t, uint32_t lanes, uint32_t depth)
{
	return lanes < depth - 1 ? lanes : depth - 1;
}
static uint32_t n_vary(uint32_t r, uint32_t lanes, uint32_t depth)
{
	uint32_t n = 1 + r % lanes; /* 1..lanes, some lanes idle */
	return n < depth - 1 ? n : depth - 1;
}

/*
 * npairs queue pairs of `depth`, each its own workgroup of `lanes` host
 * threads on its own buffer pages, all running concurrently.
 */
static void run_pairs(uint32_t flags, uint32_t npairs, uint32_t depth,
		      uint32_t lanes, uint32_t rounds,
		      uint32_t (*batch_n)(uint32_t, uint32_t, uint32_t),
		      uint32_t seed, bool check_wrap)
{
	if (npairs > g_info.io_queues || depth > g_info.max_queue_entries ||
	    npairs * lanes > BUF_PAGES) {
		diag("needs %u queue pairs of depth %u (controller: %u of at most %u)",
		     npairs, depth, g_info.io_queues, g_info.max_queue_entries);
		g_ok = false;
		return;
	}
	std::vector<pair> pairs(npairs);
	std::vector<pair_job> jobs(npairs);
	bool opened = true;
	for (uint32_t i = 0; i < npairs; i++) {
		int r = pair_open(pairs[i], depth, flags);
		if (r) {
			diag("CREATE_QPAIR/mmap (depth %u, flags %u): %s", depth,
			     flags, strerror(-r));
			opened = false;
			break;
		}
		jobs[i].p = &pairs[i];
		jobs[i].gid = i;
		jobs[i].lanes = lanes;
		jobs[i].page0 = i * lanes;
		jobs[i].rounds = rounds;
		jobs[i].batch_n = batch_n;
		jobs[i].seed = seed * 16 + i;
	}
	if (opened) {
		std::vector<std::thread> drivers;
		for (uint32_t i = 0; i < npairs; i++)
			drivers.emplace_back(pair_job_run, std::ref(jobs[i]));
		for (auto &t : drivers)
			t.join();
		for (uint32_t i = 0; i < npairs; i++) {
			if (!jobs[i].ok)
				g_ok = false;
			else if (check_wrap &&
				 !ring_position_ok(jobs[i].final, jobs[i].commands))
				g_ok = false;
			if (is_shared(flags) &&
			    !bridge_relayed(pairs[i], jobs[i].commands))
				g_ok = false;
		}
		uint64_t total = 0;
		for (auto &j : jobs)
			total += j.commands;
		diag("%u pair(s) x %u lanes, depth %u: %llu commands", npairs,
		     lanes, depth, (unsigned long long)total);
	} else {
		g_ok = false;
	}
	for (auto &p : pairs)
		pair_close(p);
}

/* ---- workloads ----------------------------------------------------------- */

static void t_single_io(uint32_t flags)
{
	run_pairs(flags, 1, 2, 1, 1, n_one, 1, true);
}

static void t_two_pairs(uint32_t flags)
{
	run_pairs(flags, 2, 16, 4, 6, n_full, 2, true);
}

static void t_four_pairs(uint32_t flags)
{
	run_pairs(flags, 4, 16, 4, 6, n_full, 3, true);
}

/* Depth 4, batches of depth-1 = 3 (lane 3 idle): 22 batches, 66 commands,
 * 16.5 laps; the phase flips every lap, the ring position is checked. */
static void t_wrap(uint32_t flags)
{
	run_pairs(flags, 1, 4, 4, 11, n_full, 4, true);
}

/* One queue, many rounds, batch sizes 1..8 over an 8-lane group. */
static void t_multi_round(uint32_t flags)
{
	run_pairs(flags, 1, 32, 8, 24, n_vary, 5, true);
}

/*
 * Bounded waits against the real CQ memory, all lanes agreeing: n = 3
 * commands "in flight" whose slots the controller never fills (nothing
 * was submitted), lane 3 idle. group_reap() times out in every lane,
 * poisons every lane's copy and rings nothing; group_submit() is then
 * ERR_IO everywhere. Again with the host's stop flag raised: ERR_STOPPED
 * in every lane, long before the deadline.
 */
struct lane_end {
	int32_t reap = 1, submit = 1; /* 1: the lane never got there */
	qpair q{};
};

static bool timeout_round(const qpair &view, uint32_t lanes, uint32_t n,
			  std::vector<lane_end> &out, uint64_t &ns)
{
	int32_t agg = 0x7777; /* __shared__: garbage until group_reap sets it */
	out.assign(lanes, lane_end());
	uint64_t t0 = wall_ticks();
	bool ok = hostgroup::run_group(0, lanes, [&](uint32_t lane) {
		qpair q = view;
		cqe c{};
		out[lane].reap = group_reap(q, lane, n, &c, &agg);
		out[lane].submit = group_submit(q, lane, 1, sqe_flush(1, g_nsid));
		out[lane].q = q;
	}, LIMITS);
	ns = wall_ticks() - t0;
	return ok;
}

static void t_timeout_stop(uint32_t flags)
{
	const uint32_t lanes = 4, n = 3;
	pair p;
	int r = pair_open(p, 8, flags);
	if (r) {
		diag("CREATE_QPAIR: %s", strerror(-r));
		g_ok = false;
		pair_close(p);
		return;
	}
	qpair view = p.view;
	view.timeout_ticks = TICK_HZ / 20; /* 50 ms */
	view.inflight = n;                 /* pretend: the slots stay empty */
	std::vector<lane_end> out;
	uint64_t ns;
	bool ok = timeout_round(view, lanes, n, out, ns);
	CHECK(ok, "timeout: a lane never reached a barrier");
	for (uint32_t i = 0; i < lanes; i++) {
		const qpair &q = out[i].q;
		CHECK(out[i].reap == ERR_TIMEOUT && out[i].submit == ERR_IO &&
		      q.error == ERR_TIMEOUT && q.cq_head == 0 && q.phase == 1 &&
		      q.sq_tail == 0 && q.inflight == n,
		      "timeout, lane %u: reap %d submit %d error %d cq_head %u inflight %u",
		      i, out[i].reap, out[i].submit, q.error, q.cq_head, q.inflight);
	}
	CHECK(ns >= view.timeout_ticks && ns < 10 * TICK_HZ,
	      "timed out after %llu ns", (unsigned long long)ns);

	__atomic_store_n(&p.stop, 1u, __ATOMIC_RELEASE);
	view.timeout_ticks = WAIT_TICKS;
	ok = timeout_round(view, lanes, n, out, ns);
	CHECK(ok, "stop: a lane never reached a barrier");
	for (uint32_t i = 0; i < lanes; i++)
		CHECK(out[i].reap == ERR_STOPPED && out[i].submit == ERR_IO &&
		      out[i].q.error == ERR_STOPPED && out[i].q.cq_head == 0,
		      "stop, lane %u: reap %d submit %d error %d", i,
		      out[i].reap, out[i].submit, out[i].q.error);
	CHECK(ns < TICK_HZ, "stop took %llu ns", (unsigned long long)ns);
	__atomic_store_n(&p.stop, 0u, __ATOMIC_RELEASE);

	/* Shared only: the shadow cells are memory (MMIO doorbells are
	 * write-only): nobody rang either. */
	CHECK(!is_shared(flags) ||
	      (*(volatile uint32_t *)view.sq_db == 0 &&
	       *(volatile uint32_t *)view.cq_db == 0),
	      "shadow SQ tail %u, CQ head %u", *(volatile uint32_t *)view.sq_db,
	      *(volatile uint32_t *)view.cq_db);
	pair_close(p);
}

/* ---- the example kernels ------------------------------------------------- */

typedef void (*kernel_fn)(qpair *, const io_args *, io_result *);

/*
 * One launch of an example kernel: `groups` workgroups of `lanes` host
 * threads. The groups run one after another: GPUNVME_SHARED is a
 * function-static in the host build, i.e. workgroup memory only while one
 * group of a kernel runs at a time (compat.h). A GPU may schedule a grid
 * that way too, and the examples' groups never wait on one another; pairs
 * driven side by side are what two_qpairs/four_qpairs run.
 */
static bool launch(const char *name, kernel_fn k, uint32_t groups,
		   uint32_t lanes, qpair *qps, const io_args &a, io_result *res)
{
	std::memset((void *)res, 0, groups * sizeof(*res));
	for (uint32_t g = 0; g < groups; g++)
		if (!hostgroup::run_group(g, lanes,
					  [&](uint32_t) { k(qps, &a, res); },
					  LIMITS)) {
			diag("%s: group %u: a lane never reached a barrier", name, g);
			return false;
		}
	return true;
}

/* The examples address the buffer as one bus range (io_args.buf_dma). */
static bool buf_contiguous(uint32_t pages)
{
	for (uint32_t i = 1; i < pages; i++)
		if (g_dma[i] != g_dma[0] + (uint64_t)i * PAGE)
			return false;
	return true;
}

/* Words [from, to) of the buffer against the examples' pattern. */
static uint64_t pattern_mismatches(const io_args &a, uint64_t from, uint64_t to)
{
	const uint64_t *w = (const uint64_t *)g_buf;
	uint64_t base = a.slba << a.lba_shift, bad = 0;
	for (uint64_t j = from; j < to; j++)
		bad += w[j] != gx::pattern(a.seed, base + 8 * j);
	return bad;
}

struct example_cfg {
	uint32_t queues, lanes, depth;
	uint32_t cmds, pages_per_cmd; /* per queue; 2 pages: PRP2 is used */
	uint32_t sweep_rounds;
};

static bool examples_begin(uint32_t flags, const example_cfg &x,
			   std::vector<pair> &pairs, std::vector<qpair> &qps)
{
	const uint32_t pages = x.queues * x.cmds * x.pages_per_cmd;
	if (pages > BUF_PAGES || x.queues > g_info.io_queues ||
	    x.depth > g_info.max_queue_entries) {
		diag("needs %u pages, %u pairs of depth %u", pages, x.queues, x.depth);
		g_ok = false;
		return false;
	}
	if (!buf_contiguous(pages)) {
		g_skip = "MAP_HOST gave this buffer no single bus range";
		return false;
	}
	pairs.resize(x.queues);
	qps.resize(x.queues);
	for (uint32_t i = 0; i < x.queues; i++) {
		int r = pair_open(pairs[i], x.depth, flags);
		if (r) {
			diag("CREATE_QPAIR/mmap (depth %u, flags %u): %s", x.depth,
			     flags, strerror(-r));
			g_ok = false;
			return false;
		}
		qps[i] = pairs[i].view;
	}
	return true;
}

static io_args example_args(const example_cfg &x, uint64_t slba, uint64_t seed)
{
	io_args a{};
	a.slba = slba;
	a.buf_dma = g_dma[0];
	a.buf = g_buf;
	a.seed = seed;
	a.nsid = g_nsid;
	a.lba_shift = (uint32_t)__builtin_ctz(g_lba_size);
	a.blocks_per_cmd = x.pages_per_cmd * g_blocks_per_page;
	a.cmds_per_queue = x.cmds;
	a.page_size = g_info.page_size;
	a.rounds = x.sweep_rounds;
	return a;
}

/*
 * write.hip, read_verify.hip and sweep.hip themselves, every lane a host
 * thread, against the controller: write the pattern (+ one flush per
 * queue), poison the buffer, read-verify it (the kernel counts mismatched
 * words; the host checks every word again), poison, sweep (its reads must
 * bring back each lane's slice). Per queue: the kernel's result, and the
 * ring position it saved back against the commands it must have sent.
 */
static void run_examples(uint32_t flags, const example_cfg &x, uint64_t seed)
{
	std::vector<pair> pairs;
	std::vector<qpair> qps;
	if (!examples_begin(flags, x, pairs, qps)) {
		for (auto &p : pairs)
			pair_close(p);
		return;
	}
	const uint32_t pages = x.queues * x.cmds * x.pages_per_cmd;
	const uint64_t words = (uint64_t)pages * PAGE / 8;
	const uint64_t words_per_cmd = (uint64_t)x.pages_per_cmd * PAGE / 8;
	io_args a = example_args(x, lba_alloc(pages), seed);
	std::vector<io_result> res(x.queues);
	std::vector<uint64_t> sent(x.queues, 0);
	uint32_t n = x.lanes < x.depth - 1 ? x.lanes : x.depth - 1;
	n = n < x.cmds ? n : x.cmds; /* batch_size() */

	bool ok = launch("gpunvme_write", gpunvme_write, x.queues, x.lanes,
			 qps.data(), a, res.data());
	for (uint32_t q = 0; ok && q < x.queues; q++) {
		sent[q] += x.cmds + 1;
		CHECK(res[q].status == OK && res[q].completed == x.cmds,
		      "write, queue %u: status %d, %u of %u completed", q,
		      res[q].status, res[q].completed, x.cmds);
		CHECK(ring_position_ok(qps[q], sent[q]), "write, queue %u", q);
	}

	std::memset(g_buf, 0xA5, (size_t)pages * PAGE);
	ok = ok && g_ok &&
	     launch("gpunvme_read_verify", gpunvme_read_verify, x.queues,
		    x.lanes, qps.data(), a, res.data());
	for (uint32_t q = 0; ok && q < x.queues; q++) {
		sent[q] += x.cmds;
		CHECK(res[q].status == OK && res[q].completed == x.cmds &&
		      res[q].mismatches == 0,
		      "read_verify, queue %u: status %d, %u of %u completed, %u words differ",
		      q, res[q].status, res[q].completed, x.cmds,
		      res[q].mismatches);
		CHECK(ring_position_ok(qps[q], sent[q]), "read_verify, queue %u", q);
	}
	if (ok) {
		uint64_t bad = pattern_mismatches(a, 0, words);
		CHECK(bad == 0, "host check after read_verify: %llu of %llu words differ",
		      (unsigned long long)bad, (unsigned long long)words);
	}

	std::memset(g_buf, 0xA5, (size_t)pages * PAGE);
	ok = ok && g_ok &&
	     launch("gpunvme_sweep", gpunvme_sweep, x.queues, x.lanes,
		    qps.data(), a, res.data());
	for (uint32_t q = 0; ok && q < x.queues; q++) {
		sent[q] += (uint64_t)x.sweep_rounds * n;
		CHECK(res[q].status == OK &&
		      res[q].completed == x.sweep_rounds * n,
		      "sweep, queue %u: status %d, %u of %u completed", q,
		      res[q].status, res[q].completed, x.sweep_rounds * n);
		CHECK(ring_position_ok(qps[q], sent[q]), "sweep, queue %u", q);
		/* Lane i re-read command i's slice; the rest stayed poisoned. */
		uint64_t first = (uint64_t)q * x.cmds * words_per_cmd;
		uint64_t bad = pattern_mismatches(a, first, first + n * words_per_cmd);
		CHECK(bad == 0, "sweep, queue %u: %llu words of its slices differ",
		      q, (unsigned long long)bad);
		const uint8_t *rest = g_buf + (first + n * words_per_cmd) * 8;
		CHECK(rest[0] == 0xA5, "sweep, queue %u read past its slices", q);
	}
	CHECK(ok, "a launch did not complete");

	uint64_t total = 0;
	for (uint32_t q = 0; q < x.queues; q++) {
		total += sent[q];
		if (is_shared(flags) && !bridge_relayed(pairs[q], sent[q]))
			g_ok = false;
	}
	diag("examples: %u queue(s) x %u lanes, depth %u: %llu commands",
	     x.queues, x.lanes, x.depth, (unsigned long long)total);
	for (auto &p : pairs)
		pair_close(p);
}

/* One queue, 8 lanes on depth 4 (batches of 3, lanes 3..7 idle), 2-page
 * commands (PRP1 + PRP2): 20 writes + flush, 20 reads, 12 sweep rounds. */
static void t_examples_one_queue(uint32_t flags)
{
	run_examples(flags, example_cfg{1, 8, 4, 20, 2, 12}, 0x5eed0001);
}

/* Four queues (groups) of 4 lanes, depth 8, 16 one-page commands each. */
static void t_examples_four_queues(uint32_t flags)
{
	run_examples(flags, example_cfg{4, 4, 8, 16, 1, 6}, 0x5eed0004);
}

/*
 * read_verify.hip across the end of the namespace: in its first batch of 4
 * the last two commands get "LBA Out of Range". The kernel's first error
 * is that status; every lane leaves the loop together; the pair is not
 * poisoned (an NVMe status consumes its CQE) and write.hip then runs on it.
 */
static void t_example_nvme_error(uint32_t flags)
{
	const example_cfg x{1, 4, 8, 8, 1, 0};
	std::vector<pair> pairs;
	std::vector<qpair> qps;
	if (!examples_begin(flags, x, pairs, qps)) {
		for (auto &p : pairs)
			pair_close(p);
		return;
	}
	io_result res{};
	io_args a = example_args(x, g_info.ns[0].capacity_lbas - 2 * g_blocks_per_page, 7);
	bool ok = launch("gpunvme_read_verify", gpunvme_read_verify, 1, x.lanes,
			 qps.data(), a, &res);
	uint32_t st = res.status > 0 ? (uint32_t)res.status : 0;
	CHECK(ok && status_sct(st) == 0 && status_sc(st) == 0x80 &&
	      res.completed == 0,
	      "read_verify past the end: status 0x%x (want SC 0x80), %u completed",
	      (unsigned)res.status, res.completed);
	CHECK(ring_position_ok(qps[0], 4), "after the failed batch");

	a = example_args(x, lba_alloc(x.cmds), 8);
	ok = ok && launch("gpunvme_write", gpunvme_write, 1, x.lanes, qps.data(),
			  a, &res);
	CHECK(ok && res.status == OK && res.completed == x.cmds,
	      "write after the error: status %d, %u completed", res.status,
	      res.completed);
	CHECK(ring_position_ok(qps[0], 4 + x.cmds + 1), "after the write");
	for (auto &p : pairs)
		pair_close(p);
}

/* ---- PRP lists and the shared-mode checks ----------------------------------- */

/* One command through a one-lane group, as a kernel's lane would send it. */
static int32_t one_cmd(qpair &q, const sqe &e, cqe *out)
{
	int32_t agg = OK, rc = ERR_INVAL;
	bool ok = hostgroup::run_group(0, 1, [&](uint32_t lane) {
		rc = group_submit(q, lane, 1, e);
		if (rc == OK)
			rc = group_reap(q, lane, 1, out, &agg);
	}, LIMITS);
	return ok ? rc : ERR_IO;
}

/* The largest transfer of one command on a pair of `flags` (0: no limit). */
static uint32_t max_transfer(uint32_t flags)
{
	return is_shared(flags) ? g_info.shared_max_transfer : g_info.mdts_bytes;
}

/*
 * Where a PRP list for `entries` entries goes: a shared pair's PRP pool
 * (the module reads lists only there; PRP2 = prp_dma + offset), a raw
 * pair's anywhere the controller can read, here buffer page `raw_page`.
 * The list starts at an 8-byte aligned address and does not cross a page.
 */
static uint64_t *list_for(const pair &p, uint32_t flags, uint32_t entries,
			  uint32_t raw_page, uint64_t *list_dma)
{
	if (!is_shared(flags)) {
		*list_dma = g_dma[raw_page];
		return (uint64_t *)buf_page(raw_page);
	}
	uint64_t in_page = p.c.prp_dma % PAGE;
	uint64_t off = in_page + 8ull * entries <= PAGE ? 0 : PAGE - in_page;
	if (off + 8ull * entries > p.c.prp_size)
		return nullptr;
	*list_dma = p.c.prp_dma + off;
	return (uint64_t *)((uint8_t *)p.pool + off);
}

/*
 * A 4-page write and read-back with a PRP list (PRP2 -> 3 entries, the data
 * pages not contiguous in the list's order of the buffer: pages 57, 59, 58
 * after 56), built in the pool of a shared pair or in the buffer for a raw
 * one; every byte checked.
 */
static void t_prp_list(uint32_t flags)
{
	const uint32_t pages = 4, list_page = 63;
	const uint32_t order[pages] = {56, 57, 59, 58};
	if (max_transfer(flags) && pages * PAGE > max_transfer(flags)) {
		g_skip = "the controller's largest transfer is below 16 KiB";
		return;
	}
	pair p;
	int r = pair_open(p, 4, flags);
	if (r) {
		diag("CREATE_QPAIR/mmap: %s", strerror(-r));
		g_ok = false;
		pair_close(p);
		return;
	}
	uint64_t list_dma = 0;
	uint64_t *list = list_for(p, flags, pages - 1, list_page, &list_dma);
	CHECK(list, "PRP pool of %llu bytes has no room for 3 entries",
	      (unsigned long long)p.c.prp_size);
	qpair q = p.view;
	uint64_t lba = lba_alloc(pages);
	/* The k-th page of the transfer (LBAs lba + k * bpp ...) is buffer
	 * page order[k]: PRP1 names order[0], the list order[1..3]. */
	for (uint32_t i = 0; list && g_ok && i < 2; i++) {
		uint8_t opc = i == 0 ? NVME_OPC_WRITE : NVME_OPC_READ;
		for (uint32_t k = 0; k < pages; k++) {
			batch_spec bk{opc, 1, order[k],
				      lba + (uint64_t)k * g_blocks_per_page, 0x715u, 0};
			if (opc == NVME_OPC_WRITE)
				lane_fill(bk, 0);
			else
				std::memset(buf_page(order[k]), 0xA5, PAGE);
		}
		for (uint32_t k = 1; k < pages; k++)
			list[k - 1] = g_dma[order[k]];
		uint16_t nlb0 = (uint16_t)(pages * g_blocks_per_page - 1);
		sqe e = opc == NVME_OPC_WRITE
				? sqe_write((uint16_t)(1 + i), g_nsid, lba, nlb0, g_dma[order[0]], list_dma)
				: sqe_read((uint16_t)(1 + i), g_nsid, lba, nlb0, g_dma[order[0]], list_dma);
		cqe c{};
		int32_t rc = one_cmd(q, e, &c);
		CHECK(rc == OK && c.cid == 1 + i,
		      "%s of 4 pages through a PRP list at 0x%llx: result %d (status 0x%x), CID %u",
		      i == 0 ? "write" : "read", (unsigned long long)list_dma, rc,
		      rc > 0 ? (unsigned)rc : 0u, c.cid);
	}
	for (uint32_t k = 0; g_ok && k < pages; k++) {
		batch_spec bk{NVME_OPC_READ, 1, order[k],
			      lba + (uint64_t)k * g_blocks_per_page, 0x715u, 0};
		CHECK(verify_page(bk, 0, 0), "page %u of the PRP-list read", k);
	}
	CHECK(ring_position_ok(q, 2), "after the PRP-list write and read");
	if (is_shared(flags) && g_ok && !bridge_relayed(p, 2))
		g_ok = false;
	pair_close(p);
}

/*
 * Shared pairs only: SQEs the module must complete with an error itself,
 * never passing them to the controller (each chosen harmless should it
 * pass anyway: nothing here makes the controller write host memory), then
 * a good write and read-back on the same pair. The module's
 * sqes_rejected counter must count them.
 */
static void t_shared_rejects(uint32_t flags)
{
	if (!is_shared(flags)) {
		g_skip = "raw pairs are not checked: an owner's SQEs reach the controller as written";
		return;
	}
	pair p;
	int r = pair_open(p, 8, flags);
	if (r) {
		diag("CREATE_QPAIR/mmap: %s", strerror(-r));
		g_ok = false;
		pair_close(p);
		return;
	}
	qpair q = p.view;
	const uint64_t lba = lba_alloc(4);
	const uint16_t nlb0 = (uint16_t)(g_blocks_per_page - 1);
	/* A list for 3 pages in this file's buffer: not the pool. */
	uint64_t *wrong_list = (uint64_t *)buf_page(60);
	for (uint32_t k = 0; k < 3; k++)
		wrong_list[k] = g_dma[61 + k % 2];

	struct bad {
		const char *what;
		sqe e;
		uint32_t sc;
	} cases[] = {
		{"Compare (opcode 0x05)", sqe_rw(0x05, 1, g_nsid, lba, nlb0, g_dma[61], 0), 0x01},
		{"Write from the PRP pool (not a buffer of this file)",
		 sqe_write(2, g_nsid, lba, nlb0, p.c.prp_dma, 0), 0x02},
		{"Write with its PRP list outside the pool",
		 sqe_write(3, g_nsid, lba, (uint16_t)(4 * g_blocks_per_page - 1),
			   g_dma[61], g_dma[60]), 0x02},
		{"Write with a metadata pointer",
		 sqe_write(4, g_nsid, lba, nlb0, g_dma[61], 0), 0x02},
		{"Read of an inactive namespace",
		 sqe_read(5, 0xfffffff0u, lba, nlb0, g_dma[61], 0), 0x0b},
		{"Read past the namespace's last LBA",
		 sqe_read(6, g_nsid, g_info.ns[0].capacity_lbas, 0, g_dma[61], 0), 0x80},
	};
	cases[3].e.mptr = g_dma[62];
	uint32_t sent = 0;
	for (const bad &b : cases) {
		cqe c{};
		int32_t rc = one_cmd(q, b.e, &c);
		sent++;
		uint32_t st = rc > 0 ? (uint32_t)rc : 0;
		CHECK(rc > 0 && status_sct(st) == 0 && status_sc(st) == b.sc &&
		      status_dnr(st) && c.cid == b.e.cid,
		      "%s: result %d (SCT %u SC 0x%02x DNR %u, CID %u); want SC 0x%02x with DNR",
		      b.what, rc, status_sct(st), status_sc(st),
		      (unsigned)status_dnr(st), c.cid, b.sc);
		if (rc < 0)
			break; /* the pair is poisoned: nothing more to learn */
	}
	/* The pair still works. */
	for (uint32_t i = 0; g_ok && i < 2; i++) {
		batch_spec b{i == 0 ? NVME_OPC_WRITE : NVME_OPC_READ, 1, 61, lba,
			     0x7e1u, (uint16_t)(16 + i)};
		if (i == 0)
			lane_fill(b, 0);
		else
			std::memset(buf_page(61), 0xA5, PAGE);
		cqe c{};
		int32_t rc = one_cmd(q, lane_sqe(b, 0), &c);
		sent++;
		CHECK(rc == OK, "%s after the rejections: %d", i ? "read" : "write", rc);
		if (i == 1 && rc == OK)
			CHECK(verify_page(b, 0, 0), "read-back after the rejections");
	}
	CHECK(ring_position_ok(q, sent), "after %u commands", sent);
	long long rejected = bridge_counter(p.c.qid, "sqes_rejected");
	long long accepted = bridge_counter(p.c.qid, "sqes_accepted");
	diag("q%u: sqes_rejected %lld sqes_accepted %lld", p.c.qid, rejected, accepted);
	CHECK(rejected < 0 || rejected == (long long)(sizeof(cases) / sizeof(cases[0])),
	      "sqes_rejected %lld, want %zu", rejected, sizeof(cases) / sizeof(cases[0]));
	CHECK(accepted < 0 || accepted == 2, "sqes_accepted %lld, want 2", accepted);
	pair_close(p);
}

/* ---- the per-thread API (pqueue.h) ------------------------------------------ */

/*
 * A pair driven by the per-thread API: the pair as the GPU maps it, the
 * shared bookkeeping (pq_bytes) in memory every "lane" (host thread) sees,
 * and the PRP pool: a shared pair's own (mmapped from the module), a raw
 * pair's a window of g_pool, a buffer this file mapped.
 */
struct ptq {
	pair p;
	void *mem = nullptr;
	pqueue q{};
};

static bool pt_open(ptq &t, uint32_t depth, uint32_t flags, uint32_t idx)
{
	int r = pair_open(t.p, depth, flags);
	if (r) {
		diag("CREATE_QPAIR/mmap (depth %u): %s", depth, strerror(-r));
		return false;
	}
	size_t bytes = (pq_bytes(depth) + 63) / 64 * 64;
	t.mem = std::aligned_alloc(64, bytes);
	if (!t.mem)
		return false;
	pq_init(t.mem, depth, 0, 0, 1);
	pqueue &q = t.q;
	q = pqueue{};
	q.sq = t.p.view.sq;
	q.cq = t.p.view.cq;
	q.sq_db = t.p.view.sq_db;
	q.cq_db = t.p.view.cq_db;
	q.stop = &t.p.stop;
	q.timeout_ticks = WAIT_TICKS;
	q.tick_hz = TICK_HZ;
	q.depth = depth;
	q.backoff = 1;
	pq_attach(q, t.mem);
	if (is_shared(flags)) {
		q.prp_va = (uint64_t *)t.p.pool;
		q.prp_dma = t.p.c.prp_dma;
		q.prp_stride = pq_prp_stride(t.p.c.prp_size, depth);
		q.max_transfer = g_info.shared_max_transfer;
	} else {
		q.prp_va = (uint64_t *)(g_pool + (size_t)idx * POOL_WIN * PAGE);
		q.prp_page_dma = g_pool_dma + (size_t)idx * POOL_WIN;
		q.prp_stride = pq_prp_stride((uint64_t)POOL_WIN * PAGE, depth);
		q.max_transfer = g_info.mdts_bytes;
	}
	return true;
}

static void pt_close(ptq &t)
{
	pair_close(t.p);
	std::free(t.mem);
	t.mem = nullptr;
}

/* After `total` commands: everything claimed was rung, reaped, and the
 * SQ head the CQEs reported caught up; nothing poisoned. */
static bool pt_settled(const ptq &t, uint64_t total)
{
	const pq_shared *s = t.q.st;
	bool ok = s->error == OK && s->cid_ticket == total && s->sq_base == 0 &&
		  (s->db_word >> 1) == total && s->sq_head == total && s->cqes == total &&
		  s->cq_head == total % t.q.depth &&
		  s->phase == (1u ^ (uint32_t)((total / t.q.depth) & 1)) &&
		  (s->db_word & 1) == 0 && s->cq_lock == 0;
	diag("q%u: %llu commands, %llu SQ doorbells, %llu CQ doorbells, sq_head %llu, error %d",
	     t.p.c.qid, (unsigned long long)total,
	     (unsigned long long)s->sq_doorbells,
	     (unsigned long long)s->cq_doorbells,
	     (unsigned long long)s->sq_head, s->error);
	if (!ok)
		diag("q%u: ring not settled: tickets %llu sq_base %llu rung %llu cqes %llu cq_head %u phase %u",
		     t.p.c.qid, (unsigned long long)s->cid_ticket,
		     (unsigned long long)s->sq_base, (unsigned long long)(s->db_word >> 1),
		     (unsigned long long)s->cqes, s->cq_head, s->phase);
	return ok;
}

/* `groups` workgroups of `lanes` threads, all running at once. */
template <typename F>
static bool run_groups(uint32_t groups, uint32_t lanes, F fn)
{
	std::vector<std::thread> g;
	std::atomic<bool> ok{true};
	for (uint32_t i = 0; i < groups; i++)
		g.emplace_back([&, i] {
			if (!hostgroup::run_group(i, lanes, [&](uint32_t) { fn(); }, LIMITS))
				ok = false;
		});
	for (auto &x : g)
		x.join();
	return ok;
}

/*
 * groups x lanes threads (64+) on npairs pairs of `depth`: every thread
 * writes cmds commands of one LBA-size unit (the pthread_io example,
 * pattern filled by the thread itself), then, after the buffer is
 * poisoned, reads them back and checks every word; pair = thread index %
 * npairs (so every pair is shared by threads of several groups), then the
 * same with pair = the "CU" (group) id.
 */
static void pt_run(uint32_t flags, uint32_t npairs, uint32_t depth,
		   uint32_t groups, uint32_t lanes, uint32_t max_cmds)
{
	if (npairs > g_info.io_queues || depth > g_info.max_queue_entries) {
		g_skip = "needs " + std::to_string(npairs) + " queue pairs of depth " +
			 std::to_string(depth);
		return;
	}
	const uint32_t threads = groups * lanes;
	uint32_t bytes = g_lba_size < 512 ? 512 : g_lba_size;
	bytes = bytes / g_lba_size * g_lba_size;
	uint32_t cmds = BUF_PAGES * PAGE / (threads * bytes);
	cmds = cmds > max_cmds ? max_cmds : cmds;
	if (!cmds) {
		g_skip = "buffer too small";
		return;
	}
	std::vector<ptq> qs(npairs);
	bool opened = true;
	for (uint32_t i = 0; i < npairs && opened; i++)
		opened = pt_open(qs[i], depth, flags, i);
	uint64_t total = 0;
	for (uint32_t by_unit = 0; opened && g_ok && by_unit < 2; by_unit++) {
		std::vector<pqueue> views;
		for (auto &t : qs)
			views.push_back(t.q);
		const uint64_t lba = lba_alloc(threads * cmds * bytes / PAGE + 1);
		for (uint32_t pass = 0; g_ok && pass < 2; pass++) {
			pt_args a{};
			a.page_dma = g_dma;
			a.buf = g_buf;
			a.npages = BUF_PAGES;
			a.slba = lba;
			a.seed = 0x5eed0000u + by_unit * 16 + npairs;
			a.nsid = g_nsid;
			a.lba_shift = (uint32_t)__builtin_ctz(g_lba_size);
			a.bytes_per_cmd = bytes;
			a.cmds_per_thread = cmds;
			a.npairs = npairs;
			a.opc = pass == 0 ? NVME_OPC_WRITE : NVME_OPC_READ;
			a.by_unit = by_unit;
			if (pass == 1)
				std::memset(g_buf, 0xA5, (size_t)BUF_PAGES * PAGE);
			gx::io_result res{};
			bool ran = run_groups(groups, lanes, [&] {
				gpunvme_pthread_io(views.data(), &a, &res);
			});
			CHECK(ran && res.status == OK && res.completed == threads * cmds &&
			      res.mismatches == 0,
			      "%s pass, pair by %s: status %d, %u of %u completed, %u words wrong",
			      pass ? "read" : "write", by_unit ? "unit id" : "thread index",
			      res.status, res.completed, threads * cmds, res.mismatches);
			total += (uint64_t)threads * cmds;
		}
	}
	if (opened && g_ok) {
		uint64_t sum = 0, dbs = 0;
		for (uint32_t i = 0; i < npairs; i++) {
			const pq_shared *s = qs[i].q.st;
			sum += s->cqes;
			dbs += s->sq_doorbells;
			CHECK(pt_settled(qs[i], s->cid_ticket), "pair %u", i);
			if (is_shared(flags) && !bridge_relayed(qs[i].p, s->cqes))
				g_ok = false;
		}
		CHECK(sum == total, "%llu commands reaped, %llu submitted",
		      (unsigned long long)sum, (unsigned long long)total);
		diag("%u threads (%u groups x %u) on %u pair(s) of depth %u: %llu commands, %llu SQ doorbell writes",
		     threads, groups, lanes, npairs, depth,
		     (unsigned long long)total, (unsigned long long)dbs);
	}
	if (!opened)
		g_ok = false;
	for (auto &t : qs)
		pt_close(t);
}

static void t_pt_1pair(uint32_t flags) { pt_run(flags, 1, 32, 4, 16, 4); }
static void t_pt_2pairs(uint32_t flags) { pt_run(flags, 2, 32, 4, 16, 4); }
static void t_pt_4pairs(uint32_t flags) { pt_run(flags, 4, 16, 8, 8, 4); }

/* Depth 8 (7 command slots) shared by 4 groups of 4 threads: threads wait
 * for slots, the ring wraps over a hundred times. A claim waits for about
 * threads / (depth-1) command lifetimes, each needing a given thread to
 * run: with host threads as lanes on the 2-CPU TCG guest of a loaded host,
 * 16 or 32 threads on depth 4 passed the 2 s wait cap. */
static void t_pt_wrap_shared(uint32_t flags) { pt_run(flags, 1, 8, 4, 4, 16); }

/*
 * Transfers of 4 KiB up to the largest one command may carry (MDTS; a
 * shared pair's shared_max_transfer), through PRP1, PRP2 and PRP lists the
 * threads build in the pool, and beyond it split by pq_io(), some at
 * buffer offsets that are not page aligned; all at once from one thread
 * each on one pair; written, read back into a poisoned buffer, every byte
 * compared by the host.
 */
static void t_pt_prp_sizes(uint32_t flags)
{
	const uint32_t depth = 32;
	ptq t;
	if (!pt_open(t, depth, flags, 0)) {
		g_ok = false;
		pt_close(t);
		return;
	}
	uint64_t maxt = t.q.max_transfer ? t.q.max_transfer : (2u << 20);
	uint64_t by_list = (uint64_t)(t.q.prp_stride / 8) * PAGE;
	uint64_t one = maxt < by_list ? maxt : by_list; /* largest single command */
	struct xfer {
		uint64_t off, len;
	};
	std::vector<xfer> x;
	uint64_t at = 0;
	auto add = [&](uint64_t len, uint64_t skew) {
		at = (at + PAGE - 1) / PAGE * PAGE + skew;
		x.push_back({at, len});
		at += len;
	};
	add(PAGE, 0);
	add(2 * PAGE, 0);
	add(3 * PAGE, 0);             /* first list */
	add(4 * PAGE, g_lba_size);    /* unaligned: 5 pages touched */
	add(32 * PAGE, 0);            /* 128 KiB */
	add(one - PAGE, 0);
	add(one, 0);                  /* the largest single command */
	add(one, g_lba_size < PAGE ? g_lba_size : 0); /* unaligned at MDTS */
	add(one + PAGE, 0);           /* split in two */
	add(3 * one + 2 * g_lba_size, 0); /* split in four */
	const uint64_t bytes = (at + PAGE - 1) / PAGE * PAGE;
	diag("largest command %llu bytes (MDTS %u, shared max %u, list room %llu); %zu transfers, %llu bytes",
	     (unsigned long long)one, g_info.mdts_bytes, g_info.shared_max_transfer,
	     (unsigned long long)by_list, x.size(), (unsigned long long)bytes);
	if (bytes > GPUNVME_MAX_MAP_BYTES) {
		g_skip = "transfers exceed one mapping";
		pt_close(t);
		return;
	}
	/* hostrun's LBAs are the namespace's upper half (lba_alloc). */
	const uint64_t room = (g_lba_end - g_lba_end / 2) * g_lba_size;
	if (bytes + PAGE > room) {
		g_skip = "the transfers (" + std::to_string(bytes >> 10) + " KiB at a largest command of " +
			 std::to_string(one >> 10) + " KiB) exceed the namespace's upper half (" +
			 std::to_string(room >> 10) + " KiB)";
		pt_close(t);
		return;
	}
	uint8_t *buf = (uint8_t *)mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	std::vector<uint64_t> dma(bytes / PAGE);
	gpunvme_map_host m;
	UAPI_INIT(m);
	m.addr = (uintptr_t)buf;
	m.len = bytes;
	m.dma_addrs = (uintptr_t)dma.data();
	bool mapped = buf != MAP_FAILED && dev_ioctl(GPUNVME_IOC_MAP_HOST, &m) == 0;
	CHECK(mapped, "MAP_HOST of %llu bytes: %s", (unsigned long long)bytes, strerror(errno));
	const uint64_t lba = lba_alloc((uint32_t)(bytes / PAGE) + 1);
	const uint32_t shift = (uint32_t)__builtin_ctz(g_lba_size);
	auto byte_at = [&](uint64_t off) { /* the disk's byte at buffer offset off */
		return pattern_byte(0x9a9e, lba + off / g_lba_size, (uint32_t)(off % g_lba_size));
	};
	uint64_t cmds = 0;
	for (uint32_t pass = 0; mapped && g_ok && pass < 2; pass++) {
		for (uint64_t i = 0; i < bytes; i++)
			buf[i] = pass == 0 ? byte_at(i) : 0xA5;
		std::vector<int32_t> rc(x.size(), ERR_INVAL);
		std::vector<std::thread> th;
		const pqueue q = t.q;
		for (size_t k = 0; k < x.size(); k++)
			th.emplace_back([&, k] {
				rc[k] = pq_io(q, pass == 0 ? NVME_OPC_WRITE : NVME_OPC_READ,
					      g_nsid, lba + x[k].off / g_lba_size, shift,
					      dma.data(), dma.size(), x[k].off, x[k].len, 4);
			});
		for (auto &h : th)
			h.join();
		for (size_t k = 0; k < x.size(); k++) {
			CHECK(rc[k] == OK, "%s of %llu bytes at buffer offset %llu: %d",
			      pass ? "read" : "write", (unsigned long long)x[k].len,
			      (unsigned long long)x[k].off, rc[k]);
			cmds += (x[k].len + one - 1) / one;
		}
	}
	if (mapped && g_ok) {
		uint64_t bad = 0, first = 0;
		for (const xfer &k : x)
			for (uint64_t i = k.off; i < k.off + k.len; i++)
				if (buf[i] != byte_at(i) && !bad++)
					first = i;
		CHECK(bad == 0, "%llu bytes differ after the read-back, first at offset %llu",
		      (unsigned long long)bad, (unsigned long long)first);
		CHECK(pt_settled(t, cmds), "after %llu commands", (unsigned long long)cmds);
		if (is_shared(flags) && !bridge_relayed(t.p, cmds))
			g_ok = false;
	}
	pt_close(t);
	if (mapped) {
		gpunvme_unmap u;
		UAPI_INIT(u);
		u.handle = m.handle;
		CHECK(dev_ioctl(GPUNVME_IOC_UNMAP, &u) == 0, "UNMAP: %s", strerror(errno));
	}
	if (buf != MAP_FAILED)
		munmap(buf, bytes);
}

/*
 * Doorbells are coalesced, deterministically: with the ring lock held by
 * the test, 8 threads submit and return without ringing (no completion
 * arrives in 100 ms); one pq_ring() then writes the doorbell once for all
 * 8, and every one completes. Then the stop flag: a command submitted
 * under the held lock never reaches the controller, its wait ends with
 * ERR_STOPPED and poisons the pair, and a later submit gets ERR_IO.
 */
static void t_pt_coalesce_stop(uint32_t flags)
{
	ptq t;
	if (!pt_open(t, 16, flags, 0)) {
		g_ok = false;
		pt_close(t);
		return;
	}
	const pqueue q = t.q;
	const uint64_t lba = lba_alloc(1);
	const uint16_t nlb0 = 0;
	std::vector<pq_ticket> tk(8);
	std::vector<int32_t> rc(8, ERR_INVAL);
	q.st->db_word |= 1; /* hold the ring lock */
	{
		std::vector<std::thread> th;
		for (uint32_t i = 0; i < 8; i++)
			th.emplace_back([&, i] {
				rc[i] = pq_submit_io(q, NVME_OPC_READ, g_nsid, lba + i % 8, nlb0,
						     g_dma, BUF_PAGES, (uint64_t)(48 + i) * PAGE,
						     g_lba_size, &tk[i]);
			});
		for (auto &h : th)
			h.join();
	}
	for (uint32_t i = 0; i < 8; i++)
		CHECK(rc[i] == OK, "submit %u under the held lock: %d", i, rc[i]);
	usleep(100000);
	cqe c{};
	CHECK(q.st->sq_doorbells == 0 && pq_test(q, tk[0], &c) == ERR_AGAIN,
	      "with the ring lock held: %llu doorbells, a completion arrived",
	      (unsigned long long)q.st->sq_doorbells);
	q.st->db_word &= ~1ull;
	pq_ring(q);
	CHECK(q.st->sq_doorbells == 1, "one ring for 8 submitters: %llu doorbell writes",
	      (unsigned long long)q.st->sq_doorbells);
	for (uint32_t i = 0; i < 8 && g_ok; i++) {
		int32_t r = pq_wait(q, tk[i], &c);
		CHECK(r == OK && c.cid == tk[i].slot, "wait %u: %d, CID %u (slot %u)", i, r,
		      c.cid, tk[i].slot);
	}
	CHECK(pt_settled(t, 8), "after the coalesced 8");
	/* Stop: the command is never rung. */
	pq_ticket st;
	q.st->db_word |= 1;
	int32_t r = pq_submit_io(q, NVME_OPC_READ, g_nsid, lba, nlb0, g_dma, BUF_PAGES,
				 48ull * PAGE, g_lba_size, &st);
	CHECK(r == OK, "submit before the stop: %d", r);
	t.p.stop = 1;
	auto t0 = std::chrono::steady_clock::now();
	r = pq_wait(q, st, &c);
	long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(
			       std::chrono::steady_clock::now() - t0).count();
	CHECK(r == ERR_STOPPED && ms < 1000, "wait with the stop flag up: %d after %lld ms", r, ms);
	pq_ticket t2;
	r = pq_submit_io(q, NVME_OPC_READ, g_nsid, lba, nlb0, g_dma, BUF_PAGES, 48ull * PAGE,
			 g_lba_size, &t2);
	CHECK(r == ERR_IO, "submit on the poisoned pair: %d", r);
	pt_close(t);
}

/*
 * A claim that comes round to the claimer's own live ticket: depth 4 (3
 * slots); ticket 0 (slot 0) stays live while tickets 1 and 2 come and go;
 * ticket 3 needs slot 0 again. Given its held ticket (pq_held, as pq_io()
 * passes them) the claim takes ticket 0's completion itself and goes on.
 */
static void t_pt_own_ticket(uint32_t flags)
{
	ptq t;
	if (!pt_open(t, 4, flags, 0)) {
		g_ok = false;
		pt_close(t);
		return;
	}
	const pqueue q = t.q;
	const uint64_t lba = lba_alloc(1);
	auto rd = [&](uint32_t page, pq_ticket *tk, const pq_held *h) {
		return pq_submit_io(q, NVME_OPC_READ, g_nsid, lba, 0, g_dma, BUF_PAGES,
				    (uint64_t)page * PAGE, g_lba_size, tk, h);
	};
	pq_ticket a, b, c, d;
	cqe e{};
	CHECK(rd(40, &a, nullptr) == OK && a.slot == 0, "ticket 0: slot %u", a.slot);
	CHECK(rd(41, &b, nullptr) == OK && pq_wait(q, b, &e) == OK, "ticket 1");
	CHECK(rd(42, &c, nullptr) == OK && pq_wait(q, c, &e) == OK, "ticket 2");
	int32_t arc = ERR_AGAIN;
	pq_held h = {&a, &arc, 1};
	auto t0 = std::chrono::steady_clock::now();
	int32_t r = rd(43, &d, &h);
	long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(
			       std::chrono::steady_clock::now() - t0).count();
	CHECK(r == OK && d.slot == 0 && arc == OK && ms < 1000,
	      "ticket 3 on its own slot 0: %d (slot %u), ticket 0 taken by the claim: %d, %lld ms",
	      r, d.slot, arc, ms);
	if (r == OK)
		CHECK(pq_wait(q, d, &e) == OK && e.cid == 0, "ticket 3's completion, CID %u", e.cid);
	CHECK(pt_settled(t, 4), "after 4 commands");
	pt_close(t);
}

/*
 * Two controllers at once: this process runs the per-thread API (8 groups
 * of 8 threads on 4 pairs, write then read and check) on its controller
 * while a child process, started from this binary with GPUNVME_BDF set to
 * GPUNVME_BDF2, runs pthread_64_threads_4_pairs on the second. A pipe
 * handshake starts both together; each reports its CLOCK_MONOTONIC window
 * and the windows must overlap. Without GPUNVME_BDF2 (one controller for
 * gpunvme in this boot) it is skipped: tests/vm/suite.sh runs it in the
 * nine-controller boot.
 */
static long long mono_us()
{
	timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static void t_pt_two_controllers(uint32_t flags)
{
	const char *bdf2 = getenv("GPUNVME_BDF2");
	if (!bdf2 || !*bdf2) {
		g_skip = "no GPUNVME_BDF2: this boot binds one controller to gpunvme";
		return;
	}
	int ready[2], go[2], out[2];
	if (pipe(ready) || pipe(go) || pipe(out)) {
		CHECK(false, "pipe: %s", strerror(errno));
		return;
	}
	pid_t pid = fork();
	if (pid == 0) {
		dup2(out[1], 1);
		dup2(ready[1], 3);
		dup2(go[0], 4);
		setenv("GPUNVME_BDF", bdf2, 1);
		unsetenv("GPUNVME_BDF2");
		setenv("GPUNVME_HOSTRUN_ONLY", "pthread_64_threads_4_pairs", 1);
		setenv("GPUNVME_HOSTRUN_MODES", (flags & GPUNVME_QPAIR_RAW) ? "raw" : "shared", 1);
		setenv("GPUNVME_HOSTRUN_SYNC", "3,4", 1);
		execl("/proc/self/exe", "gpunvme_hostrun", (char *)nullptr);
		_exit(127);
	}
	close(ready[1]);
	close(go[0]);
	close(out[1]);
	if (pid < 0) {
		CHECK(false, "fork: %s", strerror(errno));
		return;
	}
	/* Wait (bounded) until the child has set up its controller. */
	pollfd p = {ready[0], POLLIN, 0};
	char c = 0;
	bool child_ready = poll(&p, 1, 60000) == 1 && read(ready[0], &c, 1) == 1;
	CHECK(child_ready, "the child on %s did not get ready within 60 s", bdf2);
	long long t0 = mono_us();
	if (child_ready && write(go[1], "g", 1) != 1)
		child_ready = false;
	close(go[1]);
	close(ready[0]);
	if (child_ready)
		t_pt_4pairs(flags);
	long long t1 = mono_us();
	/* The child's KTAP, then its exit (bounded: killed after 120 s). */
	std::string text;
	for (long long until = mono_us() + 120000000; mono_us() < until;) {
		pollfd q = {out[0], POLLIN, 0};
		if (poll(&q, 1, 1000) != 1)
			continue;
		char buf[4096];
		ssize_t n = read(out[0], buf, sizeof(buf));
		if (n <= 0)
			break;
		text.append(buf, (size_t)n);
	}
	close(out[0]);
	int status = 0;
	pid_t done = 0;
	for (int i = 0; i < 100 && (done = waitpid(pid, &status, WNOHANG)) == 0; i++)
		usleep(100000);
	if (done == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	long long c0 = 0, c1 = 0;
	size_t at = 0;
	while (at < text.size()) {
		size_t nl = text.find('\n', at);
		std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
		at = nl == std::string::npos ? text.size() : nl + 1;
		diag("%s: %s", bdf2, line.c_str());
		std::sscanf(line.c_str(), "# window %lld %lld", &c0, &c1);
	}
	CHECK(done == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
		      text.find("1 passed, 0 failed") != std::string::npos,
	      "the child on %s: exit status %#x, its summary missing or failed", bdf2, status);
	CHECK(c0 && c1 && c0 < t1 && t0 < c1,
	      "the two controllers' runs overlap: here %lld..%lld us, %s %lld..%lld us", t0, t1, bdf2, c0, c1);
}

/*
 * The programming guide's kernel (examples/guide_read.hip, shown verbatim
 * in kernels/README.md): 2 groups of 8 threads on 2 pairs, each thread one
 * read of up to 16 KiB (a PRP list in the pair's pool when the transfer
 * spans more than two pages). The blocks are written first with the
 * example pattern by pthread_io.hip (same thread-to-block map), the buffer
 * is poisoned, then the guide kernel reads and checks every word; the host
 * checks every word again.
 */
static void t_guide_read(uint32_t flags)
{
	const uint32_t npairs = 2, depth = 16, groups = 2, lanes = 8;
	const uint32_t threads = groups * lanes;
	if (npairs > g_info.io_queues || depth > g_info.max_queue_entries) {
		g_skip = "needs 2 queue pairs of depth 16";
		return;
	}
	uint64_t bytes = 4 * PAGE;
	if (max_transfer(flags) && bytes > max_transfer(flags))
		bytes = max_transfer(flags);
	bytes = bytes / g_lba_size * g_lba_size;
	if (threads * bytes > (uint64_t)BUF_PAGES * PAGE || bytes == 0) {
		g_skip = "buffer too small";
		return;
	}
	std::vector<ptq> qs(npairs);
	bool opened = true;
	for (uint32_t i = 0; i < npairs && opened; i++)
		opened = pt_open(qs[i], depth, flags, i);
	std::vector<pqueue> views;
	for (auto &t : qs)
		views.push_back(t.q);
	const uint64_t slba = lba_alloc((uint32_t)(threads * bytes / PAGE) + 1);
	const uint32_t lba_shift = (uint32_t)__builtin_ctz(g_lba_size);
	const uint64_t seed = 0x601de000u + flags;

	if (opened) {
		pt_args w{};
		w.page_dma = g_dma;
		w.buf = g_buf;
		w.npages = BUF_PAGES;
		w.slba = slba;
		w.seed = seed;
		w.nsid = g_nsid;
		w.lba_shift = lba_shift;
		w.bytes_per_cmd = (uint32_t)bytes;
		w.cmds_per_thread = 1;
		w.npairs = npairs;
		w.opc = NVME_OPC_WRITE;
		gx::io_result res{};
		bool ran = run_groups(groups, lanes, [&] {
			gpunvme_pthread_io(views.data(), &w, &res);
		});
		CHECK(ran && res.status == OK && res.completed == threads,
		      "pattern write: status %d, %u of %u completed", res.status,
		      res.completed, threads);
	}
	if (opened && g_ok) {
		std::memset(g_buf, 0xA5, (size_t)BUF_PAGES * PAGE);
		guide_args a{};
		a.page_dma = g_dma;
		a.buf = g_buf;
		a.npages = BUF_PAGES;
		a.slba = slba;
		a.seed = seed;
		a.nsid = g_nsid;
		a.lba_shift = lba_shift;
		a.blocks = (uint32_t)(bytes >> lba_shift);
		a.npairs = npairs;
		gx::io_result res{};
		bool ran = run_groups(groups, lanes, [&] {
			gpunvme_guide_read(views.data(), &a, &res);
		});
		CHECK(ran && res.status == OK && res.completed == threads && res.mismatches == 0,
		      "guide_read: status %d, %u of %u completed, %u words wrong",
		      res.status, res.completed, threads, res.mismatches);
		uint64_t wrong = 0;
		const uint64_t *words = (const uint64_t *)g_buf;
		for (uint64_t j = 0; j < threads * bytes / 8; j++)
			wrong += words[j] != gx::pattern(seed, (slba << lba_shift) + 8 * j);
		CHECK(wrong == 0, "host: %llu of %llu words differ from the pattern",
		      (unsigned long long)wrong, (unsigned long long)(threads * bytes / 8));
		diag("guide_read: %u threads on %u pairs, %llu bytes each (%s)", threads,
		     npairs, (unsigned long long)bytes,
		     bytes > 2 * PAGE ? "PRP list in the pool" : "PRP1/PRP2");
		for (uint32_t i = 0; i < npairs; i++) {
			CHECK(pt_settled(qs[i], qs[i].q.st->cid_ticket), "pair %u", i);
			if (is_shared(flags) && !bridge_relayed(qs[i].p, qs[i].q.st->cqes))
				g_ok = false;
		}
	}
	if (!opened)
		g_ok = false;
	for (auto &t : qs)
		pt_close(t);
}

/* ---- the array (array.h) over several controllers ------------------------- */

/*
 * The array tests run the guide's array kernels (examples/guide_array.hip)
 * with host threads as lanes over controllers of their own,
 * GPUNVME_ARRAY_BDFS (comma-separated; a test needing more is skipped),
 * each with the CLI's pattern of seed GPUNVME_ARRAY_SEED at LBAs
 * GPUNVME_ARRAY_LBA .. + GPUNVME_ARRAY_BLOCKS of namespace 1 (`gpunvme
 * write BDF --pattern SEED --start-block LBA --block-count BLOCKS`;
 * tests/selftests/gpunvme_array_hostrun.sh writes it, runs this and reads
 * the write-back test's blocks back through the kernel's nvme driver). The
 * write-back test writes the pattern of GPUNVME_ARRAY_WB_SEED at
 * GPUNVME_ARRAY_WB_LBA .. + GPUNVME_ARRAY_WB_BLOCKS of the first two
 * controllers on shared pairs, of seed + 1 at the next WB_BLOCKS on raw
 * ones. Every controller's frames are the same host memory mapped for each
 * (MAP_HOST, one DMA address table per controller), as gpunvme-gpu maps
 * one GPU allocation into every controller.
 */
struct array_env {
	std::vector<std::string> bdfs;
	uint64_t seed = 0, lba = 0, blocks = 0, wb_seed = 0, wb_lba = 0, wb_blocks = 0;
};
static array_env g_aenv;

static uint64_t env_u64(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? std::strtoull(v, nullptr, 0) : 0;
}

static void array_env_read()
{
	g_aenv = array_env{};
	if (const char *b = getenv("GPUNVME_ARRAY_BDFS")) {
		std::string all = b;
		for (size_t at = 0; at < all.size();) {
			size_t comma = all.find(',', at);
			std::string one = all.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
			if (!one.empty())
				g_aenv.bdfs.push_back(one);
			at = comma == std::string::npos ? all.size() : comma + 1;
		}
	}
	g_aenv.seed = env_u64("GPUNVME_ARRAY_SEED");
	g_aenv.lba = env_u64("GPUNVME_ARRAY_LBA");
	g_aenv.blocks = env_u64("GPUNVME_ARRAY_BLOCKS");
	g_aenv.wb_seed = env_u64("GPUNVME_ARRAY_WB_SEED");
	g_aenv.wb_lba = env_u64("GPUNVME_ARRAY_WB_LBA");
	g_aenv.wb_blocks = env_u64("GPUNVME_ARRAY_WB_BLOCKS");
}

/* One controller of the array tests: its file (owner mode claimed for raw
 * pairs), kept open for the rest of the mode; owner mode's PRP pools. */
struct actl {
	std::string bdf;
	int fd = -1;
	uint32_t flags = 0;
	gpunvme_info info{};
	uint8_t *pool = nullptr;
	std::vector<uint64_t> pool_dma;
	uint32_t pool_handle = 0;
};
static std::vector<actl> g_actl;

static void array_close_all()
{
	for (actl &c : g_actl) {
		if (c.pool_handle) {
			gpunvme_unmap u;
			UAPI_INIT(u);
			u.handle = c.pool_handle;
			if (ioctl(c.fd, GPUNVME_IOC_UNMAP, &u))
				diag("%s: UNMAP (pool): %s", c.bdf.c_str(), strerror(errno));
		}
		if (c.pool)
			munmap(c.pool, POOL_PAGES * PAGE);
		if (c.fd >= 0)
			close(c.fd);
	}
	g_actl.clear();
}

/* The first n array controllers, open for `flags` (raw: owner claimed).
 * False with g_skip set when the boot has fewer or owner mode is refused
 * (EPERM), false with g_ok cleared on a failure. */
static bool array_ctls(uint32_t n, uint32_t flags)
{
	if (g_aenv.bdfs.size() < n || !g_aenv.blocks) {
		g_skip = "needs " + std::to_string(n) + " controllers in GPUNVME_ARRAY_BDFS (" +
			 std::to_string(g_aenv.bdfs.size()) + " given) and GPUNVME_ARRAY_BLOCKS";
		return false;
	}
	for (uint32_t k = g_actl.size(); k < n; k++) {
		actl c;
		c.bdf = g_aenv.bdfs[k];
		c.flags = flags;
		std::string why;
		c.fd = open_node(c.bdf.c_str(), &c.info, why);
		if (c.fd < 0) {
			diag("%s", why.c_str());
			g_ok = false;
			return false;
		}
		if (c.info.num_namespaces < 1 || c.info.page_size != PAGE || c.info.ns[0].nsid != 1) {
			diag("%s: needs namespace 1 and 4 KiB pages", c.bdf.c_str());
			close(c.fd);
			g_ok = false;
			return false;
		}
		if (flags & GPUNVME_QPAIR_RAW) {
			gpunvme_owner o;
			UAPI_INIT(o);
			if (ioctl(c.fd, GPUNVME_IOC_CLAIM_OWNER, &o)) {
				const int e = errno;
				close(c.fd);
				if (e == EPERM) {
					g_skip = c.bdf + ": CLAIM_OWNER: " + strerror(e);
					return false;
				}
				diag("%s: CLAIM_OWNER: %s", c.bdf.c_str(), strerror(e));
				g_ok = false;
				return false;
			}
			c.pool = (uint8_t *)mmap(nullptr, POOL_PAGES * PAGE, PROT_READ | PROT_WRITE,
						 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			c.pool_dma.assign(POOL_PAGES, 0);
			gpunvme_map_host m;
			UAPI_INIT(m);
			m.addr = (uintptr_t)c.pool;
			m.len = POOL_PAGES * PAGE;
			m.dma_addrs = (uintptr_t)c.pool_dma.data();
			if (c.pool == MAP_FAILED || ioctl(c.fd, GPUNVME_IOC_MAP_HOST, &m)) {
				diag("%s: MAP_HOST (pool): %s", c.bdf.c_str(), strerror(errno));
				close(c.fd);
				g_ok = false;
				return false;
			}
			c.pool_handle = m.handle;
		}
		g_actl.push_back(std::move(c));
	}
	return true;
}

struct array_cfg {
	uint32_t n_ctrl = 1;
	uint32_t layout = ARRAY_STRIPE;
	uint32_t chunk = 1;
	uint32_t page_shift = 14; /* 16 KiB: a PRP list per load */
	uint32_t frames = 8;
	uint32_t ways = 8;
	uint32_t nqp = 2;
	uint32_t depth = 32;
	uint64_t lba = 0, blocks = 0; /* on every controller */
	uint64_t timeout_ticks = WAIT_TICKS;
};

/* An array over the first n_ctrl array controllers: the frames (host
 * memory) mapped for each, nqp pairs on each, the cache's bookkeeping, the
 * descriptor. Closed in the safe order: pairs, then the frames' mappings,
 * then the memory. */
struct arun {
	array_cfg c;
	uint32_t flags = 0;
	uint8_t *frames = nullptr;
	size_t frame_bytes = 0;
	std::vector<uint64_t> frame_dma;
	std::vector<uint32_t> frame_handle;
	std::vector<std::vector<ptq>> qs;
	std::vector<std::vector<pqueue>> views;
	std::vector<array_ctrl> actrl;
	void *meta = nullptr;
	uint32_t stop = 0;
	array_desc d{};
	bool ready = false;

	uint64_t page_bytes() const { return 1ull << c.page_shift; }
	uint64_t elements() const { return d.bytes / 8; }

	bool open(const array_cfg &x, uint32_t f)
	{
		c = x;
		flags = f;
		if (!array_ctls(c.n_ctrl, f))
			return false;
		const uint32_t lba_size = g_actl[0].info.ns[0].lba_size;
		for (uint32_t k = 0; k < c.n_ctrl; k++) {
			const gpunvme_info &in = g_actl[k].info;
			if (in.ns[0].lba_size != lba_size || in.ns[0].capacity_lbas < c.lba + c.blocks ||
			    c.nqp > in.io_queues || c.depth > in.max_queue_entries ||
			    ((f & GPUNVME_QPAIR_RAW) && c.nqp * POOL_WIN > POOL_PAGES)) {
				diag("%s: LBA size %u (want %u), %llu LBAs (want %llu), %u queues of %u (want %u of %u)",
				     g_actl[k].bdf.c_str(), in.ns[0].lba_size, lba_size,
				     (unsigned long long)in.ns[0].capacity_lbas,
				     (unsigned long long)(c.lba + c.blocks), in.io_queues,
				     in.max_queue_entries, c.nqp, c.depth);
				g_ok = false;
				return false;
			}
		}
		frame_bytes = (size_t)c.frames << c.page_shift;
		frames = (uint8_t *)mmap(nullptr, frame_bytes, PROT_READ | PROT_WRITE,
					 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (frames == MAP_FAILED) {
			frames = nullptr;
			g_ok = false;
			return false;
		}
		std::memset(frames, 0xA5, frame_bytes);
		const uint32_t fp = (uint32_t)(frame_bytes / PAGE);
		frame_dma.assign((size_t)c.n_ctrl * fp, 0);
		qs.resize(c.n_ctrl);
		views.resize(c.n_ctrl);
		for (uint32_t k = 0; k < c.n_ctrl; k++) {
			actl &a = g_actl[k];
			gpunvme_map_host m;
			UAPI_INIT(m);
			m.addr = (uintptr_t)frames;
			m.len = frame_bytes;
			m.dma_addrs = (uintptr_t)(frame_dma.data() + (size_t)k * fp);
			if (ioctl(a.fd, GPUNVME_IOC_MAP_HOST, &m)) {
				diag("%s: MAP_HOST (frames): %s", a.bdf.c_str(), strerror(errno));
				g_ok = false;
				return false;
			}
			frame_handle.push_back(m.handle);
			qs[k].resize(c.nqp);
			for (uint32_t i = 0; i < c.nqp; i++) {
				ptq &t = qs[k][i];
				int r = pair_open(t.p, c.depth, f, a.fd);
				if (r) {
					diag("%s: CREATE_QPAIR/mmap (depth %u): %s", a.bdf.c_str(), c.depth,
					     strerror(-r));
					g_ok = false;
					return false;
				}
				t.mem = std::aligned_alloc(64, (pq_bytes(c.depth) + 63) / 64 * 64);
				pq_init(t.mem, c.depth, 0, 0, 1);
				pqueue &q = t.q;
				q = pqueue{};
				q.sq = t.p.view.sq;
				q.cq = t.p.view.cq;
				q.sq_db = t.p.view.sq_db;
				q.cq_db = t.p.view.cq_db;
				q.stop = &stop;
				q.timeout_ticks = c.timeout_ticks;
				q.tick_hz = TICK_HZ;
				q.depth = c.depth;
				q.backoff = 1;
				pq_attach(q, t.mem);
				if (is_shared(f)) {
					q.prp_va = (uint64_t *)t.p.pool;
					q.prp_dma = t.p.c.prp_dma;
					q.prp_stride = pq_prp_stride(t.p.c.prp_size, c.depth);
					q.max_transfer = a.info.shared_max_transfer;
				} else {
					q.prp_va = (uint64_t *)(a.pool + (size_t)i * POOL_WIN * PAGE);
					q.prp_page_dma = a.pool_dma.data() + (size_t)i * POOL_WIN;
					q.prp_stride = pq_prp_stride((uint64_t)POOL_WIN * PAGE, c.depth);
					q.max_transfer = a.info.mdts_bytes;
				}
				views[k].push_back(q);
			}
			array_ctrl x{};
			x.base_lba = c.lba;
			x.lbas = c.blocks;
			x.nqp = c.nqp;
			x.nsid = 1;
			x.lba_shift = (uint32_t)__builtin_ctz(lba_size);
			actrl.push_back(x);
		}
		for (uint32_t k = 0; k < c.n_ctrl; k++)
			actrl[k].qps = views[k].data();
		/* Whole pages (stripe: whole chunks) of the blocks on each. */
		uint64_t lp = c.blocks * lba_size / page_bytes();
		if (c.layout == ARRAY_STRIPE)
			lp = lp / c.chunk * c.chunk;
		d = array_desc{};
		d.ctrl = actrl.data();
		d.frames = frames;
		d.frame_dma = frame_dma.data();
		d.stop = &stop;
		d.bytes = (c.layout == ARRAY_REPLICATE ? lp : lp * c.n_ctrl) * page_bytes();
		d.timeout_ticks = c.timeout_ticks;
		d.tick_hz = TICK_HZ;
		d.n_ctrl = c.n_ctrl;
		d.layout = c.layout;
		d.chunk_pages = c.chunk;
		d.page_shift = c.page_shift;
		d.n_frames = c.frames;
		d.ways = c.ways;
		d.n_sets = c.frames / c.ways;
		d.frame_pages = fp;
		reset();
		const int32_t chk = array_check(d);
		if (chk != OK) {
			diag("array_check: %d", chk);
			g_ok = false;
			return false;
		}
		ready = true;
		return true;
	}

	/* An empty cache (frames poisoned). */
	void reset()
	{
		std::free(meta);
		const uint64_t n = array_meta_bytes(d.n_frames, d.n_sets);
		meta = std::aligned_alloc(64, (n + 63) / 64 * 64);
		std::memset(meta, 0, n);
		array_meta_attach(d, meta);
		std::memset(frames, 0xA5, frame_bytes);
	}

	/* Where element byte x is, by the layout's definition (not the
	 * library's code): controller and namespace byte offset. */
	uint64_t disk_byte(uint64_t x, uint32_t *k) const
	{
		const uint64_t p = x / page_bytes(), in = x % page_bytes();
		uint64_t lp = p;
		*k = 0;
		if (c.layout == ARRAY_STRIPE) {
			*k = (uint32_t)(p / c.chunk % c.n_ctrl);
			lp = p / c.chunk / c.n_ctrl * c.chunk + p % c.chunk;
		}
		return c.lba * g_actl[0].info.ns[0].lba_size + lp * page_bytes() + in;
	}

	/* The host's own check of every cached page: each VALID frame's words
	 * against the pattern where its page lives. Returns wrong words. */
	uint64_t check_frames(uint64_t seed, uint32_t *valid) const
	{
		uint64_t wrong = 0;
		*valid = 0;
		for (uint32_t f = 0; f < c.frames; f++) {
			const uint64_t st = d.state[f];
			if (!(st & fstate::VALID) || !fs_tag(st))
				continue;
			(*valid)++;
			const uint64_t p = fs_tag(st) - 1;
			const uint64_t *w = (const uint64_t *)(frames + ((uint64_t)f << c.page_shift));
			for (uint64_t e = 0; e < page_bytes() / 8; e++) {
				uint32_t k;
				wrong += w[e] != gx::pattern(seed, disk_byte(p * page_bytes() + 8 * e, &k));
			}
		}
		return wrong;
	}

	void close()
	{
		for (auto &v : qs)
			for (auto &t : v)
				pt_close(t);
		for (size_t k = 0; k < frame_handle.size(); k++) {
			gpunvme_unmap u;
			UAPI_INIT(u);
			u.handle = frame_handle[k];
			if (ioctl(g_actl[k].fd, GPUNVME_IOC_UNMAP, &u)) {
				diag("%s: UNMAP (frames): %s", g_actl[k].bdf.c_str(), strerror(errno));
				g_ok = false;
			}
		}
		frame_handle.clear();
		if (frames)
			munmap(frames, frame_bytes);
		frames = nullptr;
		std::free(meta);
		meta = nullptr;
		qs.clear();
	}
	~arun() { close(); }
};

/* A guide kernel over [first, first + count) with groups x lanes threads. */
static gx::io_result array_launch(void (*k)(const array_desc *, const array_args *, gx::io_result *),
				  const arun &r, uint64_t seed, uint64_t first, uint64_t count,
				  uint32_t groups, uint32_t lanes, uint32_t fua = 0, bool *ran = nullptr)
{
	array_args x{};
	x.seed = seed;
	x.first = first;
	x.count = count;
	x.threads = groups * lanes;
	x.fua = fua;
	gx::io_result res{};
	const bool ok = run_groups(groups, lanes, [&] { k(&r.d, &x, &res); });
	if (ran)
		*ran = ok;
	CHECK(ok, "a lane of the array kernel never reached a barrier");
	return res;
}

static void array_report(const arun &r, const char *what)
{
	const array_stats &s = *r.d.stats;
	diag("%s: %u controller(s) %s chunk %u, %llu KiB pages, %u frames in %u sets: %llu elements; loads %llu write-backs %llu evictions %llu waits %llu noframe %llu failures %llu retired %llu",
	     what, r.c.n_ctrl, r.c.layout == ARRAY_REPLICATE ? "replicate" : "stripe", r.c.chunk,
	     (unsigned long long)(r.page_bytes() / 1024), r.c.frames, r.d.n_sets,
	     (unsigned long long)r.elements(), (unsigned long long)s.loads,
	     (unsigned long long)s.writebacks, (unsigned long long)s.evictions,
	     (unsigned long long)s.waits, (unsigned long long)s.noframe,
	     (unsigned long long)s.failures, (unsigned long long)s.dead);
}

/* Shared pairs: each pair's relay counters show its commands relayed. */
static void array_relayed(const arun &r)
{
	if (!is_shared(r.flags))
		return;
	uint64_t mirrored = 0;
	bool seen = false;
	for (uint32_t k = 0; k < r.c.n_ctrl; k++)
		for (const ptq &t : r.qs[k]) {
			const long long m = bridge_counter_of(g_actl[k].bdf.c_str(), t.p.c.qid, "cqes_mirrored");
			const long long rej = bridge_counter_of(g_actl[k].bdf.c_str(), t.p.c.qid, "sqes_rejected");
			if (m < 0)
				continue;
			seen = true;
			mirrored += (uint64_t)m;
			CHECK(rej <= 0, "%s q%u: %lld SQEs rejected", g_actl[k].bdf.c_str(), t.p.c.qid, rej);
			CHECK((uint64_t)m == t.q.st->cqes, "%s q%u: relay mirrored %lld CQEs, the pair consumed %llu",
			      g_actl[k].bdf.c_str(), t.p.c.qid, m, (unsigned long long)t.q.st->cqes);
		}
	const array_stats &s = *r.d.stats;
	if (seen)
		CHECK(mirrored == s.loads + s.writebacks, "relays mirrored %llu CQEs, the array sent %llu commands",
		      (unsigned long long)mirrored, (unsigned long long)(s.loads + s.writebacks));
	else
		diag("no relay counters in debugfs; relay not checked");
}

/*
 * Every element of an array striped over n controllers against the CLI's
 * pattern (the guide's check kernel, 4 groups x 8 threads, then the host's
 * own check of every cached page), through a cache of 8 frames, far fewer
 * than the pages (eviction under load).
 */
static void array_every_element(uint32_t flags, uint32_t n, uint32_t layout, uint32_t chunk)
{
	array_cfg c;
	c.n_ctrl = n;
	c.layout = layout;
	c.chunk = chunk;
	c.lba = g_aenv.lba;
	c.blocks = g_aenv.blocks;
	arun r;
	if (!r.open(c, flags))
		return;
	const uint64_t n_el = r.elements();
	gx::io_result res = array_launch(gpunvme_array_check, r, g_aenv.seed, 0, n_el, 4, 8);
	CHECK(res.status == OK && res.completed == n_el && res.mismatches == 0,
	      "check kernel: status %d, %u of %llu elements, %u differ from the pattern", res.status,
	      res.completed, (unsigned long long)n_el, res.mismatches);
	uint32_t valid = 0;
	const uint64_t wrong = r.check_frames(g_aenv.seed, &valid);
	CHECK(wrong == 0 && valid > 0, "host: %llu words of %u cached pages differ", (unsigned long long)wrong, valid);
	const array_stats &s = *r.d.stats;
	const uint64_t pages = n_el * 8 / r.page_bytes();
	CHECK(s.loads >= pages && s.evictions >= pages - r.c.frames && s.failures == 0,
	      "loads %llu, evictions %llu for %llu pages through %u frames", (unsigned long long)s.loads,
	      (unsigned long long)s.evictions, (unsigned long long)pages, r.c.frames);
	if (layout == ARRAY_REPLICATE)
		for (uint32_t k = 0; k < n; k++) {
			uint64_t cqes = 0;
			for (const ptq &t : r.qs[k])
				cqes += t.q.st->cqes;
			CHECK(cqes > 0, "replica %s served no load", g_actl[k].bdf.c_str());
		}
	for (uint32_t k = 0; k < n; k++)
		for (const ptq &t : r.qs[k])
			CHECK(pt_settled(t, t.q.st->cid_ticket), "%s", g_actl[k].bdf.c_str());
	array_relayed(r);
	array_report(r, "every element");
}

static void t_array_1(uint32_t flags) { array_every_element(flags, 1, ARRAY_STRIPE, 1); }
static void t_array_2(uint32_t flags) { array_every_element(flags, 2, ARRAY_STRIPE, 1); }
static void t_array_4(uint32_t flags) { array_every_element(flags, 4, ARRAY_STRIPE, 2); }
static void t_array_replicate(uint32_t flags) { array_every_element(flags, 2, ARRAY_REPLICATE, 1); }

/* 32 threads (4 groups of 8) read 32 elements of one page at once: one
 * loads it, the others find it loading and wait on its frame: one command. */
static void t_array_one_page(uint32_t flags)
{
	array_cfg c;
	c.n_ctrl = 2;
	c.lba = g_aenv.lba;
	c.blocks = g_aenv.blocks;
	arun r;
	if (!r.open(c, flags))
		return;
	const uint64_t per = r.page_bytes() / 8, page = 3;
	gx::io_result res = array_launch(gpunvme_array_check, r, g_aenv.seed, page * per, 32, 4, 8);
	const array_stats &s = *r.d.stats;
	CHECK(res.status == OK && res.completed == 32 && res.mismatches == 0 && s.loads == 1,
	      "32 threads on one page: status %d, %u done, %u wrong; loads %llu (want 1), waits %llu",
	      res.status, res.completed, res.mismatches, (unsigned long long)s.loads,
	      (unsigned long long)s.waits);
	array_relayed(r);
	array_report(r, "one page, 32 threads");
}

/*
 * Dirty write-back, then read back: the fill kernel writes the pattern of
 * the write-back seed into an array over 2 controllers (8 frames: dirty
 * pages are written back by evictions while writes go on), the flush
 * kernel (FUA) writes the rest back, a fresh cache reads every element
 * back with the check kernel. gpunvme_array_hostrun.sh then reads these
 * blocks through the kernel's nvme driver.
 */
static void t_array_write_back(uint32_t flags)
{
	if (!g_aenv.wb_blocks) {
		g_skip = "no GPUNVME_ARRAY_WB_BLOCKS";
		return;
	}
	const bool raw = !is_shared(flags);
	array_cfg c;
	c.n_ctrl = 2;
	c.lba = g_aenv.wb_lba + (raw ? g_aenv.wb_blocks : 0);
	c.blocks = g_aenv.wb_blocks;
	const uint64_t seed = g_aenv.wb_seed + (raw ? 1 : 0);
	arun r;
	if (!r.open(c, flags))
		return;
	const uint64_t n_el = r.elements();
	gx::io_result res = array_launch(gpunvme_array_fill, r, seed, 0, n_el, 4, 8);
	CHECK(res.status == OK && res.completed == n_el, "fill: status %d, %u of %llu", res.status,
	      res.completed, (unsigned long long)n_el);
	res = array_launch(gpunvme_array_flush, r, seed, 0, 0, 2, 4, 1);
	CHECK(res.status == OK && res.completed == 8, "flush: status %d, %u of 8 threads", res.status,
	      res.completed);
	uint32_t dirty = 0;
	for (uint32_t f = 0; f < r.c.frames; f++)
		dirty += (r.d.state[f] & (fstate::DIRTY | fstate::WB)) != 0;
	const array_stats s = *r.d.stats;
	CHECK(dirty == 0 && s.writebacks >= n_el * 8 / r.page_bytes(),
	      "after the flush: %u frames dirty; %llu write-backs for %llu pages", dirty,
	      (unsigned long long)s.writebacks, (unsigned long long)(n_el * 8 / r.page_bytes()));
	array_report(r, "fill + flush");
	array_relayed(r);
	r.reset();
	res = array_launch(gpunvme_array_check, r, seed, 0, n_el, 4, 8);
	CHECK(res.status == OK && res.completed == n_el && res.mismatches == 0,
	      "read back: status %d, %u of %llu, %u differ", res.status, res.completed,
	      (unsigned long long)n_el, res.mismatches);
	diag("wrote the pattern of seed %llu at LBAs %llu..%llu of %s and %s",
	     (unsigned long long)seed, (unsigned long long)c.lba,
	     (unsigned long long)(c.lba + c.blocks), g_actl[0].bdf.c_str(), g_actl[1].bdf.c_str());
}

/* debugfs gpunvme-<bdf>/<knob>. */
static int array_knob(const std::string &bdf, const char *knob, const char *v)
{
	return sysfs_write(("/sys/kernel/debug/gpunvme-" + bdf + "/" + knob).c_str(), v);
}

/*
 * A controller that stops answering: an array striped over 2 controllers
 * with 1 s deadlines; the second stops answering (shared pairs: the
 * module's relay_hold_qid knob keeps its completions from the pair;
 * raw pairs, which no module code sits between: the pair's SQ doorbell is
 * pointed at a cell of host memory, so the controller never sees a
 * command). 8 threads read one element of every page: the first
 * controller's are all right, the second's end in errors, each read
 * within the bound; then the first controller's pages are read again.
 */
struct dead_tally {
	std::atomic<uint64_t> right{0}, wrong{0}, err{0};
};

static void t_array_dead(uint32_t flags)
{
	array_cfg c;
	c.n_ctrl = 2;
	c.nqp = 1;
	c.frames = 32;
	c.ways = 8;
	c.lba = g_aenv.lba;
	c.blocks = g_aenv.blocks;
	c.timeout_ticks = TICK_HZ; /* 1 s */
	arun r;
	if (!r.open(c, flags))
		return;
	const bool shared = is_shared(flags);
	uint32_t cell = 0;
	const uint16_t qid = r.qs[1][0].p.c.qid;
	if (shared) {
		CHECK(array_knob(g_actl[1].bdf, "relay_hold_qid", std::to_string(qid).c_str()) == 0,
		      "relay_hold_qid: %s", strerror(errno));
	} else {
		r.views[1][0].sq_db = &cell;
	}
	const uint64_t per = r.page_bytes() / 8, pages = r.elements() / per;
	dead_tally healthy, dead;
	std::atomic<uint64_t> worst_ms{0};
	auto pass = [&](bool only_healthy) {
		run_groups(2, 4, [&] {
			const uint32_t t = group_id() * group_size() + lane_id();
			const array<uint64_t> a(&r.d);
			for (uint64_t p = t; p < pages; p += 8) {
				uint32_t k;
				const uint64_t at = r.disk_byte(p * r.page_bytes() + 8 * 5, &k);
				if (only_healthy && k == 1)
					continue;
				uint64_t v = 0;
				const uint64_t t0 = wall_ticks();
				const int32_t rc = a.read(p * per + 5, &v);
				const uint64_t ms = (wall_ticks() - t0) / 1000000;
				uint64_t w = worst_ms;
				while (ms > w && !worst_ms.compare_exchange_weak(w, ms))
					;
				dead_tally &x = k == 0 ? healthy : dead;
				if (rc != OK)
					x.err++;
				else if (v == gx::pattern(g_aenv.seed, at))
					x.right++;
				else
					x.wrong++;
			}
		});
	};
	const uint64_t t0 = wall_ticks();
	pass(false);
	pass(true);
	const uint64_t all_ms = (wall_ticks() - t0) / 1000000;
	const uint64_t on_healthy = (pages + 1) / 2; /* stripe, chunk 1: even pages */
	CHECK(healthy.right == 2 * on_healthy && healthy.err == 0 && healthy.wrong == 0,
	      "healthy controller: %llu right of %llu, %llu wrong, %llu errors",
	      (unsigned long long)healthy.right.load(), (unsigned long long)(2 * on_healthy),
	      (unsigned long long)healthy.wrong.load(), (unsigned long long)healthy.err.load());
	CHECK(dead.err == pages - on_healthy && dead.right == 0,
	      "stopped controller: %llu of %llu reads failed, %llu right", (unsigned long long)dead.err.load(),
	      (unsigned long long)(pages - on_healthy), (unsigned long long)dead.right.load());
	/* A read waits at most for its claim and its command (2 x 1 s) or for
	 * another lane's load (3 x 1 s); TCG slack on top. */
	CHECK(worst_ms.load() < 8000, "slowest read %llu ms", (unsigned long long)worst_ms.load());
	const array_stats &s = *r.d.stats;
	diag("stopped controller: %llu reads failed; slowest read %llu ms, both passes %llu ms; frames retired %llu",
	     (unsigned long long)dead.err.load(), (unsigned long long)worst_ms.load(),
	     (unsigned long long)all_ms, (unsigned long long)s.dead);
	CHECK(s.dead >= 1, "no frame retired after commands without completions");
	if (shared) {
		/* Let the held completions through before the pair goes. */
		CHECK(array_knob(g_actl[1].bdf, "relay_hold_qid", "0") == 0, "relay_hold_qid 0: %s",
		      strerror(errno));
		const long long acc = bridge_counter_of(g_actl[1].bdf.c_str(), qid, "sqes_accepted");
		for (int i = 0; i < 500 && acc >= 0 &&
				bridge_counter_of(g_actl[1].bdf.c_str(), qid, "cqes_mirrored") < acc;
		     i++)
			usleep(10000);
	}
	array_report(r, "a controller stops answering");
}

/* ---- main ------------------------------------------------------------------ */

struct test {
	const char *name;
	void (*fn)(uint32_t flags);
};

static const test TESTS[] = {
	{"single_io", t_single_io},
	{"two_qpairs", t_two_pairs},
	{"four_qpairs", t_four_pairs},
	{"wrap_depth4", t_wrap},
	{"multi_round", t_multi_round},
	{"timeout_and_stop", t_timeout_stop},
	{"examples_one_queue", t_examples_one_queue},
	{"examples_four_queues", t_examples_four_queues},
	{"example_nvme_error", t_example_nvme_error},
	{"prp_list", t_prp_list},
	{"shared_rejects", t_shared_rejects},
	{"pthread_64_threads_1_pair", t_pt_1pair},
	{"pthread_64_threads_2_pairs", t_pt_2pairs},
	{"pthread_64_threads_4_pairs", t_pt_4pairs},
	{"pthread_wrap_depth8_4_groups", t_pt_wrap_shared},
	{"pthread_prp_4k_to_mdts", t_pt_prp_sizes},
	{"pthread_coalesce_and_stop", t_pt_coalesce_stop},
	{"pthread_own_ticket_in_the_way", t_pt_own_ticket},
	{"pthread_two_controllers", t_pt_two_controllers},
	{"guide_read", t_guide_read},
	{"array_stripe_1_controller", t_array_1},
	{"array_stripe_2_controllers", t_array_2},
	{"array_stripe_4_controllers_chunk_2", t_array_4},
	{"array_replicate_2_controllers", t_array_replicate},
	{"array_one_page_32_threads_one_command", t_array_one_page},
	{"array_write_back_then_read_back", t_array_write_back},
	{"array_controller_stops_answering", t_array_dead},
};

/*
 * Before the raw run: this file claims owner mode. "" when it holds it;
 * otherwise why not, and whether that is a skip (EPERM: this machine or
 * caller may not own the controller) or a failure.
 */
static std::string claim_owner(bool &skip)
{
	gpunvme_owner o;
	UAPI_INIT(o);
	skip = false;
	if (dev_ioctl(GPUNVME_IOC_CLAIM_OWNER, &o) == 0) {
		diag("owner mode claimed: IOMMU mode %s", iommu_name(o.iommu_mode));
		return "";
	}
	int e = errno;
	skip = e == EPERM;
	std::string why = std::string("CLAIM_OWNER: ") + strerror(e);
	if (skip)
		why += std::string(" (owner mode needs CAP_SYS_RAWIO, no lockdown and a translating IOMMU; ") +
		       "IOMMU mode " + iommu_name(g_info.iommu_mode) + ", GET_INFO " +
		       ((g_info.modes & GPUNVME_MODE_OWNER) ? "offered" : "did not offer") +
		       " owner mode)";
	return why;
}

int main()
{
	setvbuf(stdout, nullptr, _IOLBF, 0);
	/* Shared first: owner mode, once claimed, lasts until the file closes. */
	const uint32_t modes[2] = {0, GPUNVME_QPAIR_RAW};
	const int total = (int)(sizeof(TESTS) / sizeof(TESTS[0])) * 2;

	const char *only = getenv("GPUNVME_HOSTRUN_ONLY");
	const char *modes_env = getenv("GPUNVME_HOSTRUN_MODES");
#ifdef GPUNVME_HOSTRUN_PASSTHROUGH
	if (!modes_env || !*modes_env)
		modes_env = "shared"; /* no owner mode behind a passthrough back end */
#endif
	auto selected = [&](const char *name) {
		if (!only || !*only)
			return true;
		std::string list = std::string(",") + only + ",";
		return list.find(std::string(",") + name + ",") != std::string::npos;
	};
	auto mode_selected = [&](uint32_t mode) {
		if (!modes_env || !*modes_env)
			return true;
		return !std::strcmp(modes_env, (mode & GPUNVME_QPAIR_RAW) ? "raw" : "shared");
	};
	int planned = 0;
	for (uint32_t mode : modes)
		for (const test &t : TESTS)
			planned += mode_selected(mode) && selected(t.name);
	(void)total;
	std::printf("KTAP version 1\n1..%d\n", planned);
	std::fflush(stdout);
	std::string why;
	array_env_read();
	bool ready = setup(why) == 0;
	if (!ready)
		diag("setup failed: %s", why.c_str());
	/* Started by pthread_two_controllers: say ready on one fd, wait for go
	 * on the other (bounded), so both controllers' runs start together. */
	long long window0 = 0;
	if (const char *sync = getenv("GPUNVME_HOSTRUN_SYNC")) {
		int rfd = -1, gfd = -1;
		char c = 0;
		if (std::sscanf(sync, "%d,%d", &rfd, &gfd) == 2 && write(rfd, "r", 1) == 1) {
			pollfd p = {gfd, POLLIN, 0};
			if (poll(&p, 1, 60000) != 1 || read(gfd, &c, 1) != 1)
				diag("no go from the parent within 60 s");
		}
		window0 = mono_us();
	}

	for (uint32_t mode : modes) {
		if (!mode_selected(mode))
			continue;
		/* Raw pairs need owner mode: claimed once, after every shared
		 * pair of this file is gone; held until the file closes. */
		std::string no_owner;
		bool owner_skip = false;
		if (ready && (mode & GPUNVME_QPAIR_RAW)) {
			no_owner = claim_owner(owner_skip);
			if (!no_owner.empty())
				diag("%s", no_owner.c_str());
		}
		for (const test &t : TESTS) {
			if (!selected(t.name))
				continue;
			std::string name = std::string(t.name) +
					   ((mode & GPUNVME_QPAIR_RAW) ? "_raw" : "_shared");
			g_ok = ready && (no_owner.empty() || owner_skip);
			g_skip.clear();
			if (ready && no_owner.empty())
				t.fn(mode);
			else if (owner_skip)
				g_skip = no_owner;
			g_n++;
			if (g_ok && !g_skip.empty()) {
				g_skipped++;
				std::printf("ok %d %s # SKIP %s\n", g_n,
					    name.c_str(), g_skip.c_str());
				continue;
			}
			if (g_ok)
				g_pass++;
			else
				g_fail++;
			std::printf("%s %d %s\n", g_ok ? "ok" : "not ok", g_n,
				    name.c_str());
			std::fflush(stdout);
		}
		array_close_all(); /* the array controllers' files: owner mode ends */
	}
	if (window0)
		std::printf("# window %lld %lld\n", window0, mono_us());
	teardown();
	if (g_skipped)
		std::printf("%d passed, %d failed, %d skipped\n", g_pass,
			    g_fail, g_skipped);
	else
		std::printf("%d passed, %d failed\n", g_pass, g_fail);
	return g_fail ? 1 : 0;
}
