// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// host_array_c_test.c - array_host.h compiled as C11: its geometry against
// the numbers array.h and pqueue.h give (the same numbers gpunvme-gpu's
// kernel_abi.rs tests), its descriptor checks, and the ioctl wrappers'
// errors on a file that is not a gpunvme node. KTAP out.

#include <gpunvme/array_host.h>

#include <stdio.h>

static int n, pass;

static void result(int ok, const char *name)
{
	n++;
	pass += ok;
	printf("%s %d %s\n", ok ? "ok" : "not ok", n, name);
}

int main(void)
{
	printf("KTAP version 1\n1..6\n");

	/* 64 frames in 8 sets: state 512, ferr 256, locks at 768, hands at
	 * 800, stats at 832, error at 896, 960 in all. */
	struct gpunvme_array_desc_c d;
	gpunvme_array_desc_init(&d, 0x100, 2, 0x200000, 0x300, 64, 8, 14, GPUNVME_ARRAY_STRIPE, 2,
				100 * 16384, 0, 1000000000ull, 1000000000ull);
	gpunvme_array_meta_attach(&d, 0x1000);
	result(gpunvme_array_meta_bytes(64, 8) == 960 && d.state == 0x1000 && d.ferr == 0x1200 &&
		       d.set_lock == 0x1300 && d.hand == 0x1320 && d.stats == 0x1340 && d.error == 0x1380,
	       "meta_layout_is_array_h_s");

	/* pq_bytes(32) = 320 + 512; the phase word of a fresh pair is 1. */
	uint8_t img[832];
	gpunvme_pq_shared_init(img, 32);
	uint32_t phase;
	memcpy(&phase, img + 136, 4);
	result(gpunvme_pq_bytes(32) == 832 && gpunvme_pq_bytes(4) == 320 && phase == 1 &&
		       gpunvme_pq_prp_stride(4096 * 16, 32) == 2048 && gpunvme_pq_prp_stride(100, 32) == 0,
	       "pqueue_state_is_pqueue_h_s");

	/* 100 pages in chunks of 2 over 2 controllers: 25 rounds of 4 pages,
	 * 50 local pages, 32 LBAs of 512 B each. */
	struct gpunvme_array_ctrl_c c[2] = {
		{0x400, 0, 50 * 32, 2, 1, 9, 0},
		{0x500, 4096, 50 * 32, 2, 1, 9, 0},
	};
	result(d.frame_pages == 256 && d.n_sets == 8 && gpunvme_array_local_pages(&d) == 50 &&
		       gpunvme_array_check(&d, c) == 0,
	       "a_good_descriptor_passes_the_check");

	int refused = 0;
	struct gpunvme_array_desc_c b = d;
	b.ways = 3;
	refused += gpunvme_array_check(&b, c) == -EINVAL;
	b = d;
	b.page_shift = 17;
	refused += gpunvme_array_check(&b, c) == -EINVAL;
	c[1].lbas = 50 * 32 - 1;
	refused += gpunvme_array_check(&d, c) == -EINVAL;
	c[1].lbas = 50 * 32;
	c[0].nqp = 0;
	refused += gpunvme_array_check(&d, c) == -EINVAL;
	c[0].nqp = 2;
	result(refused == 4, "bad_descriptors_are_einval");

	/* A pair's descriptor from CREATE_QPAIR's answer. */
	struct gpunvme_qpair_create qc;
	memset(&qc, 0, sizeof(qc));
	qc.depth = 32;
	qc.sq_db = 0;
	qc.cq_db = 64;
	qc.prp_dma = 0xabc000;
	qc.prp_size = 4096 * 16;
	struct gpunvme_pqueue_c q;
	gpunvme_pq_fill(&q, &qc, 0x10000, 0x20000, 0x30000, 0x40000, 0x50000, 0x60000, 1000, 100, 4096);
	result(q.sq_db == 0x10000 && q.cq_db == 0x10040 && q.ready == 0x50000 + 192 &&
		       q.slots == 0x50000 + 320 && q.prp_stride == 2048 && q.prp_dma == 0xabc000 &&
		       q.depth == 32 && q.backoff == 1,
	       "pq_fill_places_the_doorbells_state_and_pool");

	/* The wrappers return -errno: /dev/null is no gpunvme node. */
	struct gpunvme_info info;
	const int fd = gpunvme_array_open("/dev/null", &info);
	const int missing = gpunvme_array_open("/nonexistent/gpunvme0", &info);
	result(fd < 0 && fd != -ENOENT && missing == -ENOENT, "open_reports_errno");

	printf("%d passed, %d failed\n", pass, n - pass);
	return pass == n ? 0 : 1;
}
