/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * selftest.hip - the round-trip self-test gpunvme gpu-run and gpunvme
 * probe launch before anything drives a queue (include/gpunvme/selftest.h
 * has the protocol and the host's half): workgroup i, one lane, runs the
 * GPU half on cell i. Its stores are the library's (a plain store and
 * release_system(), the doorbell store) and its loads the library's
 * (poll_load()), so make isa-check holds it to the same sequences.
 */
#include <gpunvme/gpunvme.h>
#include <gpunvme/selftest.h>

using namespace gpunvme;

GPUNVME_KERNEL void gpunvme_selftest(const gpunvme_st_args *args)
{
	const gpunvme_st_args a = *args;
	const uint32_t i = group_id();

	if (lane_id() != 0 || i >= a.nregions)
		return;
	const gpunvme_st_region *regions = (const gpunvme_st_region *)(uintptr_t)a.regions;
	gpunvme_st_result *results = (gpunvme_st_result *)(uintptr_t)a.results;
	selftest::run_cell(regions[i], a.timeout_ticks, a.tick_hz,
			   (const volatile uint32_t *)(uintptr_t)a.stop, &results[i]);
}
