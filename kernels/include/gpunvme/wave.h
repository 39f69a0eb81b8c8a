/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * wave.h - the few wavefront collectives the per-thread API needs on AMD
 * (and on the host, which runs the same code): this lane's index in its
 * wave, a ballot over the active lanes, and a value broadcast from one of
 * them. Every active lane of the wave must call a collective together
 * (on AMD they do by construction: the lanes the exec mask holds run the
 * same instruction).
 *
 * AMD: mbcnt, s_ballot (v_cmp into an SGPR), v_readlane; a wave32 target
 * returns the low 32 bits of a 64-bit mask.
 * Host: every thread is a one-lane wave (lane 0, ballot = its own
 * predicate), unless a harness makes threads lanes of one wave by setting
 * host_wave / host_wave_ctx / host_wave_lane in each of them
 * (tests/host_wave.h does: threads as lanes, in lockstep at every
 * collective, with a lane mask); its collectives must block until every
 * active lane of the wave has called, and end after a deadline if one
 * never does.
 */
#ifndef GPUNVME_WAVE_H
#define GPUNVME_WAVE_H

#include "compat.h"

namespace gpunvme {

#if defined(GPUNVME_HOST_ONLY)
struct host_wave_ops {
	uint64_t (*ballot)(void *ctx, uint32_t lane, bool p);
	uint64_t (*bcast)(void *ctx, uint32_t lane, uint64_t v, uint32_t src);
};
inline thread_local const host_wave_ops *host_wave = nullptr;
inline thread_local void *host_wave_ctx = nullptr;
inline thread_local uint32_t host_wave_lane = 0;
#endif

namespace wave {

#if !defined(GPUNVME_DEV_NVIDIA)
GPUNVME_HD uint32_t lane()
{
#if defined(GPUNVME_DEV_AMD)
	return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
#else
	return host_wave ? host_wave_lane : 0;
#endif
}

/* Bit l set: active lane l's p is true. */
GPUNVME_HD uint64_t ballot(bool p)
{
#if defined(GPUNVME_DEV_AMD)
	return __builtin_amdgcn_ballot_w64(p);
#else
	return host_wave ? host_wave->ballot(host_wave_ctx, host_wave_lane, p)
			 : (uint64_t)p;
#endif
}

/* Active lane src's v (src the same in every lane: a ballot's result). */
GPUNVME_HD uint64_t bcast64(uint64_t v, uint32_t src)
{
#if defined(GPUNVME_DEV_AMD)
	const uint32_t lo = (uint32_t)__builtin_amdgcn_readlane((int)(uint32_t)v, (int)src);
	const uint32_t hi = (uint32_t)__builtin_amdgcn_readlane((int)(uint32_t)(v >> 32), (int)src);
	return (uint64_t)hi << 32 | lo;
#else
	return host_wave ? host_wave->bcast(host_wave_ctx, host_wave_lane, v, src) : v;
#endif
}

/* Lanes of mask below this one. */
GPUNVME_HD uint32_t rank(uint64_t mask)
{
	const uint32_t me = lane();
	return (uint32_t)__builtin_popcountll(mask & ((1ull << me) - 1ull));
}
#endif

} /* namespace wave */
} /* namespace gpunvme */

#endif /* GPUNVME_WAVE_H */
