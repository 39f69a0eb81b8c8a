// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// gpunvme_hostrun.cpp - the device library (kernels/include/gpunvme),
// compiled as plain host C++, driving a real (in CI: QEMU-emulated) NVMe
// controller through the gpunvme UAPI. Host threads stand in for lanes,
// one "workgroup" per queue pair, exactly as in the library's host build:
// host_lane_id / host_group_id / host_group_size are set per thread and
// joining the lane threads is the group barrier (compat.h: on the host,
// sync_lanes() is only a fence; "the test joins its threads instead").
//
// The queue-pair view is built the way a GPU gets it: SQ, CQ (or the
// bridge's mirror) and the doorbell page mmapped from /dev/gpunvme<N>,
// doorbells = doorbell page + sq_db / cq_db. Every SQE is built by
// sqe_write()/sqe_read() + prp_pair(), every slot claimed by
// sq_reserve()/sq_put(), every doorbell rung by sq_ring()/cq_release(),
// every completion reaped by cq_wait(). A lane-group round is split at the
// same points where group_submit()/group_reap() call sync_lanes(), with a
// join there; the group helpers themselves also run verbatim with one lane
// per group (the only width at which the host sync_lanes() is a barrier).
//
// Each workload writes a known pattern and reads it back into poisoned
// pages, checking every byte; each runs on a direct and on a bridged pair.
// Output: KTAP. Environment: GPUNVME_BDF, GPUNVME_DIR (module load and
// bind as in tests/selftests/vmenv.h).

#include <gpunvme/gpunvme.h>

#include "gpunvme.h" /* uapi/gpunvme.h */
#include "vmenv.h"   /* tests/selftests/vmenv.h (-isystem: its -Wformat-truncation is not ours) */

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <mutex>
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
static constexpr uint64_t WAIT_TICKS = 2 * TICK_HZ; /* WAIT_CAP_SECONDS */

/* ---- KTAP ------------------------------------------------------------ */

static int g_n, g_pass, g_fail;
static std::atomic<bool> g_ok;
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
static uint32_t g_nsid, g_lba_size, g_blocks_per_page;
static uint64_t g_lba_next; /* LBA cursor: every batch gets fresh blocks */
static uint64_t g_lba_end;

static constexpr uint32_t BUF_PAGES = 64;
static uint8_t *g_buf;
static uint64_t g_dma[BUF_PAGES];
static uint32_t g_buf_handle;

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

static int open_controller(std::string &why)
{
	const char *bdf = gpunvme_bdf();
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
	/* /dev/gpunvme<N>: N is bind order; find the one for our BDF. */
	for (int tries = 0; tries < 200; tries++) {
		for (int n = 0; n < 16; n++) {
			char path[64];
			std::snprintf(path, sizeof(path), "/dev/gpunvme%d", n);
			int fd = open(path, O_RDWR | O_CLOEXEC);
			if (fd < 0)
				continue;
			UAPI_INIT(g_info);
			if (ioctl(fd, GPUNVME_IOC_GET_INFO, &g_info) == 0 &&
			    !std::strcmp(g_info.bdf, bdf)) {
				diag("%s: %s on %s, io_queues %u, MQES+1 %u",
				     path, g_info.model, g_info.bdf,
				     g_info.io_queues, g_info.max_queue_entries);
				return fd;
			}
			close(fd);
		}
		usleep(10000);
	}
	why = std::string("no /dev/gpunvme<N> for ") + bdf;
	return -1;
}

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
	if (ioctl(g_fd, GPUNVME_IOC_MAP_HOST, &m)) {
		why = std::string("MAP_HOST: ") + strerror(errno);
		return -1;
	}
	g_buf_handle = m.handle;
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
		if (ioctl(g_fd, GPUNVME_IOC_UNMAP, &u))
			diag("UNMAP: %s", strerror(errno));
	}
	close(g_fd);
}

/* ---- a queue pair as the GPU sees it ----------------------------------- */

struct pair {
	gpunvme_qpair_create c;
	void *sq = MAP_FAILED, *cq = MAP_FAILED, *db = MAP_FAILED;
	uint32_t stop = 0; /* the host's stop flag for this pair */
	qpair view{};      /* the kernel argument every lane starts from */
	bool live = false;
};

static int pair_open(pair &p, uint32_t depth, uint32_t flags)
{
	UAPI_INIT(p.c);
	p.c.depth = depth;
	p.c.flags = flags;
	if (ioctl(g_fd, GPUNVME_IOC_CREATE_QPAIR, &p.c))
		return -errno;
	p.live = true;
	p.sq = mmap(nullptr, p.c.sq_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		    g_fd, p.c.sq_offset);
	p.cq = mmap(nullptr, p.c.cq_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		    g_fd, p.c.cq_offset);
	p.db = mmap(nullptr, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, g_fd,
		    p.c.db_offset);
	if (p.sq == MAP_FAILED || p.cq == MAP_FAILED || p.db == MAP_FAILED)
		return -errno;

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
	p.sq = p.cq = p.db = MAP_FAILED;
	if (p.live) {
		gpunvme_qpair_destroy d;
		UAPI_INIT(d);
		d.qid = p.c.qid;
		if (ioctl(g_fd, GPUNVME_IOC_DESTROY_QPAIR, &d)) {
			diag("DESTROY_QPAIR %u: %s", p.c.qid, strerror(errno));
			g_ok = false;
		}
		p.live = false;
	}
}

/* ---- lanes ------------------------------------------------------------- */

/*
 * One workgroup: its lanes' private copies of the qpair (every lane keeps
 * and advances its own, as on the GPU), the workgroup-shared agg of
 * group_reap(), and per-lane results. run() is one barrier-to-barrier
 * stretch: one host thread per lane, lane identity in the library's
 * thread_locals, join = sync_lanes().
 */
struct group {
	uint32_t id, size;
	std::vector<qpair> q; /* per lane */
	int32_t agg = OK;     /* "__shared__" */
	std::vector<int32_t> rc;
	std::vector<cqe> out;

	group(uint32_t gid, uint32_t lanes, const qpair &view)
		: id(gid), size(lanes), q(lanes, view), rc(lanes), out(lanes)
	{
	}

	template <typename F> void run(F fn)
	{
		std::vector<std::thread> t;
		t.reserve(size);
		for (uint32_t i = 0; i < size; i++)
			t.emplace_back([this, i, &fn] {
				host_lane_id = i;
				host_group_id = id;
				host_group_size = size;
				fn(q[lane_id()]);
			});
		for (auto &x : t)
			x.join();
	}
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

/*
 * Submit and reap one batch with the whole group: group_submit() then
 * group_reap(), with every sync_lanes() of theirs a join. Returns the
 * group's worst negative result, else the first lane's NVMe status.
 */
static int32_t group_batch(group &g, const batch_spec &b)
{
	const uint32_t n = b.n;
	std::vector<int32_t> reserve(g.size);

	/* group_submit: reserve (uniform), lanes < n fill their slot. */
	g.run([&](qpair &q) {
		uint32_t lane = lane_id();
		reserve[lane] = sq_reserve(q, n);
		if (reserve[lane] != OK)
			return;
		if (lane < n) {
			if (b.opc == NVME_OPC_WRITE)
				lane_fill(b, lane);
			sq_put(q, lane, lane_sqe(b, lane));
		}
	});
	for (uint32_t i = 1; i < g.size; i++)
		if (reserve[i] != reserve[0]) {
			diag("group %u: sq_reserve not uniform", g.id);
			g_ok = false;
		}
	if (reserve[0] != OK)
		return reserve[0];

	/* sync_lanes(); sq_ring (lane 0 rings); group_reap: wait, reset agg. */
	g.run([&](qpair &q) {
		uint32_t lane = lane_id();
		sq_ring(q, n, lane == 0);
		g.rc[lane] = lane < n ? cq_wait(q, lane, &g.out[lane]) : OK;
		if (lane == 0)
			atomic_store_relaxed(&g.agg, OK);
	});
	/* sync_lanes(); a failed lane publishes its error. */
	g.run([&](qpair &) {
		uint32_t lane = lane_id();
		if (g.rc[lane] < 0)
			atomic_store_relaxed(&g.agg, g.rc[lane]);
	});
	/* sync_lanes(); everyone reads the outcome. */
	std::vector<int32_t> worst(g.size);
	g.run([&](qpair &) { worst[lane_id()] = atomic_load_relaxed(&g.agg); });
	/* sync_lanes(); poison, or consume and ring the CQ head (lane 0). */
	g.run([&](qpair &q) {
		uint32_t lane = lane_id();
		if (worst[lane] < 0)
			qpair_fail(q, worst[lane]);
		else
			cq_release(q, n, lane == 0);
	});

	if (worst[0] < 0)
		return worst[0];
	for (uint32_t i = 0; i < n; i++)
		if (g.rc[i] != OK)
			return g.rc[i];
	return OK;
}

/* The CQEs of a batch: CIDs cid0..cid0+n-1 each once, our SQ, success. */
static bool check_cqes(const group &g, const batch_spec &b, uint16_t qid)
{
	bool ok = true;
	std::vector<int> seen(b.n, 0);
	for (uint32_t i = 0; i < b.n; i++) {
		const cqe &c = g.out[i];
		uint16_t k = (uint16_t)(c.cid - b.cid0);
		if (k >= b.n || seen[k]++) {
			diag("group %u lane %u: unexpected CID %u (batch %u..%u)",
			     g.id, i, c.cid, b.cid0, b.cid0 + b.n - 1);
			ok = false;
		}
		if (c.sqid != qid) {
			diag("group %u lane %u: CQE sqid %u, want %u", g.id, i,
			     c.sqid, qid);
			ok = false;
		}
		if (!status_ok(cqe_status((uint32_t)c.sf << 16))) {
			diag("group %u lane %u: CID %u status 0x%x", g.id, i,
			     c.cid, cqe_status((uint32_t)c.sf << 16));
			ok = false;
		}
	}
	return ok;
}

static bool verify_pages(const batch_spec &b, uint32_t gid)
{
	for (uint32_t lane = 0; lane < b.n; lane++) {
		const uint8_t *p = buf_page(b.page0 + lane);
		uint64_t lba = b.lba0 + (uint64_t)lane * g_blocks_per_page;
		uint32_t bad = 0, first = 0;
		for (uint32_t off = 0; off < PAGE; off++)
			if (p[off] != pattern_byte(b.seed, lba + off / g_lba_size,
						   off % g_lba_size)) {
				if (!bad++)
					first = off;
			}
		if (bad) {
			diag("group %u lane %u: LBA %llu: %u of %u bytes differ, first at %u (0x%02x, want 0x%02x)",
			     gid, lane, (unsigned long long)lba, bad, PAGE,
			     first, p[first],
			     pattern_byte(b.seed, lba + first / g_lba_size,
					  first % g_lba_size));
			return false;
		}
	}
	return true;
}

/* Every lane's private copy must have advanced identically. */
static bool lanes_agree(const group &g)
{
	for (uint32_t i = 1; i < g.size; i++) {
		const qpair &a = g.q[0], &b = g.q[i];
		if (a.sq_tail != b.sq_tail || a.cq_head != b.cq_head ||
		    a.phase != b.phase || a.inflight != b.inflight ||
		    a.error != b.error) {
			diag("group %u: lane %u's qpair copy diverged from lane 0's",
			     g.id, i);
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
	group g(j.gid, j.lanes, j.p->view);
	uint16_t cid = 1;
	for (uint32_t r = 0; r < j.rounds && j.ok; r++) {
		uint32_t n = j.batch_n(r, j.lanes, j.p->view.depth);
		batch_spec w{NVME_OPC_WRITE, n, j.page0, lba_alloc(n),
			     j.seed * 1000u + r, cid};
		int32_t rc = group_batch(g, w);
		if (rc != OK) {
			diag("pair q%u round %u: write batch of %u: %d", j.p->c.qid, r, n, rc);
			j.ok = false;
			break;
		}
		j.ok &= check_cqes(g, w, j.p->c.qid);
		cid = (uint16_t)(cid + n);
		j.commands += n;

		for (uint32_t i = 0; i < n; i++)
			std::memset(buf_page(j.page0 + i), 0xA5, PAGE);
		batch_spec rd = w;
		rd.opc = NVME_OPC_READ;
		rd.cid0 = cid;
		rc = group_batch(g, rd);
		if (rc != OK) {
			diag("pair q%u round %u: read batch of %u: %d", j.p->c.qid, r, n, rc);
			j.ok = false;
			break;
		}
		j.ok &= check_cqes(g, rd, j.p->c.qid);
		cid = (uint16_t)(cid + n);
		j.commands += n;
		j.ok &= verify_pages(rd, j.gid);
	}
	j.ok &= lanes_agree(g);
	j.final = g.q[0];
}

/*
 * Bridged pairs: the bridge's debugfs counters must show that it relayed
 * this pair's traffic (at least `commands` CQEs mirrored, doorbells rung).
 * -1 when debugfs is not there (a skip of this check, not a failure).
 */
static long long bridge_counter(uint16_t qid, const char *name)
{
	char path[256];
	std::snprintf(path, sizeof(path), "/sys/kernel/debug/gpunvme-%s-q%u/%s",
		      gpunvme_bdf(), qid, name);
	FILE *f = std::fopen(path, "r");
	if (!f)
		return -1;
	long long v = -1;
	if (std::fscanf(f, "%lld", &v) != 1)
		v = -1;
	std::fclose(f);
	return v;
}

static bool bridge_relayed(const pair &p, uint64_t commands)
{
	long long mirrored = bridge_counter(p.c.qid, "cqes_mirrored");
	long long sq = bridge_counter(p.c.qid, "sq_doorbell_writes");
	long long cq = bridge_counter(p.c.qid, "cq_doorbell_writes");
	long long bad = bridge_counter(p.c.qid, "bad_doorbell_values");
	if (mirrored < 0) {
		diag("q%u: no bridge counters in debugfs; relay not checked", p.c.qid);
		return true;
	}
	diag("q%u bridge: cqes_mirrored %lld sq_doorbell_writes %lld cq_doorbell_writes %lld bad_doorbell_values %lld",
	     p.c.qid, mirrored, sq, cq, bad);
	return mirrored >= (long long)commands && sq > 0 && cq > 0 && bad == 0;
}

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
			if ((flags & GPUNVME_QPAIR_BRIDGED) &&
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
 * group_submit()/group_reap() verbatim, one lane per group (the width at
 * which the host build's sync_lanes() is a real barrier); depth 4 so the
 * helpers also wrap.
 */
static void t_group_helpers(uint32_t flags)
{
	pair p;
	int r = pair_open(p, 4, flags);
	if (r) {
		diag("CREATE_QPAIR: %s", strerror(-r));
		g_ok = false;
		pair_close(p);
		return;
	}
	qpair q = p.view;
	int32_t agg = OK;
	uint16_t cid = 1;
	uint64_t total = 0;
	host_lane_id = 0;
	host_group_id = 0;
	host_group_size = 1;
	for (uint32_t r2 = 0; r2 < 9 && g_ok; r2++) {
		batch_spec w{NVME_OPC_WRITE, 1, 0, lba_alloc(1), 600u + r2, cid};
		lane_fill(w, 0);
		int32_t rc = group_submit(q, lane_id(), 1, lane_sqe(w, 0));
		CHECK(rc == OK, "group_submit write: %d", rc);
		cqe c{};
		rc = group_reap(q, lane_id(), 1, &c, &agg);
		CHECK(rc == OK && c.cid == cid, "group_reap write: %d cid %u", rc, c.cid);
		cid++;
		std::memset(buf_page(0), 0x5A, PAGE);
		batch_spec rd = w;
		rd.opc = NVME_OPC_READ;
		rd.cid0 = cid;
		rc = group_submit(q, lane_id(), 1, lane_sqe(rd, 0));
		CHECK(rc == OK, "group_submit read: %d", rc);
		rc = group_reap(q, lane_id(), 1, &c, &agg);
		CHECK(rc == OK && c.cid == cid, "group_reap read: %d cid %u", rc, c.cid);
		cid++;
		total += 2;
		CHECK(verify_pages(rd, 0), "read-back of round %u", r2);
	}
	if (g_ok && !ring_position_ok(q, total))
		g_ok = false;
	pair_close(p);
}

/*
 * Bounded waits against the real CQ memory: a lane waiting on a slot the
 * controller never fills (nothing submitted) times out; with the host's
 * stop flag raised it returns ERR_STOPPED; group_reap() poisons the pair on
 * the timeout and later submits fail with ERR_IO. No SQE is ever posted.
 */
static void t_timeout_stop(uint32_t flags)
{
	pair p;
	int r = pair_open(p, 4, flags);
	if (r) {
		diag("CREATE_QPAIR: %s", strerror(-r));
		g_ok = false;
		pair_close(p);
		return;
	}
	qpair q = p.view;
	q.timeout_ticks = TICK_HZ / 20; /* 50 ms */
	q.inflight = 1;                 /* pretend: the slot stays empty */
	cqe c{};
	uint64_t t0 = wall_ticks();
	int32_t rc = cq_wait(q, 0, &c);
	uint64_t dt = wall_ticks() - t0;
	CHECK(rc == ERR_TIMEOUT, "cq_wait on an empty slot: %d", rc);
	CHECK(dt >= q.timeout_ticks && dt < 10 * TICK_HZ,
	      "timed out after %llu ns", (unsigned long long)dt);

	__atomic_store_n(&p.stop, 1u, __ATOMIC_RELEASE);
	q.timeout_ticks = WAIT_TICKS;
	t0 = wall_ticks();
	rc = cq_wait(q, 0, &c);
	dt = wall_ticks() - t0;
	CHECK(rc == ERR_STOPPED, "cq_wait with the stop flag: %d", rc);
	CHECK(dt < TICK_HZ, "stop took %llu ns", (unsigned long long)dt);
	__atomic_store_n(&p.stop, 0u, __ATOMIC_RELEASE);

	host_lane_id = 0;
	host_group_size = 1;
	int32_t agg = OK;
	q.timeout_ticks = TICK_HZ / 20;
	rc = group_reap(q, lane_id(), 1, &c, &agg);
	CHECK(rc == ERR_TIMEOUT && q.error == ERR_TIMEOUT,
	      "group_reap timeout: %d, error %d", rc, q.error);
	rc = group_submit(q, lane_id(), 1, sqe_flush(1, g_nsid));
	CHECK(rc == ERR_IO, "submit on a poisoned pair: %d", rc);
	/* Bridged only: the shadow cell is memory (MMIO doorbells are write-only). */
	CHECK(!(flags & GPUNVME_QPAIR_BRIDGED) || *(volatile uint32_t *)q.sq_db == 0,
	      "shadow SQ tail moved: %u", *(volatile uint32_t *)q.sq_db);
	pair_close(p);
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
	{"group_helpers_one_lane", t_group_helpers},
	{"timeout_and_stop", t_timeout_stop},
};

int main()
{
	setvbuf(stdout, nullptr, _IOLBF, 0);
	const uint32_t modes[2] = {0, GPUNVME_QPAIR_BRIDGED};
	const int total = (int)(sizeof(TESTS) / sizeof(TESTS[0])) * 2;

	std::printf("KTAP version 1\n1..%d\n", total);
	std::fflush(stdout);
	std::string why;
	bool ready = setup(why) == 0;
	if (!ready)
		diag("setup failed: %s", why.c_str());

	for (uint32_t mode : modes)
		for (const test &t : TESTS) {
			std::string name = std::string(t.name) +
					   (mode ? "_bridged" : "_direct");
			g_ok = ready;
			if (ready)
				t.fn(mode);
			g_n++;
			if (g_ok)
				g_pass++;
			else
				g_fail++;
			std::printf("%s %d %s\n", g_ok ? "ok" : "not ok", g_n,
				    name.c_str());
			std::fflush(stdout);
		}
	teardown();
	std::printf("%d passed, %d failed\n", g_pass, g_fail);
	return g_fail ? 1 : 0;
}
