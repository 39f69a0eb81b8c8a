// SPDX-License-Identifier: GPL-2.0-only
/*
 * Hot-unplug of the controller while it is in use, and hot-replug.
 *
 * Needs tests/vm/run.sh --hotplug: the controller sits behind a
 * pcie-root-port and the test asks the host for device_del / device_add
 * by printing "@@gpunvme HOTPLUG <seq> del|add" (tests/vm/qmp.py). QEMU's
 * device_del is a graceful unplug: pciehp's attention button, 5 s, then the
 * kernel removes the device, which calls gpunvme's unbind while every file
 * below is still open. What the test holds at that moment:
 *
 *  - file A (controller node): a shared (validated, relayed) queue pair
 *    with its SQ, CQ, doorbell cells and PRP pool mmapped, a MAP_HOST
 *    buffer, and I/O in flight: 7 reads accepted by the relay and started
 *    on the controller, 3 more waiting in the shadow SQ (flow control holds
 *    them: the file reaps nothing). The reads target the namespace named
 *    in $GPUNVME_DIR/hotplug-slow-nsid, whose disk QEMU throttles to 1
 *    KiB/s of reads (tests/vm/suite.sh, boot 9): the 7 take 28 s, so the
 *    controller cannot finish them before the unplug (~5 s): deterministic,
 *    not timing luck. (Unbind's Delete I/O SQ waits for them.) Without that file the
 *    reads go to namespace 1 and the in-flight check is skipped.
 *  - file B: the namespace node /dev/gpunvme<N>n1;
 *  - the GPU stand-in (gpunvme_standin on QEMU's edu) holding imports of
 *    A's doorbell cells, SQ, CQ and PRP pool (dma-bufs gpunvme exported).
 *
 * Then, each within a deadline: the device leaves sysfs and its nodes go;
 * A's and B's ioctls fail with ENODEV (UNMAP with ENOENT, as the UAPI
 * says: unbind released every mapping); every mapped page faults (SIGBUS);
 * the pinned buffer's RLIMIT_MEMLOCK charge is given back; the stand-in's
 * imports are revoked (its DMA calls fail with ENODEV, a new import of the
 * same dma-buf is refused); closing everything works. Then device_add,
 * bind again (opening the node while the PCI core may still be probing:
 * that open once met a half-initialised node), the data written before the
 * unplug reads back, and a fresh
 * write/verify with known patterns passes. Last, with every file closed the
 * module holds no references (refcnt 0), and on a kernel with kmemleak
 * (the debug kernel, booted with kmemleak=on slub_debug=P) two scans report
 * the one object the stand-in leaked on purpose (the positive control) and
 * no other whose allocation backtrace is in gpunvme or the stand-in; the
 * scenario runs in a child process, the kmemleak check in its parent
 * (kmemleak_check() says why). The runner's
 * "kernel log clean" result covers oopses, KASAN, lockdep and warnings.
 *
 * KTAP by hand, not the kselftest harness: the steps share open files and
 * mappings, and the harness runs each test in its own process.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "nvme_io.h"
#include "standin_env.h"

#define PLAN 18
#define DEPTH 8
#define BUF_PAGES 32
#define SEED_BEFORE 0x0bef0e11u
#define SEED_AFTER  0xaf7e4u
#define LBA_BEFORE 1024
#define LBA_AFTER 2048

/* Shared (MAP_SHARED) between the scenario process and its parent, which
 * runs the kmemleak check after the scenario process has exited. */
static struct tally {
	int n_result, n_failed;
	int done; /* the scenario ran to its end (no "Bail out!") */
} *T;
#define n_result (T->n_result)
#define n_failed (T->n_failed)

static void result(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void result(int ok, const char *fmt, ...)
{
	va_list ap;
	printf("%sok %d ", ok ? "" : "not ", ++n_result);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	n_failed += !ok;
}

static void skip(const char *name, const char *why)
{
	printf("ok %d %s # SKIP %s\n", ++n_result, name, why);
	fflush(stdout);
}

#define diag(...) do { printf("# " __VA_ARGS__); printf("\n"); fflush(stdout); } while (0)

/* A step everything after it needs: on failure, stop here. */
#define REQUIRE(cond, ...) do { \
	if (!(cond)) { \
		diag(__VA_ARGS__); \
		diag("errno %d (%s)", errno, strerror(errno)); \
		printf("Bail out! %s\n", #cond); \
		fflush(stdout); \
		exit(1); \
	} \
} while (0)

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static sigjmp_buf fault_jmp;
static void on_fault(int sig) { siglongjmp(fault_jmp, sig); }

/* SIGBUS when reading `p` faulted, SIGSEGV likewise, else 0. */
static int touch(volatile const uint32_t *p)
{
	volatile int sig = 0;
	signal(SIGBUS, on_fault);
	signal(SIGSEGV, on_fault);
	int s = sigsetjmp(fault_jmp, 1);
	if (!s)
		(void)*p;
	else
		sig = s;
	signal(SIGBUS, SIG_DFL);
	signal(SIGSEGV, SIG_DFL);
	return sig;
}

static int device_present(void)
{
	char path[256];
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", gpunvme_bdf());
	return access(path, F_OK) == 0;
}

/* Ask the host (tests/vm/qmp.py) for "del" or "add", once. */
static void request(const char *op)
{
	static int seq;
	printf("@@gpunvme HOTPLUG %d %s\n", ++seq, op);
	fflush(stdout);
}

/* Ask for "del" or "add"; wait (up to ms) until sysfs agrees. */
static int hotplug(const char *op, int want_present, int ms, uint64_t *took)
{
	uint64_t t0 = now_ms();
	request(op);
	while (device_present() != want_present && now_ms() - t0 < (uint64_t)ms)
		usleep(20000);
	*took = now_ms() - t0;
	return device_present() == want_present;
}

/* READ or WRITE of npages pages of `b` from page `page`, at `lba`. */
static int rw(struct qp *q, uint8_t opc, uint32_t nsid, uint32_t lbs, uint64_t lba,
	      struct hostbuf *b, uint32_t page, uint32_t npages)
{
	uint64_t prp2 = qp_prp2(q, &b->dma[page], npages, 0, NULL, 0);
	return qp_sync(q, rw_cmd(opc, nsid, lba, npages * 4096 / lbs, b->dma[page], prp2));
}

/* Completions in the CQ from `head` on with the current phase. */
static unsigned int cqes_posted(struct qp *q)
{
	unsigned int n = 0, i = q->head, phase = q->phase;
	while (n < q->c.depth && (q->cq[i].status & 1) == phase) {
		n++;
		if (++i == q->c.depth) {
			i = 0;
			phase ^= 1;
		}
	}
	return n;
}

/* cqes_posted() into *seen, unless reading the CQ faults: then the signal. */
static int poll_cq(struct qp *q, unsigned int *seen)
{
	volatile int sig = 0;
	signal(SIGBUS, on_fault);
	signal(SIGSEGV, on_fault);
	int s = sigsetjmp(fault_jmp, 1);
	if (!s)
		*seen = cqes_posted(q);
	else
		sig = s;
	signal(SIGBUS, SIG_DFL);
	signal(SIGSEGV, SIG_DFL);
	return sig;
}

/* What `ioctl(fd, cmd, arg)` failed with (0: it worked). */
static int ioctl_err(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) ? errno : 0;
}

#define EXPECT_ERR(want, got, what) do { \
	int g_ = (got); \
	if (g_ != (want)) { \
		diag("%s: %s, expected %s", what, g_ ? strerror(g_) : "success", strerror(want)); \
		ok = 0; \
	} \
} while (0)

/* Every ioctl of a file whose controller is gone: ENODEV. */
static int all_enodev(int fd, const char *who, uint16_t qid, int dmabuf)
{
	int ok = 1;
	char name[64];
	struct gpunvme_info info;
	struct gpunvme_qpair_create c;
	struct gpunvme_qpair_destroy d;
	struct gpunvme_map_host m;
	struct gpunvme_map_dmabuf md;
	struct gpunvme_export e;
	struct gpunvme_owner o;
	static uint8_t page[4096] __attribute__((aligned(4096)));
	uint64_t addrs[1];

	UAPI_INIT(info);
	snprintf(name, sizeof(name), "%s GET_INFO", who);
	EXPECT_ERR(ENODEV, ioctl_err(fd, GPUNVME_IOC_GET_INFO, &info), name);
	UAPI_INIT(c);
	c.depth = DEPTH;
	snprintf(name, sizeof(name), "%s CREATE_QPAIR", who);
	EXPECT_ERR(ENODEV, ioctl_err(fd, GPUNVME_IOC_CREATE_QPAIR, &c), name);
	UAPI_INIT(m);
	m.addr = (uintptr_t)page;
	m.len = 4096;
	m.dma_addrs = (uintptr_t)addrs;
	snprintf(name, sizeof(name), "%s MAP_HOST", who);
	EXPECT_ERR(ENODEV, ioctl_err(fd, GPUNVME_IOC_MAP_HOST, &m), name);
	UAPI_INIT(o);
	snprintf(name, sizeof(name), "%s CLAIM_OWNER", who);
	EXPECT_ERR(ENODEV, ioctl_err(fd, GPUNVME_IOC_CLAIM_OWNER, &o), name);
	if (qid) {
		UAPI_INIT(d);
		d.qid = qid;
		snprintf(name, sizeof(name), "%s DESTROY_QPAIR", who);
		EXPECT_ERR(ENODEV, ioctl_err(fd, GPUNVME_IOC_DESTROY_QPAIR, &d), name);
		UAPI_INIT(e);
		e.qid = qid;
		e.kind = GPUNVME_EXPORT_CQ;
		e.flags = O_CLOEXEC | O_RDWR;
		snprintf(name, sizeof(name), "%s EXPORT", who);
		EXPECT_ERR(ENODEV, ioctl_err(fd, GPUNVME_IOC_EXPORT, &e), name);
	}
	if (dmabuf >= 0) {
		UAPI_INIT(md);
		md.fd = dmabuf;
		md.max_pages = 1;
		md.dma_addrs = (uintptr_t)addrs;
		snprintf(name, sizeof(name), "%s MAP_DMABUF", who);
		EXPECT_ERR(ENODEV, ioctl_err(fd, GPUNVME_IOC_MAP_DMABUF, &md), name);
	}
	return ok;
}

/* gpunvme's module reference count: open files and live dma-bufs each hold
 * one. Polled for up to 2 s: a last fput may be deferred. */
static long long module_refs(void)
{
	long long refs = read_number("/sys/module/gpunvme/refcnt", -1);
	for (int i = 0; i < 100 && refs != 0; i++) {
		usleep(20000);
		refs = read_number("/sys/module/gpunvme/refcnt", -1);
	}
	return refs;
}

/*
 * kmemleak, with a positive control. Why a control: on the debug kernel
 * (7.3, SLUB with per-CPU sheaves) kmemleak reported no leak at all, not
 * even objects leaked on purpose by the stand-in or by /tmp copies of
 * gpunvme, after any number of scans. Cause: SLUB's allocation fast path
 * takes an object from the CPU's sheaf (objects[--size]) and leaves the
 * pointer in the sheaf's array; the sheaf is itself a kmalloc object that
 * kmemleak tracks and scans whole, so that stale slot makes every object
 * allocated from a sheaf look referenced. slub_debug=P (tests/vm/suite.sh,
 * boot 9, debug kernel) gives every cache debug flags, hence no sheaves,
 * and poisons freed objects; with it the same deliberate leaks were all
 * reported. On plain boots slub_debug=U (debug flags, so no sheaves, but no
 * poisoning) was enough too, so the sheaves are the cause; P is used as it
 * also keeps SLUB's free pointers and old contents, stale pointers both,
 * out of allocated objects.
 *
 * So this check proves itself each run:
 *  - a child that exits has the stand-in leak one object on purpose
 *    (STANDIN_IOC_KMEMLEAK_CONTROL: 5000 bytes from the Rust function
 *    kmemleak_control, allocated with KVec like gpunvme's allocations;
 *    above a page, so KFENCE never samples it);
 *  - the scenario runs in another child process, which has exited before
 *    the first scan: kmemleak scans the whole kernel stack of every live
 *    task, and stale copies of a pointer there would hide a leak (not seen
 *    here, but documented as a source of false negatives);
 *  - this process, which never called gpunvme or the stand-in, scans twice,
 *    6 s apart (the first scan only records a new object's checksum; the
 *    second reports it if it is unreferenced, unchanged and 5 s old), and
 *    reads the report.
 *
 * The control must be reported exactly once, with kmemleak_control
 * [gpunvme_standin] in its backtrace, or kmemleak's silence proves nothing:
 * then the control result is "not ok" and the leak result a SKIP that says
 * why. With the control found, every other entry with a frame in gpunvme or
 * the stand-in is a leak and fails the check.
 */
static const char *const KMEMLEAK = "/sys/kernel/debug/kmemleak";
static const char *const KM_CONTROL = "kmemleak: the stand-in's deliberate leak (positive control) is reported";
static const char *const KM_LEAK = "kmemleak: no leak from gpunvme or the stand-in (the control excepted)";

/* Does /proc/cmdline contain `word`? */
static int cmdline_has(const char *word)
{
	char line[1024] = "";
	FILE *f = fopen("/proc/cmdline", "r");
	if (f) {
		if (!fgets(line, sizeof(line), f))
			line[0] = 0;
		fclose(f);
	}
	return strstr(line, word) != NULL;
}

/* Why kmemleak cannot be used in this boot, or NULL. */
static const char *kmemleak_unusable(void)
{
	if (access(KMEMLEAK, F_OK))
		return "no /sys/kernel/debug/kmemleak (kernel without DEBUG_KMEMLEAK)";
	return NULL;
}

/* In a child that exits, have the stand-in leak one object: the control.
 * Returns the child's pid (kmemleak's report names it), or -errno. */
static int kmemleak_leak_control(void)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (!pid) {
		int sd = standin_open();
		if (sd < 0)
			_exit(10);
		struct standin_kmemleak_control c = { .tag = (uint32_t)getpid() };
		int r = ioctl(sd, STANDIN_IOC_KMEMLEAK_CONTROL, &c);
		close(sd);
		_exit(r ? 11 : 0);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return -errno;
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		return WIFEXITED(st) && WEXITSTATUS(st) == 10 ? -ENODEV : -EIO;
	return pid;
}

static void kmemleak_check(int control_pid)
{
	const char *why = kmemleak_unusable();
	if (!why && control_pid < 0)
		why = control_pid == -ENODEV ? "the stand-in did not load or bind; no positive control"
					     : "the stand-in's KMEMLEAK_CONTROL ioctl failed; no positive control";
	if (why) {
		skip(KM_CONTROL, why);
		skip(KM_LEAK, why);
		return;
	}
	/* Two scans: a scan reports an object only if it was unreferenced and
	 * at least 5 s old and its checksum did not change since the previous
	 * scan (the first one sees every new object "change"). */
	int fd = open(KMEMLEAK, O_RDWR), e = errno;
	for (int i = 0; i < 2 && fd >= 0; i++) {
		uint64_t t0 = now_ms();
		if (write(fd, "scan", 4) != 4) {
			e = errno;
			close(fd);
			fd = -1;
			break;
		}
		diag("kmemleak scan %d took %llu ms", i + 1, (unsigned long long)(now_ms() - t0));
		if (!i)
			sleep(6);
	}
	if (fd < 0) {
		/* EPERM: kmemleak is off. The debug kernel has it off unless
		 * the command line says kmemleak=on; on after all, it disabled
		 * itself (an error, in the log). */
		if (e == EPERM && !cmdline_has("kmemleak=on")) {
			skip(KM_CONTROL, "kmemleak is off (boot with kmemleak=on)");
			skip(KM_LEAK, "kmemleak is off (boot with kmemleak=on)");
			return;
		}
		klog_show("kmemleak:", 5);
		diag("kmemleak scan: %s", strerror(e));
		result(0, "%s", KM_CONTROL);
		skip(KM_LEAK, e == EPERM ? "kmemleak disabled itself (see its log lines)" : "kmemleak could not scan");
		return;
	}
	close(fd);
	FILE *f = fopen(KMEMLEAK, "r");
	if (!f) {
		result(0, "%s", KM_CONTROL);
		skip(KM_LEAK, strerror(errno));
		return;
	}
	int total = 0, controls = 0, ours = 0;
	int in_ours = 0, is_control = 0;
	char line[512], entry[4096] = "";
	size_t used = 0;
	for (;;) {
		char *got = fgets(line, sizeof(line), f);
		if (!got || !strncmp(line, "unreferenced object", 19)) {
			if (is_control) {
				diag("the control (leaked by pid %d):", control_pid);
				printf("%s", entry);
				controls++;
			} else if (in_ours) {
				diag("a leak from gpunvme or the stand-in:");
				printf("%s", entry);
				ours++;
			}
			if (!got)
				break;
			total++;
			in_ours = is_control = 0;
			used = 0;
			entry[0] = 0;
		}
		if (strstr(line, "[gpunvme]") || strstr(line, "[gpunvme_standin]"))
			in_ours = 1;
		if (strstr(line, "kmemleak_control") && strstr(line, "[gpunvme_standin]"))
			is_control = 1;
		if (used + strlen(line) + 3 < sizeof(entry))
			used += snprintf(entry + used, sizeof(entry) - used, "#  %s", line);
	}
	fclose(f);
	klog_show("kmemleak:", 3);
	diag("kmemleak: %d unreferenced object(s) reported: %d the control, %d from gpunvme or the stand-in, %d elsewhere",
	     total, controls, ours, total - controls - ours);
	result(controls == 1, "%s", KM_CONTROL);
	if (controls != 1) {
		diag("the control was reported %d times, expected once", controls);
		if (!controls && !cmdline_has("slub_debug"))
			diag("no slub_debug on the kernel command line: SLUB's per-CPU sheaves keep "
			     "stale pointers to allocated objects and hide leaks (boot with slub_debug=P)");
		skip(KM_LEAK, controls ? "the control was reported more than once (more than one leaked?)"
				       : "kmemleak did not report the control, so it would miss a gpunvme leak too");
		return;
	}
	result(ours == 0, "%s", KM_LEAK);
}

/* Everything but the kmemleak check, in a child process (see above). */
static void scenario(void)
{
	struct gpunvme_info info;
	struct hostbuf buf;
	struct qp q;
	char ns_path[64], ctrl_path[32];
	uint64_t took;
	int index = -1;

	char slow_path[256];
	snprintf(slow_path, sizeof(slow_path), "%s/hotplug-slow-nsid", env_or("GPUNVME_DIR", "/opt/gpunvme"));
	uint32_t slow_nsid = (uint32_t)read_number(slow_path, 0);

	/* ---- the files that will be open at the unplug ---------------------- */
	int a = gpunvme_open_bound();
	REQUIRE(a >= 0, "gpunvme on %s", gpunvme_bdf());
	REQUIRE(!get_info(a, &info), "GET_INFO");
	int probe = gpunvme_open_ctrl_node(gpunvme_bdf(), &index);
	REQUIRE(probe >= 0, "controller node of %s", gpunvme_bdf());
	close(probe);
	snprintf(ctrl_path, sizeof(ctrl_path), "/dev/gpunvme%d", index);
	const uint32_t nsid = info.ns[0].nsid, lbs = info.ns[0].lba_size;
	uint32_t slow_lbs = 0;
	for (uint32_t i = 0; i < info.num_namespaces; i++)
		if (info.ns[i].nsid == slow_nsid)
			slow_lbs = info.ns[i].lba_size;
	diag("%s: %s, %u namespace(s); throttled namespace %u%s", ctrl_path, info.bdf,
	     info.num_namespaces, slow_nsid, slow_lbs ? "" : " (absent)");
	REQUIRE(!hostbuf_map(a, BUF_PAGES * 4096, &buf), "MAP_HOST");
	REQUIRE(!qp_create_flags(a, DEPTH, 0, &q), "shared CREATE_QPAIR");
	REQUIRE(q.prp, "a shared pair has a PRP pool");

	/* Data that must survive the unplug: 4 pages at LBA_BEFORE. */
	pattern_fill(buf.p, 4 * 4096, SEED_BEFORE, LBA_BEFORE, lbs);
	int st = rw(&q, OPC_WRITE, nsid, lbs, LBA_BEFORE, &buf, 0, 4);
	memset(buf.p + 4 * 4096, 0, 4 * 4096);
	int st2 = st ? st : rw(&q, OPC_READ, nsid, lbs, LBA_BEFORE, &buf, 4, 4);
	long bad = pattern_check(buf.p + 4 * 4096, 4 * 4096, SEED_BEFORE, LBA_BEFORE, lbs);
	result(!st && !st2 && bad < 0, "setup: the shared pair writes and reads back 16 KiB (PRP list in the pool)");
	if (st || st2 || bad >= 0)
		diag("write status %#x, read status %#x, first bad byte %ld", st, st2, bad);

	int sd = standin_open();
	REQUIRE(sd >= 0, "gpunvme_standin on %s: %s", edu_bdf(), strerror(-sd));
	static const uint16_t kinds[] = { GPUNVME_EXPORT_DOORBELL, GPUNVME_EXPORT_SQ,
					  GPUNVME_EXPORT_CQ, GPUNVME_EXPORT_PRP_POOL };
	static const char *const kind_name[] = { "doorbell cells", "SQ", "CQ", "PRP pool" };
	int bufs[4];
	struct standin_import imp[4];
	int imports_ok = 1;
	for (int i = 0; i < 4; i++) {
		REQUIRE(!export_fd(a, q.c.qid, kinds[i], &bufs[i]), "EXPORT %s", kind_name[i]);
		int r = standin_import(sd, bufs[i], &imp[i]);
		REQUIRE(!r, "stand-in import of the %s: %s", kind_name[i], strerror(-r));
		uint32_t w[4];
		if ((r = standin_read(sd, imp[i].handle, 0, w, sizeof(w)))) {
			diag("stand-in read of the %s: %s", kind_name[i], strerror(-r));
			imports_ok = 0;
		}
	}
	result(imports_ok, "setup: the stand-in imports the pair's doorbell cells, SQ, CQ and PRP pool and reads them");

	REQUIRE(!gpunvme_ns_node_path(1, ns_path, sizeof(ns_path)), "namespace node path");
	int b = open(ns_path, O_RDWR | O_CLOEXEC);
	REQUIRE(b >= 0, "open %s", ns_path);
	struct gpunvme_info ninfo;
	REQUIRE(!get_info(b, &ninfo) && ninfo.node_nsid == 1, "GET_INFO on %s", ns_path);

	/* I/O in flight: 7 reads the relay takes and starts, 3 it must hold
	 * back (the shadow CQ has room for no more completions). */
	uint32_t io_nsid = slow_lbs ? slow_nsid : nsid, io_lbs = slow_lbs ? slow_lbs : lbs;
	long long acc0 = qp_counter(q.c.qid, "sqes_accepted");
	long long mir0 = qp_counter(q.c.qid, "cqes_mirrored");
	memset(buf.p + 8 * 4096, 0xee, 10 * 4096);
	for (int i = 0; i < DEPTH - 1; i++)
		qp_push(&q, rw_cmd(OPC_READ, io_nsid, i * 8, 4096 / io_lbs, buf.dma[8 + i], 0));
	qp_ring(&q);
	long long acc = qp_counter_settles(q.c.qid, "sqes_accepted", acc0 + DEPTH - 1);
	for (int i = 0; i < 3; i++)
		qp_push(&q, rw_cmd(OPC_READ, io_nsid, 64 + i * 8, 4096 / io_lbs, buf.dma[15 + i], 0));
	qp_ring(&q);
	usleep(300000);
	acc = qp_counter(q.c.qid, "sqes_accepted");
	long long mir = qp_counter(q.c.qid, "cqes_mirrored");
	unsigned int seen = cqes_posted(&q);
	diag("before the unplug: relay accepted %lld, mirrored %lld of this batch; the file sees %u completions",
	     acc - acc0, mir - mir0, seen);
	int held = acc - acc0 == DEPTH - 1 && mir - mir0 < DEPTH - 1;
	result(held, "setup: %d reads started on the controller, 3 more held in the shadow SQ", DEPTH - 1);

	long locked = vm_locked_kb();
	diag("VmLck before the unplug: %ld kB", locked);
	int klog_revoked = klog_count("revoked by its exporter", NULL);
	int klog_held = klog_count("still held at the revoke's deadline", NULL);

	/* ---- unplug --------------------------------------------------------- */
	uint64_t t0 = now_ms();
	request("del");
	/* Watch the CQ until unbind removes the mapping: the completions seen
	 * until then are all the file ever gets. */
	unsigned int last_seen = seen;
	int sig = 0;
	while (!(sig = poll_cq(&q, &last_seen)) && now_ms() - t0 < 60000)
		usleep(5000);
	uint64_t zapped = now_ms() - t0;
	while (device_present() && now_ms() - t0 < 60000)
		usleep(20000);
	took = now_ms() - t0;
	result(!device_present() && sig == SIGBUS, "unplug: device_del removes the controller within 60 s");
	diag("mappings gone after %llu ms, device gone from sysfs after %llu ms",
	     (unsigned long long)zapped, (unsigned long long)took);
	REQUIRE(!device_present(), "the controller never left sysfs (see the host's 'hotplug:' lines)");

	if (slow_lbs)
		result(last_seen < DEPTH - 1, "unplug: reads were still in flight when unbind began (%u of %d completed)",
		       last_seen, DEPTH - 1);
	else
		skip("unplug: reads were still in flight when unbind began",
		     "no throttled namespace (hotplug-slow-nsid): timing not guaranteed");

	int nodes_gone = access(ctrl_path, F_OK) && access(ns_path, F_OK);
	result(nodes_gone, "unplug: %s and %s are removed", ctrl_path, ns_path);

	int ok_a = all_enodev(a, "controller file", q.c.qid, bufs[0]);
	struct gpunvme_unmap u;
	UAPI_INIT(u);
	u.handle = buf.handle;
	int e = ioctl_err(a, GPUNVME_IOC_UNMAP, &u);
	if (e != ENOENT) {
		diag("controller file UNMAP: %s, expected ENOENT (unbind released every mapping)", e ? strerror(e) : "success");
		ok_a = 0;
	}
	void *m = mmap(NULL, q.c.cq_size, PROT_READ, MAP_SHARED, a, q.c.cq_offset);
	if (m != MAP_FAILED || errno != ENODEV) {
		diag("controller file mmap of the CQ: %s, expected ENODEV", m != MAP_FAILED ? "success" : strerror(errno));
		ok_a = 0;
	}
	result(ok_a, "unplug: the controller file's ioctls and mmap fail with ENODEV (UNMAP: ENOENT)");
	result(all_enodev(b, "namespace file", 0, -1), "unplug: the namespace file's ioctls fail with ENODEV");

	int faults = 0;
	volatile const uint32_t *maps[4] = { (volatile uint32_t *)q.db, (volatile uint32_t *)q.sq,
					     (volatile uint32_t *)q.cq, (volatile uint32_t *)q.prp };
	static const char *const map_name[] = { "doorbell cells", "SQ", "CQ", "PRP pool" };
	for (int i = 0; i < 4; i++) {
		int s = touch(maps[i]);
		if (s == SIGBUS)
			faults++;
		else
			diag("touching the mapped %s: %s", map_name[i], s ? strsignal(s) : "no fault");
	}
	result(faults == 4, "unplug: every mapping of the pair faults with SIGBUS (doorbell cells, SQ, CQ, PRP pool)");

	long unlocked = vm_locked_kb();
	diag("VmLck after the unplug: %ld kB", unlocked);
	result(locked >= BUF_PAGES * 4 && unlocked == 0,
	       "unplug: the MAP_HOST buffer is unpinned (RLIMIT_MEMLOCK charge back to 0)");

	int ok_s = 1;
	uint32_t w[4];
	for (int i = 0; i < 4; i++) {
		int r = standin_read(sd, imp[i].handle, 0, w, sizeof(w));
		if (r != -ENODEV) {
			diag("stand-in read of the revoked %s: %s", kind_name[i], r ? strerror(-r) : "success");
			ok_s = 0;
		}
		struct standin_import again;
		r = standin_import(sd, bufs[i], &again);
		if (!r || r == -ENOENT) {
			diag("a new import of the %s dma-buf: %s, expected a refusal", kind_name[i], r ? strerror(-r) : "success");
			ok_s = 0;
		}
	}
	if (standin_write32(sd, imp[0].handle, 0, 1) != -ENODEV) {
		diag("stand-in WRITE32 to the revoked doorbell cells did not fail with ENODEV");
		ok_s = 0;
	}
	int revoked = klog_count("revoked by its exporter", NULL) - klog_revoked;
	int kept = klog_count("still held at the revoke's deadline", NULL) - klog_held;
	diag("kernel log: %d import(s) revoked by the exporter, %d held past the revoke", revoked, kept);
	if (revoked != 4 || kept)
		ok_s = 0;
	result(ok_s, "unplug: the stand-in's 4 imports are revoked: DMA calls fail with ENODEV, re-import refused");

	int ok_c = 1;
	for (int i = 0; i < 4; i++) {
		ok_c &= standin_release(sd, imp[i].handle) == 0;
		ok_c &= close(bufs[i]) == 0;
	}
	qp_unmap(&q);
	ok_c &= close(b) == 0;
	ok_c &= close(a) == 0;
	ok_c &= close(sd) == 0;
	standin_restore();
	munmap(buf.p, buf.len);
	free(buf.dma);
	long long refs = module_refs();
	diag("gpunvme module refcnt with every file closed: %lld", refs);
	result(ok_c && refs == 0, "unplug: releasing the imports and closing every file works; the module holds no references");

	/* ---- replug ----------------------------------------------------------- */
	int back = hotplug("add", 1, 60000, &took);
	diag("device back in sysfs after %llu ms", (unsigned long long)took);
	REQUIRE(back, "the controller did not come back (see the host's 'hotplug:' lines)");
	/* The sysfs directory appears before the PCI core has finished adding
	 * the device (a probe before that binds nothing): retry, up to 60 s. */
	int r = bind_gpunvme(gpunvme_bdf());
	for (uint64_t t1 = now_ms(); r == -ENODEV && now_ms() - t1 < 60000; r = bind_gpunvme(gpunvme_bdf()))
		usleep(100000);
	/* The driver link appears when probe starts: give probe (which makes
	 * the node; it took 10 s on a loaded host under TCG with the debug
	 * kernel) up to 60 s to finish, as the PCI core may be running it. */
	int a2 = r ? -1 : gpunvme_open_ctrl_node(gpunvme_bdf(), NULL);
	for (uint64_t t1 = now_ms(); !r && a2 < 0 && now_ms() - t1 < 60000; a2 = gpunvme_open_ctrl_node(gpunvme_bdf(), NULL))
		usleep(100000);
	struct gpunvme_info info2;
	int ok_b = a2 >= 0 && !get_info(a2, &info2) && !strcmp(info2.serial, info.serial) &&
		   info2.num_namespaces >= 1 && info2.ns[0].nsid == nsid;
	result(ok_b, "replug: device_add brings the controller back and gpunvme binds it again");
	REQUIRE(ok_b, "bind after replug: %s", r ? strerror(-r) : a2 < 0 ? "no controller node" : "GET_INFO differs");

	struct hostbuf b2;
	struct qp q2;
	REQUIRE(!hostbuf_map(a2, BUF_PAGES * 4096, &b2), "MAP_HOST after replug");
	REQUIRE(!qp_create_flags(a2, DEPTH, 0, &q2), "CREATE_QPAIR after replug");
	memset(b2.p, 0, 4 * 4096);
	st = rw(&q2, OPC_READ, nsid, lbs, LBA_BEFORE, &b2, 0, 4);
	bad = pattern_check(b2.p, 4 * 4096, SEED_BEFORE, LBA_BEFORE, lbs);
	result(!st && bad < 0, "replug: the 16 KiB written before the unplug read back intact");
	if (st || bad >= 0)
		diag("read status %#x, first bad byte %ld", st, bad);

	/* 8 writes of 64 KiB (PRP lists), then 8 reads into other pages. */
	int ok_w = 1;
	const uint32_t chunk = 16, lba_per_chunk = chunk * 4096 / lbs;
	for (int i = 0; i < 8 && ok_w; i++) {
		pattern_fill(b2.p, chunk * 4096, SEED_AFTER, LBA_AFTER + i * lba_per_chunk, lbs);
		if ((st = rw(&q2, OPC_WRITE, nsid, lbs, LBA_AFTER + i * lba_per_chunk, &b2, 0, chunk))) {
			diag("write %d: status %#x", i, st);
			ok_w = 0;
		}
	}
	for (int i = 0; i < 8 && ok_w; i++) {
		memset(b2.p + chunk * 4096, 0x5a, chunk * 4096);
		if ((st = rw(&q2, OPC_READ, nsid, lbs, LBA_AFTER + i * lba_per_chunk, &b2, chunk, chunk))) {
			diag("read %d: status %#x", i, st);
			ok_w = 0;
		} else if ((bad = pattern_check(b2.p + chunk * 4096, chunk * 4096, SEED_AFTER,
						 LBA_AFTER + i * lba_per_chunk, lbs)) >= 0) {
			diag("read %d: first bad byte %ld", i, bad);
			ok_w = 0;
		}
	}
	result(ok_w, "replug: write/verify of 512 KiB in 64 KiB commands (every byte checked)");
	int ok_d = !qp_destroy(&q2) && !hostbuf_unmap(a2, &b2) && !close(a2);
	refs = module_refs();
	diag("gpunvme module refcnt with every file closed: %lld", refs);
	result(ok_d && refs == 0, "replug: teardown works and the module holds no references (refcnt 0)");
	T->done = 1;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("TAP version 13\n1..%d\n", PLAN);
	T = mmap(NULL, sizeof(*T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	REQUIRE(T != MAP_FAILED, "mmap of the shared tally");
	if (strcmp(env_or("GPUNVME_HOTPLUG", "0"), "1")) {
		/* Counted as skipped: the runner booted without --hotplug. */
		for (int i = 0; i < PLAN; i++)
			skip("hotplug", "needs tests/vm/run.sh --hotplug");
		return 4;
	}

	/* kmemleak: forget what was reported before this test, then the
	 * positive control (only where kmemleak can report it). */
	int control = -ENOENT;
	if (!kmemleak_unusable()) {
		sysfs_write(KMEMLEAK, "clear");
		control = kmemleak_leak_control();
		if (control < 0)
			diag("kmemleak positive control: %s", strerror(-control));
		else
			diag("kmemleak positive control: pid %d had the stand-in leak one object", control);
	}

	fflush(stdout);
	pid_t pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (!pid) {
		scenario();
		fflush(stdout);
		_exit(0);
	}
	int st;
	REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
	if (!T->done) {
		/* It printed "Bail out!" (REQUIRE) or died: the runner counts
		 * the missing results as failures. */
		if (WIFSIGNALED(st))
			diag("the scenario process died of signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
		return 1;
	}

	kmemleak_check(control);

	if (n_result != PLAN)
		diag("planned %d results, printed %d", PLAN, n_result);
	printf("# %d passed, %d failed\n", n_result - n_failed, n_failed);
	return n_failed ? 1 : 0;
}
