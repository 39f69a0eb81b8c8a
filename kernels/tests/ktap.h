/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/* ktap.h - KTAP result lines and the "N passed, N failed" summary for the
 * CUDA tests in this directory. */
#ifndef GPUNVME_TESTS_KTAP_H
#define GPUNVME_TESTS_KTAP_H

#include <cstdio>

static int n_tests, n_pass;

static void result(bool ok, const char *name, const char *why = "")
{
	n_tests++;
	n_pass += ok;
	std::printf("%s %d %s%s%s\n", ok ? "ok" : "not ok", n_tests, name,
		    ok || !*why ? "" : " # ", ok ? "" : why);
}

/* The summary line; the exit status (0: all passed). */
static int summary()
{
	std::printf("%d passed, %d failed\n", n_pass, n_tests - n_pass);
	return n_pass == n_tests ? 0 : 1;
}

#endif
