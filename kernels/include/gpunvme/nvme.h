/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * nvme.h - NVMe command and completion layouts (NVM Command Set 1.4+).
 *
 * Only what a GPU lane needs to build I/O commands and decode completions.
 * Field offsets are the spec's; static_asserts pin them so a compiler or
 * packing change cannot silently move PRP1 or the phase bit.
 */
#ifndef GPUNVME_NVME_H
#define GPUNVME_NVME_H

#include "compat.h"

#include <stddef.h>

namespace gpunvme {

/* I/O command opcodes (NVM command set). */
enum : uint8_t {
	NVME_OPC_FLUSH = 0x00,
	NVME_OPC_WRITE = 0x01,
	NVME_OPC_READ = 0x02,
};

/* CDW12 bits shared by read and write. */
constexpr uint32_t NVME_RW_FUA = 1u << 30;
constexpr uint32_t NVME_RW_LR = 1u << 31;

/* Submission queue entry: 64 bytes, one SQ slot. */
struct alignas(16) sqe {
	uint8_t opc;    /* byte 0: opcode */
	uint8_t flags;  /* byte 1: FUSE[1:0], PSDT[7:6]; 0 = PRPs, not fused */
	uint16_t cid;   /* bytes 2-3: command identifier, echoed in the CQE */
	uint32_t nsid;  /* bytes 4-7 */
	uint32_t cdw2;
	uint32_t cdw3;
	uint64_t mptr;  /* bytes 16-23: metadata pointer */
	uint64_t prp1;  /* bytes 24-31 */
	uint64_t prp2;  /* bytes 32-39 */
	uint32_t cdw10; /* bytes 40-43: SLBA[31:0] for read/write */
	uint32_t cdw11; /* bytes 44-47: SLBA[63:32] */
	uint32_t cdw12; /* bytes 48-51: NLB[15:0] (0-based), FUA, LR */
	uint32_t cdw13;
	uint32_t cdw14;
	uint32_t cdw15;
};

static_assert(sizeof(sqe) == 64, "NVMe SQE is 64 bytes");
static_assert(offsetof(sqe, cid) == 2, "CID at byte 2");
static_assert(offsetof(sqe, nsid) == 4, "NSID at byte 4");
static_assert(offsetof(sqe, mptr) == 16, "MPTR at byte 16");
static_assert(offsetof(sqe, prp1) == 24, "PRP1 at byte 24");
static_assert(offsetof(sqe, prp2) == 32, "PRP2 at byte 32");
static_assert(offsetof(sqe, cdw10) == 40, "CDW10 at byte 40");
static_assert(offsetof(sqe, cdw12) == 48, "CDW12 at byte 48");
static_assert(offsetof(sqe, cdw15) == 60, "CDW15 at byte 60");

/* Completion queue entry: 16 bytes, one CQ slot. */
struct alignas(16) cqe {
	uint32_t dw0;   /* command specific */
	uint32_t dw1;   /* reserved */
	uint16_t sqhd;  /* bytes 8-9: SQ head the controller has consumed to */
	uint16_t sqid;  /* bytes 10-11 */
	uint16_t cid;   /* bytes 12-13 */
	uint16_t sf;    /* bytes 14-15: bit 0 = phase, bits 15:1 = status field */
};

static_assert(sizeof(cqe) == 16, "NVMe CQE is 16 bytes");
static_assert(offsetof(cqe, sqhd) == 8, "SQHD at byte 8");
static_assert(offsetof(cqe, cid) == 12, "CID at byte 12");
static_assert(offsetof(cqe, sf) == 14, "status+phase at byte 14");

/* CQE dword 3 (CID | P<<16 | status<<17) is polled as one 32-bit load. */
constexpr uint32_t CQE_DW3_OFFSET = 12;

GPUNVME_HD uint32_t cqe_phase(uint32_t dw3) { return (dw3 >> 16) & 1u; }
GPUNVME_HD uint16_t cqe_cid(uint32_t dw3) { return (uint16_t)(dw3 & 0xffffu); }
/* 15-bit status field: SC[7:0] | SCT[10:8] | CRD[12:11] | M[13] | DNR[14]. */
GPUNVME_HD uint32_t cqe_status(uint32_t dw3) { return dw3 >> 17; }
GPUNVME_HD uint32_t status_sc(uint32_t st) { return st & 0xffu; }
GPUNVME_HD uint32_t status_sct(uint32_t st) { return (st >> 8) & 0x7u; }
GPUNVME_HD bool status_dnr(uint32_t st) { return (st >> 14) & 1u; }
/* Success is SCT=0 SC=0; CRD/M/DNR alone do not make an error. */
GPUNVME_HD bool status_ok(uint32_t st) { return (st & 0x7ffu) == 0; }

GPUNVME_HD sqe sqe_zero()
{
	sqe e = {};
	return e;
}

/*
 * Read/write: NLB is 0-based (nlb0 = blocks - 1), as on the wire. PRP2 is
 * the second page when the transfer crosses one page boundary, or a PRP
 * list pointer when it spans more; the caller decides, we just place it.
 */
GPUNVME_HD sqe sqe_rw(uint8_t opc, uint16_t cid, uint32_t nsid, uint64_t slba,
		      uint16_t nlb0, uint64_t prp1, uint64_t prp2,
		      uint32_t cdw12_flags = 0)
{
	sqe e = sqe_zero();
	e.opc = opc;
	e.cid = cid;
	e.nsid = nsid;
	e.prp1 = prp1;
	e.prp2 = prp2;
	e.cdw10 = (uint32_t)slba;
	e.cdw11 = (uint32_t)(slba >> 32);
	e.cdw12 = (uint32_t)nlb0 | (cdw12_flags & (NVME_RW_FUA | NVME_RW_LR));
	return e;
}

GPUNVME_HD sqe sqe_read(uint16_t cid, uint32_t nsid, uint64_t slba,
			uint16_t nlb0, uint64_t prp1, uint64_t prp2)
{
	return sqe_rw(NVME_OPC_READ, cid, nsid, slba, nlb0, prp1, prp2);
}

GPUNVME_HD sqe sqe_write(uint16_t cid, uint32_t nsid, uint64_t slba,
			 uint16_t nlb0, uint64_t prp1, uint64_t prp2,
			 uint32_t cdw12_flags = 0)
{
	return sqe_rw(NVME_OPC_WRITE, cid, nsid, slba, nlb0, prp1, prp2,
		      cdw12_flags);
}

GPUNVME_HD sqe sqe_flush(uint16_t cid, uint32_t nsid)
{
	sqe e = sqe_zero();
	e.opc = NVME_OPC_FLUSH;
	e.cid = cid;
	e.nsid = nsid;
	return e;
}

/*
 * PRP pair for a buffer of len bytes at bus address dma (page = controller
 * memory page size, a power of two). Returns false when the transfer needs a
 * PRP list (more than two pages), which the device code does not build.
 */
GPUNVME_HD bool prp_pair(uint64_t dma, uint32_t len, uint32_t page,
			 uint64_t *prp1, uint64_t *prp2)
{
	uint64_t first = page - (dma & (uint64_t)(page - 1));

	*prp1 = dma;
	*prp2 = 0;
	if (len <= first)
		return true;
	if (len - first > page)
		return false;
	*prp2 = dma + first;
	return true;
}

} /* namespace gpunvme */

#endif /* GPUNVME_NVME_H */
