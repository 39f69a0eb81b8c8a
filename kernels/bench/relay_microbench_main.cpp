// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// relay_microbench_main.cpp - the relay microbenchmark (relay_microbench.h)
// as a host-only program, for machines without a GPU or nvcc. The GPU
// bench (gpunvme_bench.cu) runs the same set in the same binary as its
// GPU measurements; this one gives the number anywhere else.
//
//   relay_microbench [--seconds S] [--clients N] [--out FILE.json]
// Pins the relay to the second CPU it may use, clients to the next ones;
// then the scaling set: 1, 2 and 4 relay threads on CPUs 1-4, the same
// clients on the CPUs after them ("scaling" in the JSON).
// Exits 1 if a check failed (never because of a time).
#include "relay_microbench.h"

#include <sched.h>

int main(int argc, char **argv)
{
	double seconds = 0.5;
	int clients = -1;
	const char *out = nullptr;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--clients") && i + 1 < argc)
			clients = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--out") && i + 1 < argc)
			out = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--seconds S] [--clients N] [--out FILE.json]\n", argv[0]);
			return 2;
		}
	}
	std::vector<int> cpus;
	cpu_set_t cs;
	sched_getaffinity(0, sizeof(cs), &cs);
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &cs))
			cpus.push_back(i);
	const int n = (int)cpus.size();
	if (clients < 0)
		clients = n >= 6 ? 4 : std::max(1, n - 2);
	std::vector<int> pin;
	for (int i = 0; i < 1 + clients; i++)
		pin.push_back(cpus[(size_t)(1 + i) % cpus.size()]);
	bool ok = true;
	std::string j = "{\"cpus\": " + std::to_string(n) + ", \"runs\": [\n";
	bool first = true;
	{ // warm-up (caches, clocks, first-touch): not recorded, still checked
		mb::Config w = mb::standard(seconds, (uint32_t)clients, pin)[0];
		w.seconds = 0.1;
		ok &= mb::run(w).ok();
	}
	for (const mb::Config &c : mb::standard(seconds, (uint32_t)clients, pin)) {
		mb::Result r = mb::run(c);
		mb::print(r);
		ok &= r.ok();
		j += std::string(first ? "  " : ",\n  ") + mb::json(r);
		first = false;
	}
	j += "\n], \"scaling\": [\n";
	// Relay threads alone on cores 1-4 of the CPUs this may use, the
	// clients on the next ones (the same in every run), where there are
	// that many; else skipped and said so.
	if (n >= 6) {
		std::vector<int> rc, cc;
		for (int i = 0; i < 4; i++)
			rc.push_back(cpus[(size_t)(1 + i)]);
		for (int i = 5; i < n && (int)cc.size() < std::max(clients, 2 * 4); i++)
			cc.push_back(cpus[(size_t)i]);
		double one[2] = {0, 0};
		first = true;
		int k = 0;
		for (const mb::Config &c : mb::scaling(seconds, rc, cc)) {
			mb::Result r = mb::run(c);
			mb::print(r);
			ok &= r.ok();
			double &base = one[k++ / 3];
			if (c.relay_threads == 1)
				base = r.per_s_wall();
			printf("SCALING %-8s %u relay thread(s), %zu client threads: %.2f M cmds/s wall, %.2fx one relay thread\n",
			       c.mix, c.relay_threads, cc.size(), r.per_s_wall() / 1e6, base ? r.per_s_wall() / base : 0.0);
			j += std::string(first ? "  " : ",\n  ") + mb::json(r);
			first = false;
		}
	} else {
		printf("SCALING skipped: %d CPUs, 6 or more needed (4 relay cores, clients beside them)\n", n);
	}
	j += "\n]}\n";
	if (out) {
		FILE *f = fopen(out, "w");
		if (!f) {
			perror(out);
			return 1;
		}
		fputs(j.c_str(), f);
		fclose(f);
	}
	printf("CHECKS %s\n", ok ? "all ok" : "SOME FAILED");
	return ok ? 0 : 1;
}
