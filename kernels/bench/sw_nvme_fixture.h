// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// sw_nvme_fixture.h - a SOFTWARE NVMe CONTROLLER used as a BENCHMARK FIXTURE.
//
// It exists only so kernels/bench can time the device library's queue code
// (queue.h) and the bridge relay (relay.h) on a GPU box that has no NVMe
// drive the GPU can reach. It is never used by any test and it is not a
// model of a real SSD's timing: it services a command as fast as one CPU
// core can (no media, no flash latency), so what the bench measures is the
// queue protocol and its PCIe/polling crossings, nothing else.
//
// What it implements of the NVMe queue protocol, per I/O queue pair:
//   - an SQ tail doorbell and a CQ head doorbell (plain 32-bit cells in
//     host memory, each on its own cache line, standing in for BAR0 MMIO);
//   - on a doorbell change: fetch the new 64-byte SQEs from the host SQ,
//     execute READ / WRITE / FLUSH against a RAM-backed namespace (NSID 1),
//     PRP1 + PRP2, or PRP1 + a PRP list at PRP2 (read from one of two
//     windows of host memory whose bus address is its host address: the
//     pairs' PRP pools and the relay's list slots; the last entry of a list
//     page chains to the next page when more entries follow; a list
//     anywhere else is refused with Invalid Field);
//   - post a 16-byte CQE (SQHD, SQID, CID, status) with the phase tag in the
//     last dword, written after the first three (release order), flipping
//     the phase on every wrap; never posts into a full CQ (head from the CQ
//     doorbell).
// Data movement: a PRP is a bus address; the fixture translates it either
// into a CPU pointer of mapped pinned host memory and uses memcpy ("host"
// data), or hands it to a transfer callback (the bench uses cudaMemcpyAsync
// on the fixture thread's own stream, then syncs that stream, for buffers in
// GPU memory: "vram" data). The CQE is posted only after the data moved.
#ifndef SW_NVME_FIXTURE_H
#define SW_NVME_FIXTURE_H

#include <gpunvme/nvme.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace swnvme {

using gpunvme::cqe;
using gpunvme::sqe;

// Status field values (SCT << 8 | SC), as the CQE's 15-bit status field.
enum : uint32_t {
	SC_SUCCESS = 0x00,
	SC_INVALID_OPCODE = 0x01,
	SC_INVALID_FIELD = 0x02,
	SC_DATA_XFER_ERROR = 0x04,
	SC_INVALID_NS = 0x0b,
	SC_LBA_RANGE = 0x80,
};

// The controller's doorbell "registers" of one queue pair.
struct alignas(64) regs {
	uint32_t sq_tail_db;
	uint32_t pad0[15];
	uint32_t cq_head_db;
	uint32_t pad1[15];
};

inline uint32_t ld_acquire(const volatile uint32_t *p)
{
	return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE);
}

inline void st_release(volatile uint32_t *p, uint32_t v)
{
	__atomic_store_n((uint32_t *)p, v, __ATOMIC_RELEASE);
}

// Moves len bytes between bus address prp and namespace memory; to_ns =
// true for a WRITE. Returns false on a transfer failure.
typedef bool (*xfer_fn)(void *thread_ctx, bool to_ns, uint64_t prp,
			uint8_t *ns, uint32_t len);

// A CQ in GPU memory: the CQE is built in the host ring (cq, as always)
// and then handed to this callback, which moves it to dev (the bench: a
// cudaMemcpyAsync on the fixture thread's stream, i.e. the GPU's copy
// engine writes it into VRAM over PCIe, as a peer's DMA would). Returns
// false on a transfer failure.
typedef bool (*cq_push_fn)(void *thread_ctx, cqe *dev, const cqe *src, uint32_t n);

// Controller-side state of one I/O queue pair.
struct queue {
	const sqe *sq;   // host pointer of the SQ ring
	cqe *cq;         // host pointer of the (real) CQ ring
	cqe *cq_dev = nullptr; // with ns_config::cq_push: the CQ the GPU polls
	regs *r;         // its doorbells
	uint32_t depth;
	uint16_t qid;
	uint32_t sq_head = 0, cq_tail = 0, phase = 1;
	uint64_t cmds = 0, errors = 0, bad_doorbells = 0, cq_full_stalls = 0;
};

struct ns_config {
	uint8_t *ns;            // namespace memory, ns_blocks * lba_bytes
	uint64_t ns_blocks;
	uint32_t lba_bytes;
	uint32_t page = 4096;   // controller memory page size (CC.MPS)
	// "host" data: PRPs inside [dma_base, dma_base + dma_len) map to host_base.
	uint64_t dma_base = 0, dma_len = 0;
	uint8_t *host_base = nullptr;
	// "vram" data: everything goes through xfer.
	xfer_fn xfer = nullptr;
	// CQs in GPU memory (queue::cq_dev): each posted CQE goes through this.
	cq_push_fn cq_push = nullptr;
	// PRP lists: [lo, hi) windows of host memory, bus address = host address.
	uint64_t list_lo[2] = {0, 0}, list_hi[2] = {0, 0};
};

class fixture {
public:
	explicit fixture(const ns_config &c) : c_(c) {}

	// One pass over one queue: service every SQE the tail doorbell
	// exposes. True when anything was completed.
	bool service(queue &q, void *thread_ctx)
	{
		uint32_t db = ld_acquire(&q.r->sq_tail_db);
		bool progress = false;

		if (db >= q.depth) {
			q.bad_doorbells++; // a real controller raises an AER
			return false;
		}
		while (q.sq_head != db) {
			uint32_t head = ld_acquire(&q.r->cq_head_db);
			if ((q.cq_tail + 1) % q.depth == head) {
				q.cq_full_stalls++;
				break; // never overwrite an unreaped CQE
			}
			sqe e;
			std::memcpy(&e, (const void *)&q.sq[q.sq_head], sizeof(e));
			q.sq_head = (q.sq_head + 1) % q.depth;
			uint32_t st = execute(e, thread_ctx);
			q.cmds++;
			q.errors += st != SC_SUCCESS;
			post(q, e.cid, st, thread_ctx);
			progress = true;
		}
		return progress;
	}

private:
	bool move(void *tctx, bool to_ns, uint64_t prp, uint8_t *nsp, uint32_t len)
	{
		if (c_.xfer)
			return c_.xfer(tctx, to_ns, prp, nsp, len);
		if (prp < c_.dma_base || prp - c_.dma_base + len > c_.dma_len)
			return false;
		uint8_t *h = c_.host_base + (prp - c_.dma_base);
		if (to_ns)
			std::memcpy(nsp, h, len);
		else
			std::memcpy(h, nsp, len);
		return true;
	}

	uint32_t execute(const sqe &e, void *tctx)
	{
		if (e.opc == gpunvme::NVME_OPC_FLUSH)
			return e.nsid == 1 ? SC_SUCCESS : SC_INVALID_NS;
		if (e.opc != gpunvme::NVME_OPC_READ && e.opc != gpunvme::NVME_OPC_WRITE)
			return SC_INVALID_OPCODE;
		if (e.nsid != 1)
			return SC_INVALID_NS;
		if (e.flags != 0) // fused or SGL: not supported
			return SC_INVALID_FIELD;
		uint64_t slba = (uint64_t)e.cdw10 | (uint64_t)e.cdw11 << 32;
		uint64_t nlb = (e.cdw12 & 0xffffu) + 1;
		if (slba >= c_.ns_blocks || nlb > c_.ns_blocks - slba)
			return SC_LBA_RANGE;
		uint64_t len = nlb * c_.lba_bytes;
		uint64_t first = c_.page - (e.prp1 & (c_.page - 1));
		uint64_t len1 = len < first ? len : first, len2 = len - len1;
		bool to_ns = e.opc == gpunvme::NVME_OPC_WRITE;
		uint8_t *nsp = c_.ns + slba * c_.lba_bytes;
		if (len2 > c_.page) // PRP2 points at a list
			return list_xfer(e, tctx, to_ns, nsp, len1, len2);
		if (len2 && (e.prp2 & (c_.page - 1)))
			return SC_INVALID_FIELD;
		if (!move(tctx, to_ns, e.prp1, nsp, (uint32_t)len1))
			return SC_DATA_XFER_ERROR;
		if (len2 && !move(tctx, to_ns, e.prp2, nsp + len1, (uint32_t)len2))
			return SC_DATA_XFER_ERROR;
		return SC_SUCCESS;
	}

	const uint64_t *list_entry(uint64_t at) const
	{
		for (int w = 0; w < 2; w++)
			if (at % 8 == 0 && at >= c_.list_lo[w] && at + 8 <= c_.list_hi[w])
				return (const uint64_t *)(uintptr_t)at;
		return nullptr;
	}

	uint32_t list_xfer(const sqe &e, void *tctx, bool to_ns, uint8_t *nsp,
			   uint64_t len1, uint64_t len2)
	{
		if (!move(tctx, to_ns, e.prp1, nsp, (uint32_t)len1))
			return SC_DATA_XFER_ERROR;
		uint64_t n = (len2 + c_.page - 1) / c_.page, at = e.prp2, done = len1;
		for (uint64_t i = 0; i < n; i++) {
			if (at % c_.page == c_.page - 8 && n - i > 1) {
				const uint64_t *next = list_entry(at);
				if (!next || (*next & (c_.page - 1)))
					return SC_INVALID_FIELD;
				at = *next;
			}
			const uint64_t *ent = list_entry(at);
			if (!ent || (*ent & (c_.page - 1)))
				return SC_INVALID_FIELD;
			uint64_t l = len1 + len2 - done < c_.page ? len1 + len2 - done : c_.page;
			if (!move(tctx, to_ns, *ent, nsp + done, (uint32_t)l))
				return SC_DATA_XFER_ERROR;
			done += l;
			at += 8;
		}
		return SC_SUCCESS;
	}

	// dw0..dw2 first, then the dword with the phase tag (release); for a
	// CQ in GPU memory, then the whole 16-byte entry in one copy.
	void post(queue &q, uint16_t cid, uint32_t st, void *tctx)
	{
		volatile uint32_t *d = (volatile uint32_t *)&q.cq[q.cq_tail];
		d[0] = 0;
		d[1] = 0;
		d[2] = q.sq_head | (uint32_t)q.qid << 16;
		st_release(&d[3], cid | q.phase << 16 | st << 17);
		if (c_.cq_push && q.cq_dev &&
		    !c_.cq_push(tctx, &q.cq_dev[q.cq_tail], &q.cq[q.cq_tail], 1))
			q.errors++;
		if (++q.cq_tail == q.depth) {
			q.cq_tail = 0;
			q.phase ^= 1;
		}
	}

	ns_config c_;
};

} // namespace swnvme

#endif // SW_NVME_FIXTURE_H
