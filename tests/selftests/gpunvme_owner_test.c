// SPDX-License-Identifier: GPL-2.0-only
/*
 * Who may claim owner mode (GPUNVME_IOC_CLAIM_OWNER), in whatever boot
 * this runs. The test works out what the module must answer from the
 * machine itself, never from the module:
 *  - the IOMMU mode: the type of the controller's IOMMU group in sysfs
 *    (DMA = strict, DMA-FQ = lazy, identity = passthrough, none);
 *  - lockdown: /sys/kernel/security/lockdown (securityfs is mounted here
 *    if it is not yet);
 *  - the waiver: module parameter allow_unsafe_no_iommu (sysfs), or
 *    GPUNVME_EXPECT_WAIVER=1 from the wrapper that loaded the module with it.
 * Then: a claim is refused with EPERM under lockdown (the lockdown LSM logs
 * it) and, without the waiver, unless the domain translates (the module's
 * log line names the mode); with the waiver it works and taints the kernel
 * (a taint bit beyond the out-of-tree/unsigned ones, compared with
 * GPUNVME_TAINT_BEFORE when the wrapper recorded it before loading the
 * module); GET_INFO's modes says the same beforehand; shared mode works in
 * every case; an unprivileged caller and a namespace node never claim.
 *
 * The suite runs it in the default boot (strict: the claim works), in an
 * iommu=pt boot (refused), again there with the module reloaded with
 * allow_unsafe_no_iommu=1 (gpunvme_waiver_test.sh: works, tainted) and
 * last under lockdown (gpunvme_lockdown_test.sh: refused).
 */
#include <strings.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "kselftest_harness.h"
#include "vmenv.h"
#include "nvme_io.h"

#define TAINT_OOT_MODULE      (1ull << 12)
#define TAINT_UNSIGNED_MODULE (1ull << 13)

/* The lockdown level ("none", "integrity", "confidentiality"), or "" when
 * the kernel has no lockdown LSM. */
static void lockdown_level(char *out, size_t len)
{
	char buf[128];
	out[0] = 0;
	if (access("/sys/kernel/security/lockdown", F_OK))
		mount("none", "/sys/kernel/security", "securityfs", 0, NULL);
	FILE *f = fopen("/sys/kernel/security/lockdown", "r");
	if (!f)
		return;
	if (fgets(buf, sizeof(buf), f)) {
		char *a = strchr(buf, '['), *b = a ? strchr(a, ']') : NULL;
		if (a && b) {
			*b = 0;
			snprintf(out, len, "%s", a + 1);
		}
	}
	fclose(f);
}

static int waiver_on(void)
{
	const char *e = getenv("GPUNVME_EXPECT_WAIVER");
	char buf[16] = "";
	if (e && *e)
		return !strcmp(e, "1");
	FILE *f = fopen("/sys/module/gpunvme/parameters/allow_unsafe_no_iommu", "r");
	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	return buf[0] == 'Y' || buf[0] == 'y' || buf[0] == '1';
}

static unsigned long long tainted(void)
{
	return (unsigned long long)read_number("/proc/sys/kernel/tainted", 0);
}

/* Words a log line naming this IOMMU mode contains (any one of them). */
static const char *const *mode_words(uint32_t mode)
{
	static const char *const none[] = { "no iommu", "none", "no translation", NULL };
	static const char *const ident[] = { "identity", "passthrough", "pass-through", "iommu=pt", NULL };
	static const char *const other[] = { "blocked", "unmanaged", "unknown", "other", NULL };
	static const char *const nothing[] = { NULL };
	switch (mode) {
	case GPUNVME_IOMMU_NONE: return none;
	case GPUNVME_IOMMU_IDENTITY: return ident;
	case GPUNVME_IOMMU_OTHER: return other;
	default: return nothing;
	}
}

/* Kernel log lines mentioning gpunvme and (case-insensitively) one of `words`. */
static int klog_mode_lines(const char *const *words)
{
	int len = klogctl(10, NULL, 0), count = 0;
	char *buf = len > 0 ? malloc(len + 1) : NULL;
	if (!buf)
		return -1;
	int n = klogctl(3, buf, len);
	buf[n > 0 ? n : 0] = 0;
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
		if (!strstr(line, "gpunvme"))
			continue;
		for (int i = 0; words[i]; i++)
			if (strcasestr(line, words[i])) {
				count++;
				break;
			}
	}
	free(buf);
	return count;
}

FIXTURE(policy) {
	int fd;
	struct gpunvme_info info;
	char type[32], lockdown[32];
	uint32_t mode;
	int waiver;
	int expect;		/* what a root claim must return: 0 or -EPERM */
	const char *why;
};

FIXTURE_SETUP(policy)
{
	self->fd = gpunvme_open_bound();
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, get_info(self->fd, &self->info));
	self->mode = expected_iommu_mode(gpunvme_bdf(), self->type, sizeof(self->type));
	lockdown_level(self->lockdown, sizeof(self->lockdown));
	self->waiver = waiver_on();
	int translating = self->mode == GPUNVME_IOMMU_STRICT || self->mode == GPUNVME_IOMMU_LAZY;
	if (self->lockdown[0] && strcmp(self->lockdown, "none")) {
		self->expect = -EPERM;
		self->why = "kernel lockdown";
	} else if (!translating && !self->waiver) {
		self->expect = -EPERM;
		self->why = "the IOMMU does not translate and allow_unsafe_no_iommu is off";
	} else if (!translating) {
		self->expect = 0;
		self->why = "the IOMMU does not translate, waived by allow_unsafe_no_iommu=1";
	} else {
		self->expect = 0;
		self->why = "a translating IOMMU domain";
	}
	TH_LOG("IOMMU group type %s, lockdown [%s], waiver %s: a claim must %s (%s)", self->type,
	       self->lockdown[0] ? self->lockdown : "no LSM", self->waiver ? "on" : "off",
	       self->expect ? "fail with EPERM" : "succeed", self->why);
}

FIXTURE_TEARDOWN(policy)
{
	close(self->fd);
}

TEST_F(policy, get_info_reports_the_iommu_mode)
{
	EXPECT_EQ(self->mode, self->info.iommu_mode) TH_LOG("sysfs says %s", self->type);
}

/* GET_INFO's modes tells beforehand what a claim will get. */
TEST_F(policy, modes_predict_the_claim)
{
	EXPECT_TRUE(self->info.modes & GPUNVME_MODE_SHARED);
	EXPECT_EQ(self->expect == 0, !!(self->info.modes & GPUNVME_MODE_OWNER)) TH_LOG("modes %#x", self->info.modes);
}

TEST_F(policy, claim_follows_policy)
{
	static const char *const lockdown_words[] = { "lockdown", NULL };
	const char *const *words = mode_words(self->mode);
	int mode_lines = klog_mode_lines(words);
	int lockdown_lines = klog_mode_lines(lockdown_words);
	unsigned long long t0 = tainted();
	const char *before_env = getenv("GPUNVME_TAINT_BEFORE");
	unsigned long long before = before_env && *before_env ? strtoull(before_env, NULL, 0) : t0;
	uint32_t mode = 99;
	int r = claim_owner(self->fd, &mode);
	unsigned long long t1 = tainted();
	EXPECT_EQ(self->expect, r) TH_LOG("claim: %s; expected %s because of %s", r ? strerror(-r) : "ok",
					   self->expect ? "EPERM" : "success", self->why);
	if (self->expect == 0 && r == 0) {
		EXPECT_EQ(self->mode, mode);
		/* The owner's raw pair works. */
		struct qp q;
		struct hostbuf hb;
		uint32_t lbs = self->info.ns[0].lba_size;
		ASSERT_EQ(0, qp_create_flags(self->fd, 8, GPUNVME_QPAIR_RAW, &q));
		ASSERT_EQ(0, hostbuf_map(self->fd, 2 * 4096, &hb));
		pattern_fill(hb.p, 4096, 91, 4096, lbs);
		EXPECT_EQ(0, qp_sync(&q, rw_cmd(OPC_WRITE, 1, 4096, 4096 / lbs, hb.dma[0], 0)));
		EXPECT_EQ(0, qp_sync(&q, rw_cmd(OPC_READ, 1, 4096, 4096 / lbs, hb.dma[1], 0)));
		EXPECT_EQ(-1, pattern_check(hb.p + 4096, 4096, 91, 4096, lbs));
		EXPECT_EQ(0, qp_destroy(&q));
	}
	if (!strcmp(self->why, "kernel lockdown")) {
		/* Refused for lockdown (LOCKDOWN_PCI_ACCESS): the module says so,
		 * or the lockdown LSM does (its notice is rate-limited, and
		 * GET_INFO's modes asks it too). */
		EXPECT_LT(lockdown_lines, klog_mode_lines(lockdown_words)) TH_LOG("no log line about lockdown");
		klog_show("ockdown", 2);
	} else if (self->expect) {
		/* Refused for the IOMMU: the module's log line names the mode. */
		EXPECT_LT(mode_lines, klog_mode_lines(words)) TH_LOG("no gpunvme log line naming the mode (%s)", self->type);
		klog_show("gpunvme", 3);
	}
	if (self->waiver && r == 0 && self->mode != GPUNVME_IOMMU_STRICT && self->mode != GPUNVME_IOMMU_LAZY) {
		/* Waived: tainted (a bit beyond O and E), and the log says why. */
		unsigned long long fresh = t1 & ~before & ~(TAINT_OOT_MODULE | TAINT_UNSIGNED_MODULE);
		EXPECT_NE(0, fresh) TH_LOG("tainted %#llx before loading/claiming, %#llx after", before, t1);
		EXPECT_NE(0, t1);
		EXPECT_LT(0, klog_count("allow_unsafe_no_iommu", NULL)) TH_LOG("no log line about the waiver");
		klog_show("allow_unsafe_no_iommu", 2);
	} else {
		EXPECT_EQ(t0, t1) TH_LOG("the claim changed the taint from %#llx to %#llx", t0, t1);
	}
	if (self->mode == GPUNVME_IOMMU_LAZY && r == 0) {
		/* Lazy invalidation: the claim warns about the stale-IOTLB window. */
		static const char *const lazy[] = { "lazy", "DMA-FQ", "IOTLB", NULL };
		EXPECT_LT(0, klog_mode_lines(lazy)) TH_LOG("no warning naming lazy IOTLB invalidation");
	}
}

/* Shared mode needs no claim and works whatever the IOMMU and lockdown. */
TEST_F(policy, shared_mode_works)
{
	struct qp q;
	struct hostbuf hb;
	uint32_t lbs = self->info.ns[0].lba_size;
	ASSERT_EQ(0, qp_create_flags(self->fd, 8, 0, &q));
	ASSERT_EQ(0, hostbuf_map(self->fd, 2 * 4096, &hb));
	pattern_fill(hb.p, 4096, 92, 4104, lbs);
	EXPECT_EQ(0, qp_sync(&q, rw_cmd(OPC_WRITE, 1, 4104, 4096 / lbs, hb.dma[0], 0)));
	EXPECT_EQ(0, qp_sync(&q, rw_cmd(OPC_READ, 1, 4104, 4096 / lbs, hb.dma[1], 0)));
	EXPECT_EQ(-1, pattern_check(hb.p + 4096, 4096, 92, 4104, lbs));
	/* Still validated: another address than this file's is refused. */
	int st = qp_sync(&q, rw_cmd(OPC_READ, 1, 4104, 4096 / lbs, hb.dma[1] + 64 * 4096, 0));
	EXPECT_EQ(NVME_SC_INVALID_FIELD | NVME_DNR, st > 0 ? st & (0x7ff | NVME_DNR) : st) TH_LOG("status %#x", st);
	EXPECT_EQ(0, qp_destroy(&q));
}

/* Without CAP_SYS_RAWIO no claim, whatever the rest. */
TEST_F(policy, unprivileged_claim_refused)
{
	char name[64], node[64];
	snprintf(name, sizeof(name), "/proc/self/fd/%d", self->fd);
	ssize_t n = readlink(name, node, sizeof(node) - 1);
	ASSERT_LT(0, n);
	node[n] = 0;
	ASSERT_EQ(0, chmod(node, 0666));
	pid_t pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		if (setgid(65534) || setuid(65534))
			_exit(2);
		int fd = open(node, O_RDWR);
		if (fd < 0)
			_exit(3);
		_exit(claim_owner(fd, NULL) == -EPERM ? 0 : 1);
	}
	int status;
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	chmod(node, 0600);
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) TH_LOG("status %#x", status);
}

/* A namespace node never claims. */
TEST_F(policy, namespace_node_claim_refused)
{
	int fd = gpunvme_open_ns(self->info.ns[0].nsid);
	ASSERT_LE(0, fd);
	EXPECT_EQ(-EPERM, claim_owner(fd, NULL));
	close(fd);
}

TEST_HARNESS_MAIN
