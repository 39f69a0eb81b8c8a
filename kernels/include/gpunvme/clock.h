/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * clock.h - deadlines on the fixed-rate wall clock, never the shader clock.
 *
 * clock64()/s_memtime count shader cycles whose rate is not what the device
 * attribute reports (gfx1101: ~0.6 MHz against a reported 2.25 GHz, so a 1 s
 * timeout became an hour and the watchdog reset the GPU). And HIP 5.2's
 * wall_clock64() compiled to a constant -1 on gfx11, so its timeouts never
 * fired. We read the constant-rate counter directly:
 *   AMD     __builtin_readsteadycounter(): s_memrealtime (gfx9, gfx10.3),
 *           s_sendmsg_rtn_b64 MSG_RTN_GET_REALTIME (gfx11, gfx12)
 *   NVIDIA  %globaltimer (nanoseconds)
 *   host    CLOCK_MONOTONIC (nanoseconds)
 * The tick rate always comes from the host (hipDeviceAttributeWallClockRate
 * in kHz * 1000, or 1e9 for globaltimer/host); device code never guesses it.
 */
#ifndef GPUNVME_CLOCK_H
#define GPUNVME_CLOCK_H

#include "compat.h"

#if defined(GPUNVME_HOST_ONLY)
#include <time.h>
#endif

namespace gpunvme {

/*
 * Any single wait ends well inside the ~10 s GPU ring watchdog. A host
 * build with no watchdog (hostrun in the TCG VM, where one relay pass can
 * take a second under load) may raise it with -DGPUNVME_WAIT_CAP_SECONDS.
 */
#ifndef GPUNVME_WAIT_CAP_SECONDS
#define GPUNVME_WAIT_CAP_SECONDS 2
#endif
#if defined(GPUNVME_DEV_AMD) || defined(GPUNVME_DEV_NVIDIA)
static_assert(GPUNVME_WAIT_CAP_SECONDS <= 5, "a GPU wait must end well inside the ring watchdog");
#endif
constexpr uint64_t WAIT_CAP_SECONDS = GPUNVME_WAIT_CAP_SECONDS;

/*
 * A wall clock that returns the same value this many times in a row is
 * broken (the -1 constant), not slow: at >= 1 MHz and >= 100 ns per poll it
 * must have moved long before. Failing here bounds the wait even then.
 */
constexpr uint32_t CLOCK_STUCK_READS = 1u << 16;

GPUNVME_HD uint64_t wall_ticks()
{
#if defined(GPUNVME_DEV_AMD)
	return __builtin_readsteadycounter();
#elif defined(GPUNVME_DEV_NVIDIA)
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
#else
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
#endif
}

/* Budget in ticks for a requested timeout, clamped to WAIT_CAP_SECONDS. */
GPUNVME_HD uint64_t clamp_budget(uint64_t timeout_ticks, uint64_t tick_hz)
{
	uint64_t cap = tick_hz * WAIT_CAP_SECONDS;

	return timeout_ticks < cap ? timeout_ticks : cap;
}

enum deadline_state : int {
	DEADLINE_RUNNING = 0,
	DEADLINE_EXPIRED = 1,
	DEADLINE_CLOCK_STUCK = 2,
};

/*
 * A started wait. step() is pure in its input (the caller reads the clock),
 * so the expiry and stuck-clock logic is unit-tested with fake timestamps.
 * Unsigned subtraction keeps it correct across counter wrap.
 */
struct deadline {
	uint64_t start;
	uint64_t budget;
	uint64_t last;
	uint32_t same;

	GPUNVME_HD int step(uint64_t now)
	{
		if (now == last) {
			if (++same >= CLOCK_STUCK_READS)
				return DEADLINE_CLOCK_STUCK;
		} else {
			last = now;
			same = 0;
		}
		return now - start >= budget ? DEADLINE_EXPIRED
					     : DEADLINE_RUNNING;
	}
};

GPUNVME_HD deadline deadline_start(uint64_t now, uint64_t timeout_ticks,
				   uint64_t tick_hz)
{
	deadline d;

	d.start = now;
	d.budget = clamp_budget(timeout_ticks, tick_hz);
	d.last = now;
	d.same = 0;
	return d;
}

} /* namespace gpunvme */

#endif /* GPUNVME_CLOCK_H */
