// SPDX-License-Identifier: GPL-2.0-only
/*
 * Races between unbind and the paths that hand out or free memory, made
 * deterministic: one path is held at a known point by the module's debugfs
 * knob and the other is driven into that window.
 *
 * mmap racing unbind: mmap is held after its checks
 * (gpunvme-<bdf>/mmap_delay_ms); the controller is unbound meanwhile, which
 * frees the queue memory. Pages are only ever inserted at fault time, under
 * the lock unbind marks the controller gone under, so the mapping mmap then
 * returns must fault (SIGBUS), never reach the freed memory. (Before, mmap
 * inserted the pages itself, into a VMA not yet linked where unbind's zap
 * could not see it.)
 *
 * The free of a destroyed pair at its last munmap racing unbind: the free
 * is held after it took the pair from the registry
 * (gpunvme-<bdf>/free_delay_ms) and the controller is unbound meanwhile.
 * Unbind must wait for that free (the memory goes while the device is still
 * bound), and a free that starts once unbind began must leave the registry
 * to unbind. (Before, the free held nothing unbind waits for.)
 *
 * MAP_HOST of a userfaultfd-backed range: the pin waits on the caller's own
 * fault handler for as long as it likes. Meanwhile other files create queue
 * pairs and map buffers, and the controller can be unbound: no module lock
 * is held while pinning. (Before, the admin mutex was held across the pin,
 * so everyone, unbind included, waited without bound.)
 */
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "kselftest_harness.h"
#include "nvme_io.h"

static uint64_t now_ms(void);

static sigjmp_buf fault_jmp;
static void on_fault(int sig) { (void)sig; siglongjmp(fault_jmp, 1); }

/* 1 when touching `p` faulted, 0 when the access went through. */
static int touch_faults(volatile uint32_t *p)
{
	volatile int faulted = 0;

	signal(SIGBUS, on_fault);
	signal(SIGSEGV, on_fault);
	if (!sigsetjmp(fault_jmp, 1))
		(void)*p;
	else
		faulted = 1;
	signal(SIGBUS, SIG_DFL);
	signal(SIGSEGV, SIG_DFL);
	return faulted;
}

/* Set the bound controller's debugfs knob `name` to `ms`. */
static int set_delay(const char *name, unsigned int ms)
{
	char path[128], v[16];
	int fd, n;

	snprintf(path, sizeof(path), "/sys/kernel/debug/gpunvme-%s/%s", gpunvme_bdf(), name);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return -errno;
	n = snprintf(v, sizeof(v), "%u", ms);
	n = write(fd, v, n) == n ? 0 : -errno;
	close(fd);
	return n;
}

static uint64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* In a child process, so the held mmap's mmap_lock does not stall the
 * parent: map, touch, and say what happened (0: the touch faulted, 1: it
 * went through, 2: mmap failed, which is also safe). */
static int map_and_touch(int fd, uint64_t offset, uint64_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset);

	if (p == MAP_FAILED)
		return 2;
	return touch_faults(p) ? 0 : 1;
}

/* After a rebind (every knob back at 0): a new file's pair is created,
 * its CQ mapped and readable, and destroyed. */
static void rebound_pair_works(struct __test_metadata *_metadata)
{
	struct qp q;
	int fd = gpunvme_open_bound();

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, qp_create(fd, 8, &q));
	EXPECT_EQ(0, touch_faults((volatile uint32_t *)q.cq));
	EXPECT_EQ(0, qp_destroy(&q));
	close(fd);
}

static void mmap_racing_unbind(struct __test_metadata *_metadata, int kind)
{
	const char *bdf = gpunvme_bdf();
	struct gpunvme_qpair_create c;
	int status = -1;

	int fd = gpunvme_open_bound();
	ASSERT_LE(0, fd);
	UAPI_INIT(c);
	c.depth = 8;
	ASSERT_EQ(0, ioctl(fd, GPUNVME_IOC_CREATE_QPAIR, &c));
	uint64_t offset = kind == 0 ? c.sq_offset : kind == 1 ? c.cq_offset : c.db_offset;
	uint64_t size = kind == 0 ? c.sq_size : kind == 1 ? c.cq_size : 4096;

	ASSERT_EQ(0, set_delay("mmap_delay_ms", 1500));
	pid_t child = fork();
	ASSERT_LE(0, child);
	if (child == 0)
		_exit(map_and_touch(fd, offset, size));
	usleep(300 * 1000);
	/* The child's mmap is held inside the module, past its checks. */
	ASSERT_EQ(0, waitpid(child, &status, WNOHANG));
	uint64_t t0 = now_ms();
	ASSERT_EQ(0, unbind_gpunvme(bdf));
	uint64_t t1 = now_ms();
	/* Unbind did not wait for the held mmap: the window was hit. */
	EXPECT_EQ(0, waitpid(child, &status, WNOHANG)) TH_LOG("the mmap returned before unbind finished");
	for (int i = 0; i < 500 && waitpid(child, &status, WNOHANG) == 0; i++)
		usleep(10 * 1000);
	if (status == -1) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
	}
	TH_LOG("unbind took %llu ms while the mmap was held; child status %#x",
	       (unsigned long long)(t1 - t0), status);
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_NE(1, WEXITSTATUS(status)) TH_LOG("a mapping made across unbind reached freed queue memory");
	EXPECT_NE(2, WEXITSTATUS(status)) TH_LOG("(mmap failing would be safe too, but the module sets the VMA up after its check)");
	close(fd);
	ASSERT_EQ(0, bind_gpunvme(bdf));
	/* The new binding's knob starts at 0; mmap and I/O work again. */
	rebound_pair_works(_metadata);
}

TEST(mmap_of_sq_racing_unbind_faults) { mmap_racing_unbind(_metadata, 0); }
TEST(mmap_of_cq_racing_unbind_faults) { mmap_racing_unbind(_metadata, 1); }
TEST(mmap_of_doorbell_racing_unbind_faults) { mmap_racing_unbind(_metadata, 2); }

/*
 * A destroyed pair's mappings stay usable until close (its memory is kept
 * as retired), and its pages are the old pair's, never a new pair's with
 * the same queue ID.
 */
TEST(mapping_of_destroyed_pair_keeps_its_own_memory)
{
	struct qp a, b;
	int fd = gpunvme_open_bound();

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, qp_create(fd, 8, &a));
	uint16_t qid = a.c.qid;
	volatile uint32_t *old_sq = (volatile uint32_t *)a.sq;
	old_sq[5] = 0x5a5a5a5a;
	/* Destroy without unmapping (the helper's destroy would unmap). */
	ASSERT_EQ(0, qpair_destroy(fd, qid));
	ASSERT_EQ(0, qp_create(fd, 8, &b));
	TH_LOG("old qid %u, new qid %u", qid, b.c.qid);
	EXPECT_EQ(0, touch_faults(old_sq));
	EXPECT_EQ(0x5a5a5a5a, old_sq[5]);
	EXPECT_NE(0x5a5a5a5a, ((volatile uint32_t *)b.sq)[5]);
	EXPECT_EQ(0, qp_destroy(&b));
	qp_unmap(&a);
	close(fd);
}

/* Times (ms since the test began) the processes of the test below report. */
struct free_race_times {
	volatile uint64_t a_freed, unbind_start, unbind_end, b_start, b_freed;
	volatile int unbind_status, b_status;
};

struct unmapper {
	struct qp *q;
	uint64_t start;
	volatile uint64_t *done;
};

static void *unmap_pair(void *arg)
{
	struct unmapper *u = arg;

	qp_unmap(u->q);
	*u->done = now_ms() - u->start;
	return NULL;
}

/* Wait for one byte on `fd` (at most 30 s); 0 when it came. */
static int wait_byte(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	return poll(&p, 1, 30000) == 1 && read(fd, &c, 1) == 1 ? 0 : -1;
}

/*
 * Pairs a and b of one file (so owner mode works too) are destroyed but
 * still mapped: a in this process, b only in a child (a fork copies none
 * of the module's mappings), so b's munmap does not wait for a's on this
 * process's mmap_lock. a's last munmap frees it and is held there for
 * hold_ms; unbind (another child) starts 300 ms in, b's last munmap 900 ms
 * in, while unbind waits.
 */
TEST(free_at_last_munmap_racing_unbind)
{
	const char *bdf = gpunvme_bdf();
	const unsigned int hold_ms = 2000;
	int go_unbind[2], go_b[2], b_ready[2];
	struct qp a, b;
	pthread_t ta;

	struct free_race_times *T = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, T);
	memset((void *)T, 0, sizeof(*T));
	ASSERT_EQ(0, pipe(go_unbind));
	ASSERT_EQ(0, pipe(go_b));
	ASSERT_EQ(0, pipe(b_ready));
	int fd = gpunvme_open_bound();
	ASSERT_LE(0, fd);
	long long base = qpairs_allocated();
	ASSERT_LE(0, base) TH_LOG("no debugfs qpairs_allocated");
	ASSERT_EQ(0, qp_create(fd, 8, &a));
	ASSERT_EQ(0, qp_create(fd, 8, &b));
	uint64_t start = now_ms();

	/* Forked before a's munmap holds this process's mmap_lock. */
	pid_t unbinder = fork();
	ASSERT_LE(0, unbinder);
	if (unbinder == 0) {
		if (wait_byte(go_unbind[0]))
			_exit(2);
		T->unbind_start = now_ms() - start;
		int r = unbind_gpunvme(bdf);
		T->unbind_end = now_ms() - start;
		_exit(r ? 1 : 0);
	}
	pid_t holder_b = fork();
	ASSERT_LE(0, holder_b);
	if (holder_b == 0) {
		void *bcq = mmap(NULL, b.c.cq_size, PROT_READ, MAP_SHARED, fd, b.c.cq_offset);
		if (bcq == MAP_FAILED)
			_exit(3);
		if (write(b_ready[1], "r", 1) != 1 || wait_byte(go_b[0]))
			_exit(4);
		T->b_start = now_ms() - start;
		munmap(bcq, b.c.cq_size);
		T->b_freed = now_ms() - start;
		_exit(0);
	}
	ASSERT_EQ(0, wait_byte(b_ready[0])) TH_LOG("the child could not map pair b");
	qp_unmap(&b);
	ASSERT_EQ(0, qpair_destroy(fd, a.c.qid));
	ASSERT_EQ(0, qpair_destroy(fd, b.c.qid));
	ASSERT_EQ(base + 2, qpairs_allocated()) TH_LOG("a destroyed pair that is still mapped was freed");
	ASSERT_EQ(0, set_delay("free_delay_ms", hold_ms));

	/* a's last munmap takes it from the registry and is held there. */
	struct unmapper ua = { .q = &a, .start = now_ms(), .done = &T->a_freed };
	ASSERT_EQ(0, pthread_create(&ta, NULL, unmap_pair, &ua));
	usleep(300 * 1000);
	EXPECT_EQ(0, T->a_freed) TH_LOG("the free was not held (free_delay_ms)");
	ASSERT_EQ(1, write(go_unbind[1], "u", 1));
	usleep(600 * 1000);
	ASSERT_EQ(1, write(go_b[1], "b", 1));
	int st_u = -1, st_b = -1;
	ASSERT_EQ(unbinder, waitpid(unbinder, &st_u, 0));
	ASSERT_EQ(holder_b, waitpid(holder_b, &st_b, 0));
	ASSERT_EQ(0, pthread_join(ta, NULL));
	TH_LOG("a's free held until %llu ms; unbind %llu..%llu ms; b's munmap %llu..%llu ms",
	       (unsigned long long)T->a_freed, (unsigned long long)T->unbind_start,
	       (unsigned long long)T->unbind_end, (unsigned long long)T->b_start,
	       (unsigned long long)T->b_freed);
	ASSERT_TRUE(WIFEXITED(st_u) && WIFEXITED(st_b));
	EXPECT_EQ(0, WEXITSTATUS(st_u)) TH_LOG("unbind failed");
	ASSERT_EQ(0, WEXITSTATUS(st_b)) TH_LOG("pair b's child failed (%d)", WEXITSTATUS(st_b));
	EXPECT_LE(hold_ms, T->a_freed) TH_LOG("the free was not held (free_delay_ms)");
	EXPECT_LE(T->a_freed, T->unbind_end)
		TH_LOG("unbind returned while the held free still ran: memory freed after the device was unbound");
	EXPECT_LT(T->b_start, T->a_freed) TH_LOG("b's munmap did not start while unbind waited");
	/* b's free saw unbind and left b to it, so the knob never held it. */
	EXPECT_GT(T->b_start + hold_ms, T->b_freed)
		TH_LOG("a free that started after unbind began took a pair from the registry");
	close(fd);
	munmap((void *)T, 4096);

	ASSERT_EQ(0, bind_gpunvme(bdf));
	EXPECT_EQ(base, qpairs_allocated()) TH_LOG("a pair was not freed across the race");
	rebound_pair_works(_metadata);
	EXPECT_EQ(base, qpairs_allocated());
}

struct pinner {
	int fd;
	void *addr;
	size_t len;
	int ret;
};

static void *do_map_host(void *arg)
{
	struct pinner *p = arg;
	struct gpunvme_map_host m;
	uint64_t dma[4];

	UAPI_INIT(m);
	m.addr = (uintptr_t)p->addr;
	m.len = p->len;
	m.dma_addrs = (uintptr_t)dma;
	p->ret = ioctl(p->fd, GPUNVME_IOC_MAP_HOST, &m) ? -errno : 0;
	return NULL;
}

/* In a child: `what` on a new file of the controller; exit 0 on success. */
static pid_t other_file_does(int what)
{
	pid_t child = fork();

	if (child)
		return child;
	int fd = gpunvme_open_bound();
	struct qp q;
	struct hostbuf hb;
	if (fd < 0)
		_exit(10);
	if (what == 0)
		_exit(qp_create(fd, 8, &q) ? 11 : qp_destroy(&q) ? 12 : 0);
	_exit(hostbuf_map(fd, 4096, &hb) ? 13 : 0);
}

/* Wait up to `ms` for `child`; its exit status, or -1 if still running. */
static int reap_within(pid_t child, int ms)
{
	int status;

	for (int i = 0; i < ms / 10; i++) {
		if (waitpid(child, &status, WNOHANG) == child)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
		usleep(10 * 1000);
	}
	return -1;
}

TEST(map_host_waiting_on_userfaultfd_holds_up_nobody)
{
	const size_t len = 4 * 4096;
	struct uffdio_api api = { .api = UFFD_API };
	struct pinner p = { 0 };
	pthread_t t;

	int uffd = syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (uffd < 0)
		SKIP(return, "userfaultfd: %s", strerror(errno));
	ASSERT_EQ(0, ioctl(uffd, UFFDIO_API, &api));
	void *region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, region);
	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)region, .len = len },
		.mode = UFFDIO_REGISTER_MODE_MISSING,
	};
	ASSERT_EQ(0, ioctl(uffd, UFFDIO_REGISTER, &reg));

	p.fd = gpunvme_open_bound();
	ASSERT_LE(0, p.fd);
	p.addr = region;
	p.len = len;
	ASSERT_EQ(0, pthread_create(&t, NULL, do_map_host, &p));
	/* The pin reached the first page and waits for this test to answer. */
	struct pollfd pf = { .fd = uffd, .events = POLLIN };
	ASSERT_EQ(1, poll(&pf, 1, 5000)) TH_LOG("MAP_HOST never faulted on the userfaultfd range");

	/* Another file creates a queue pair and maps a buffer meanwhile. */
	pid_t a = other_file_does(0);
	EXPECT_EQ(0, reap_within(a, 5000)) TH_LOG("CREATE_QPAIR waited for the stalled MAP_HOST");
	pid_t b = other_file_does(1);
	EXPECT_EQ(0, reap_within(b, 5000)) TH_LOG("MAP_HOST of another file waited for the stalled one");

	/* Answer every fault with zero pages: the stalled MAP_HOST completes. */
	for (int answered = 0; answered < 4;) {
		struct uffd_msg msg;
		if (poll(&pf, 1, 5000) != 1)
			break;
		if (read(uffd, &msg, sizeof(msg)) != sizeof(msg))
			continue;
		if (msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		struct uffdio_zeropage zp = {
			.range = { .start = msg.arg.pagefault.address & ~4095ull, .len = 4096 },
		};
		ioctl(uffd, UFFDIO_ZEROPAGE, &zp);
		answered++;
	}
	ASSERT_EQ(0, pthread_join(t, NULL));
	EXPECT_EQ(0, p.ret);
	if (a > 0 && reap_within(a, 10) == -1) {
		kill(a, SIGKILL);
		waitpid(a, NULL, 0);
	}
	if (b > 0 && reap_within(b, 10) == -1) {
		kill(b, SIGKILL);
		waitpid(b, NULL, 0);
	}
	close(p.fd);
	close(uffd);
	munmap(region, len);
}

TEST_HARNESS_MAIN
