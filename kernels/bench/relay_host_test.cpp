// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// relay_host_test.cpp - host unit test of relay.h, the bench's port of
// shared mode's relay (rust/bridge.rs), its checks (rust/validate.rs) and
// the owned-page lookup (rust/buffers.rs).
//
//   1. The Rust KUnit tests of those three files, ported one for one
//      (same names, same values), against the port.
//   2. A randomized end-to-end test of Relay + PairPort + validate::check
//      on real memory: a generator builds commands of known verdict (valid
//      reads/writes of every PRP shape, flushes, write zeroes, and one
//      invalid command per rule), a client submits them in random batches
//      and reaps at random, a controller completes them out of order and
//      sometimes with an error. Checked: each completion comes back once,
//      under the file's command ID, with the expected status and (when
//      accepted) exactly the fields and PRP list the generator meant; at
//      most depth-1 commands on the real queue, the real CQ never full,
//      the CQ mirror never holding more than depth-1.
//   3. A hostile file (random tails, heads, SQEs, out-of-range values):
//      the real queue and CQ stay within their bounds whatever it does.
//   4. The microbenchmark (relay_microbench.h) briefly, in both modes, for
//      its own checks (no timing is asserted anywhere).
// Output: one "ok"/"not ok" line per test, then "N passed, N failed".

#include "relay_microbench.h"

#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

using relay::cqe;
using relay::sqe;
using relay::validate::Reject;

static int g_fail_in_test = 0;
#define CHECK(c)                                                                         \
	do {                                                                             \
		if (!(c)) {                                                              \
			if (g_fail_in_test++ < 5)                                        \
				fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, \
					__LINE__, #c);                                   \
		}                                                                        \
	} while (0)
#define CHECK_EQ(a, b)                                                                   \
	do {                                                                             \
		auto a_ = (a);                                                           \
		auto b_ = (b);                                                           \
		if (!(a_ == b_)) {                                                       \
			if (g_fail_in_test++ < 5)                                        \
				fprintf(stderr, "  %s:%d: %s == %s: %llu != %llu\n",     \
					__FILE__, __LINE__, #a, #b,                      \
					(unsigned long long)a_, (unsigned long long)b_); \
		}                                                                        \
	} while (0)

// ================================================== bridge.rs KUnit tests

namespace bridge_tests {

constexpr uint32_t D = 4;

// A model of the memory the relay sees; opcode 0x7f is "invalid".
struct Model {
	mutable uint32_t tail = 0, head = 0;
	mutable sqe shadow_sq[D] = {};
	mutable sqe real_sq[D] = {};
	mutable std::vector<uint32_t> sq_rings, cq_rings;
	mutable cqe real[D] = {};
	mutable cqe shadow[D] = {};

	uint32_t shadow_sq_tail() const { return tail; }
	uint32_t shadow_cq_head() const { return head; }
	sqe shadow_sqe(uint32_t s) const { return shadow_sq[s]; }
	uint32_t each = 1; // what checking one command costs
	uint32_t cost(const sqe &) const { return each; }
	Reject validate(const sqe &s, uint16_t, sqe *out, relay::Epoch *e) const
	{
		*e = 0;
		if (s.opc == 0x7f)
			return Reject::Opcode;
		*out = sqe{};
		out->opc = s.opc;
		return Reject::Ok;
	}
	void write_real_sqe(uint32_t s, const sqe &e) const { real_sq[s] = e; }
	void ring_sq(uint32_t t) const { sq_rings.push_back(t); }
	void ring_cq(uint32_t h) const { cq_rings.push_back(h); }
	cqe real_cqe(uint32_t s) const { return real[s]; }
	void mirror_cqe(uint32_t s, const cqe &c) const { shadow[s] = c; }
	void completed(relay::Epoch) const {}
	void retire(uint16_t) const {}
};

static void submit(Model &m, uint32_t slot, uint8_t opcode, uint16_t cid)
{
	m.shadow_sq[slot] = sqe{};
	m.shadow_sq[slot].opc = opcode;
	m.shadow_sq[slot].cid = cid;
}

// The controller completes the command in real SQ slot sq_slot into real CQ slot slot.
static void complete(Model &m, uint32_t slot, uint32_t sq_slot, bool phase)
{
	m.real[slot] = cqe{};
	m.real[slot].cid = m.real_sq[sq_slot].cid;
	m.real[slot].dw0 = 0xabc;
	m.real[slot].sf = phase;
}

static bool phase(const cqe &c) { return c.sf & 1; }

static void accepted_commands_go_out_under_kernel_ids_and_come_back_under_the_files()
{
	Model m;
	relay::Relay r(7, D);
	relay::Counters c;
	submit(m, 0, 0x02, 0x1234);
	submit(m, 1, 0x01, 0x5678);
	m.tail = 2;
	r.step(m, c);
	CHECK(m.sq_rings == std::vector<uint32_t>{2});
	CHECK_EQ(c.sqes_accepted, 2u);
	CHECK_EQ(r.in_flight(), 2u);
	const uint16_t k0 = m.real_sq[0].cid, k1 = m.real_sq[1].cid;
	CHECK(k0 != k1 && k0 != 0x1234);
	complete(m, 0, 1, true);
	complete(m, 1, 0, true);
	r.step(m, c);
	const cqe *sh = m.shadow;
	CHECK_EQ(sh[0].cid, 0x5678);
	CHECK_EQ(sh[0].sqid, 7);
	CHECK_EQ(sh[0].sqhd, 2);
	CHECK_EQ(sh[0].dw0, 0xabcu);
	CHECK(phase(sh[0]));
	CHECK_EQ(sh[1].cid, 0x1234);
	CHECK(m.cq_rings == std::vector<uint32_t>{2});
	CHECK_EQ(r.in_flight(), 0u);
}

static void a_pass_spends_at_most_its_budget()
{
	Model m;
	relay::Relay r(1, D);
	relay::Counters c;
	r.set_budget(2);
	for (uint32_t s = 0; s < 3; s++)
		submit(m, s, 0x02, (uint16_t)s);
	m.tail = 3;
	CHECK(r.step(m, c));
	CHECK_EQ(c.sqes_accepted, 2u);
	CHECK(m.sq_rings == std::vector<uint32_t>{2});
	CHECK(r.step(m, c));
	CHECK_EQ(c.sqes_accepted, 3u);
	CHECK((m.sq_rings == std::vector<uint32_t>{2, 3}));
}

// What relay_pass steps: a pair of the model (relay.h `PairCtx`).
struct ModelPair {
	relay::Relay *relay;
	const Model *port;
	relay::Counters *counters;
	uint64_t idle_steps = 0;
	unsigned file = 0;
	uint64_t file_pass_checks_max = 0;
};

// bridge_thread.c's pass: file 0 has three pairs, each full of commands
// that cost 200 checks; file 1 one pair of cheap ones. One pass gives file
// 0 one BUDGET (its first pair takes two commands, 400 >= 256, the others
// none) and file 1 its own; the next pass starts one pair later, so file
// 0's second pair goes first. Alone on a thread, file 0's pairs each get a
// BUDGET.
static void a_file_shares_one_budget_per_pass_among_its_pairs()
{
	Model m[4];
	std::vector<relay::Relay> r;
	relay::Counters c[4];
	std::vector<ModelPair> pairs;
	std::vector<uint32_t> spent;
	for (unsigned i = 0; i < 4; i++) {
		r.emplace_back((uint16_t)(i + 1), D);
		for (uint32_t s = 0; s < D - 1; s++)
			submit(m[i], s, 0x02, (uint16_t)s);
		m[i].tail = D - 1;
		m[i].each = i < 3 ? 200 : 1;
	}
	for (unsigned i = 0; i < 4; i++)
		pairs.push_back(ModelPair{&r[i], &m[i], &c[i], 0, i < 3 ? 0u : 1u, 0});
	relay::relay_pass(pairs, 0, spent);
	CHECK_EQ(c[0].sqes_accepted, 2u);
	CHECK_EQ(c[1].sqes_accepted, 0u);
	CHECK_EQ(c[2].sqes_accepted, 0u);
	CHECK_EQ(c[3].sqes_accepted, 3u);
	CHECK_EQ(pairs[0].file_pass_checks_max, 400u);
	CHECK_EQ(pairs[2].file_pass_checks_max, 400u);
	CHECK_EQ(pairs[3].file_pass_checks_max, 3u);
	relay::relay_pass(pairs, 1, spent);
	CHECK_EQ(c[0].sqes_accepted, 2u);
	CHECK_EQ(c[1].sqes_accepted, 2u);
	CHECK_EQ(c[2].sqes_accepted, 0u);

	// File 0 alone: a budget per pair, no file counter.
	pairs.pop_back();
	relay::relay_pass(pairs, 0, spent);
	CHECK_EQ(c[0].sqes_accepted, 3u);
	CHECK_EQ(c[1].sqes_accepted, 3u);
	CHECK_EQ(c[2].sqes_accepted, 2u);
	CHECK_EQ(pairs[2].file_pass_checks_max, 400u);
}

static void rejected_commands_never_reach_the_controller()
{
	Model m;
	relay::Relay r(1, D);
	relay::Counters c;
	submit(m, 0, 0x7f, 42);
	m.tail = 1;
	r.step(m, c);
	CHECK(m.sq_rings.empty());
	CHECK_EQ(c.sqes_rejected, 1u);
	CHECK_EQ(c.sqes_accepted, 0u);
	const cqe e = m.shadow[0];
	CHECK_EQ(e.cid, 42);
	CHECK(phase(e));
	CHECK_EQ((e.sf >> 9) & 7, 0);    // SCT
	CHECK_EQ((e.sf >> 1) & 0xff, 1); // SC: Invalid Command Opcode
	CHECK_EQ(e.sf >> 15, 1);         // DNR
}

static void rings_only_on_change()
{
	Model m;
	relay::Relay r(1, D);
	relay::Counters c;
	for (int i = 0; i < 100; i++)
		r.step(m, c);
	submit(m, 0, 0x02, 1);
	m.tail = 1;
	for (int i = 0; i < 100; i++)
		r.step(m, c);
	CHECK(m.sq_rings == std::vector<uint32_t>{1});
	CHECK_EQ(c.polls, 200u);
	CHECK_EQ(c.sq_doorbell_writes, 1u);
	CHECK_EQ(c.cq_doorbell_writes, 0u);
}

static void a_full_shadow_cq_holds_back_new_commands()
{
	Model m;
	relay::Relay r(1, D);
	relay::Counters c;
	// Three rejected commands fill the shadow CQ (depth 4 holds 3).
	for (uint32_t s = 0; s < 3; s++)
		submit(m, s, 0x7f, (uint16_t)s);
	m.tail = 3;
	r.step(m, c);
	CHECK_EQ(c.sqes_rejected, 3u);
	// The file has not consumed them: the next command waits.
	submit(m, 3, 0x02, 9);
	m.tail = 0;
	r.step(m, c);
	CHECK_EQ(c.sqes_accepted, 0u);
	CHECK(m.sq_rings.empty());
	m.head = 3;
	r.step(m, c);
	CHECK_EQ(c.sqes_accepted, 1u);
	CHECK_EQ(r.in_flight(), 1u);
}

static void out_of_range_values_are_counted_not_used()
{
	Model m;
	relay::Relay r(1, D);
	relay::Counters c;
	m.tail = 9;
	m.head = 7;
	r.step(m, c);
	CHECK(m.sq_rings.empty());
	CHECK_EQ(c.bad_doorbell_values, 2u);
	r.step(m, c);
	CHECK_EQ(c.bad_doorbell_values, 2u);
	m.tail = 0xffffffffu;
	r.step(m, c);
	CHECK_EQ(c.bad_doorbell_values, 3u);
	// A sane value afterwards works.
	submit(m, 0, 0x02, 5);
	m.tail = 1;
	r.step(m, c);
	CHECK_EQ(c.sqes_accepted, 1u);
}

static void completions_for_unknown_ids_are_dropped()
{
	Model m;
	relay::Relay r(1, D);
	relay::Counters c;
	m.real[0] = cqe{};
	m.real[0].cid = 3;
	m.real[0].sf = 1;
	r.step(m, c);
	CHECK_EQ(c.cqes_mirrored, 0u);
	CHECK(!phase(m.shadow[0]));
	// The real CQ slot was consumed and its head rung.
	CHECK(m.cq_rings == std::vector<uint32_t>{1});
}

} // namespace bridge_tests

// ================================================ validate.rs KUnit tests

namespace validate_tests {

using namespace relay::validate;

// The file owns pages 0x10000..0x20000; the pool is 0x80000..0x82000.
struct Model {
	uint64_t pool[1024] = {};
	bool owns_page(uint64_t page) const { return page >= 0x10000 && page < 0x20000; }
	bool pool_entry(uint64_t addr, uint64_t *v) const
	{
		if (addr % 8 != 0 || !(addr >= 0x80000 && addr < 0x82000))
			return false;
		*v = pool[(addr - 0x80000) / 8];
		return true;
	}
};

static Limits limits()
{
	return Limits{{Ns{1, 9, 1000}}, 512 * 1024};
}

static sqe read(uint64_t slba, uint32_t blocks, uint64_t prp1, uint64_t prp2)
{
	sqe s{};
	s.opc = READ;
	s.nsid = 1;
	s.prp1 = prp1;
	s.prp2 = prp2;
	s.cdw10 = (uint32_t)slba;
	s.cdw11 = (uint32_t)(slba >> 32);
	s.cdw12 = blocks - 1;
	return s;
}

static Reject run(const sqe &s, const Model &m, sqe *out = nullptr)
{
	uint64_t list[128] = {};
	sqe o;
	Reject r = check(s, limits(), m, list, 128, 0xdead000, &o);
	if (out)
		*out = o;
	return r;
}

template <class F>
static sqe with(sqe s, F f)
{
	f(s);
	return s;
}

static void allow_list_and_fields()
{
	Model m;
	CHECK(run(read(0, 8, 0x10000, 0), m) == Reject::Ok);
	for (uint8_t op : {0x04, 0x05, 0x09, 0x0d, 0x7f, 0x80, 0xff})
		CHECK(run(with(read(0, 1, 0x10000, 0), [&](sqe &s) { s.opc = op; }), m) == Reject::Opcode);
	for (uint8_t flags : {1, 2, 0x40, 0x80, 0x04})
		CHECK(run(with(read(0, 1, 0x10000, 0), [&](sqe &s) { s.flags = flags; }), m) == Reject::Field);
	CHECK(run(with(read(0, 1, 0x10000, 0), [](sqe &s) { s.mptr = 0x10000; }), m) == Reject::Field);
	CHECK(run(with(read(0, 1, 0x10000, 0), [](sqe &s) { s.cdw12 = 1u << 26; }), m) == Reject::Field);
	CHECK(run(with(read(0, 1, 0x10000, 0), [](sqe &s) { s.cdw14 = 1; }), m) == Reject::Field);
	for (uint32_t nsid : {0u, 2u, 0xffffffffu})
		CHECK(run(with(read(0, 1, 0x10000, 0), [&](sqe &s) { s.nsid = nsid; }), m) == Reject::Namespace);
	// Flush carries nothing but its namespace to the controller.
	sqe f;
	CHECK(run(with(read(0, 1, 0, 0), [](sqe &s) { s.opc = FLUSH; s.prp1 = 0x1234; s.cdw10 = 9; }), m, &f) == Reject::Ok);
	CHECK_EQ(f.prp1, 0u);
	CHECK_EQ(f.cdw10, 0u);
	CHECK_EQ(f.nsid, 1u);
}

static void lba_range()
{
	Model m;
	CHECK(run(read(992, 8, 0x10000, 0), m) == Reject::Ok);
	CHECK(run(read(993, 8, 0x10000, 0), m) == Reject::LbaRange);
	CHECK(run(read(UINT64_MAX, 1, 0x10000, 0), m) == Reject::LbaRange);
	sqe wz = with(read(0, 1, 0, 0), [](sqe &s) { s.opc = WRITE_ZEROES; s.cdw12 = (1u << 25) | 999; });
	CHECK(run(wz, m) == Reject::Ok);
	CHECK(run(with(wz, [](sqe &s) { s.cdw10 = 1; }), m) == Reject::LbaRange);
}

static void prps_must_be_the_files()
{
	Model m;
	// One page at an offset, two pages, foreign pages.
	CHECK(run(read(0, 1, 0x10200, 0), m) == Reject::Ok);
	CHECK(run(read(0, 1, 0x20000, 0), m) == Reject::Field);
	CHECK(run(read(0, 1, 0x0f000, 0), m) == Reject::Field);
	CHECK(run(read(0, 1, 0x10002, 0), m) == Reject::Field);
	CHECK(run(read(0, 16, 0x10000, 0x11000), m) == Reject::Ok);
	CHECK(run(read(0, 16, 0x10000, 0x20000), m) == Reject::Field);
	CHECK(run(read(0, 16, 0x10000, 0x11008), m) == Reject::Field);
	// Within the first page PRP2 is not used and not passed on.
	sqe o;
	CHECK(run(read(0, 1, 0x10000, 0x9999), m, &o) == Reject::Ok);
	CHECK_EQ(o.prp2, 0u);
}

static void lists_are_copied_and_checked()
{
	Model m;
	for (int i = 0; i < 4; i++)
		m.pool[i] = 0x11000 + 0x1000 * (uint64_t)i;
	uint64_t list[128] = {};
	sqe ok;
	// 20 KiB from a page start: PRP1 + 4 list entries.
	CHECK(check(read(0, 40, 0x10000, 0x80000), limits(), m, list, 128, 0xdead000, &ok) == Reject::Ok);
	CHECK_EQ(ok.prp2, 0xdead000u);
	CHECK(list[0] == 0x11000 && list[1] == 0x12000 && list[2] == 0x13000 && list[3] == 0x14000);
	// A list outside the pool, or an entry the file does not own.
	CHECK(run(read(0, 40, 0x10000, 0x11000), m) == Reject::Field);
	m.pool[2] = 0x20000;
	CHECK(run(read(0, 40, 0x10000, 0x80000), m) == Reject::Field);
	m.pool[2] = 0x13008;
	CHECK(run(read(0, 40, 0x10000, 0x80000), m) == Reject::Field);
}

static void lists_chain_across_pool_pages()
{
	Model m;
	// A list starting 2 entries before the end of pool page 0: entry 0
	// there, then the chain pointer to pool page 1, which holds the rest.
	m.pool[510] = 0x11000;
	m.pool[511] = 0x81000;
	for (int i = 0; i < 3; i++)
		m.pool[512 + i] = 0x12000 + 0x1000 * (uint64_t)i;
	uint64_t list[128] = {};
	sqe ok;
	CHECK(check(read(0, 40, 0x10000, 0x80000 + 510 * 8), limits(), m, list, 128, 0xd000, &ok) == Reject::Ok);
	CHECK(list[0] == 0x11000 && list[1] == 0x12000 && list[2] == 0x13000 && list[3] == 0x14000);
	// A chain pointer out of the pool is refused.
	m.pool[511] = 0x12000;
	CHECK(run(read(0, 40, 0x10000, 0x80000 + 510 * 8), m) == Reject::Field);
}

static void transfer_limit_and_status()
{
	Model m;
	// 1025 blocks of 512 B, inside a large namespace: over the 512 KiB limit.
	Limits lim = limits();
	lim.ns[0].capacity = 1 << 20;
	uint64_t list[128] = {};
	sqe o;
	CHECK(check(read(0, 1025, 0x10000, 0x80000), lim, m, list, 128, 0, &o) == Reject::Field);
	CHECK_EQ(status(Reject::LbaRange), 0x8100);
	CHECK_EQ(status(Reject::Field), 0x8004);
	CHECK_EQ(list_entries(512 * 1024), 128u);
	CHECK_EQ(list_entries(4 << 20), 512u);
	CHECK_EQ(shared_max_transfer(0), 2u << 20);
	CHECK_EQ(shared_max_transfer(4 << 20), 2u << 20);
	CHECK_EQ(shared_max_transfer(128 << 10), 128u << 10);
}

// Not a Rust test: the guard on the kernel slot's length. With the pair
// sizing (list_entries from max_transfer) it cannot trigger, so call
// check() with a slot shorter than the list.
static void a_list_longer_than_the_kernel_slot_is_refused()
{
	Model m;
	for (int i = 0; i < 4; i++)
		m.pool[i] = 0x11000 + 0x1000 * (uint64_t)i;
	uint64_t list[4] = {};
	sqe o;
	CHECK(check(read(0, 40, 0x10000, 0x80000), limits(), m, list, 4, 0xd000, &o) == Reject::Ok);
	CHECK(check(read(0, 40, 0x10000, 0x80000), limits(), m, list, 3, 0xd000, &o) == Reject::Field);
}

static void check_cost_counts_the_pages_a_command_may_name()
{
	const Limits lim = limits();
	CHECK_EQ(check_cost(read(0, 8, 0, 0), lim), 3u);
	CHECK_EQ(check_cost(read(0, 1024, 0, 0), lim), 130u);
	CHECK_EQ(check_cost(read(0, 65535, 0, 0), lim), 130u);
	sqe flush = read(0, 1, 0, 0);
	flush.opc = FLUSH;
	CHECK_EQ(check_cost(flush, lim), 1u);
	sqe other = read(0, 1024, 0, 0);
	other.nsid = 7;
	CHECK_EQ(check_cost(other, lim), 1u);
}

} // namespace validate_tests

// ================================================= buffers.rs KUnit tests

namespace buffers_tests {

static void pages_are_owned_until_removed()
{
	relay::Buffers b;
	// Mapping 1: three contiguous pages and a stray one; mapping 2 overlaps.
	const uint64_t m1[] = {0x10000, 0x11000, 0x12000, 0x40000};
	const uint64_t m2[] = {0x11000, 0x12000, 0x13000};
	b.add(1, m1, 4);
	b.add(2, m2, 3);
	for (uint64_t p : {0x10000, 0x11000, 0x12000, 0x13000, 0x40000})
		CHECK(b.owns_page(p));
	for (uint64_t p : {0x0f000, 0x14000, 0x3f000, 0x41000, 0})
		CHECK(!b.owns_page(p));
	b.remove(2);
	CHECK(!b.owns_page(0x13000));
	CHECK(b.owns_page(0x12000));
	b.remove(1);
	CHECK(!b.owns_page(0x10000) && !b.owns_page(0x40000));
}

static void long_range_found_behind_short_ones()
{
	relay::Buffers b;
	std::vector<uint64_t> lng;
	for (uint64_t i = 0; i < 64; i++)
		lng.push_back(0x100000 + i * 4096);
	b.add(1, lng.data(), lng.size());
	const uint64_t m2[] = {0x101000, 0x120000};
	b.add(2, m2, 2);
	CHECK(b.owns_page(0x13f000));
	CHECK(!b.owns_page(0x140000));
}

} // namespace buffers_tests

// ============================================= randomized end to end test

namespace e2e {

using namespace relay::validate;
constexpr uint32_t NPAGES = 64;

// What the controller folds a real SQE into; the generator computes the
// same from what it meant. A list contributes every entry and its length.
static uint32_t fp_of(uint8_t opc, uint32_t nsid, uint64_t prp1, const uint64_t *list, size_t n,
		      uint64_t prp2, uint32_t cdw10, uint32_t cdw11, uint32_t cdw12, uint32_t cdw13)
{
	uint64_t a = prp2, b = 0;
	if (list) {
		a = 0x51;
		for (size_t i = 0; i < n; i++)
			a = (a ^ list[i]) * 0x100000001b3ull;
		b = n;
	}
	return mb::fingerprint(opc, nsid, prp1, a, b, cdw10, cdw11, cdw12, cdw13);
}

struct Expect {
	uint16_t status;    // CQE status field without the phase
	uint32_t fp;        // accepted: what must reach the controller
	bool accepted;
};

struct Rig {
	std::mt19937_64 rng;
	uint32_t D;
	relay::Buffers buffers;
	Limits limits;
	mb::Pair p;
	uint64_t foreign;
	// generator/client
	std::map<uint16_t, Expect> outstanding; // file cid -> expectation
	uint16_t seq = 1;
	uint64_t n_valid = 0, n_invalid = 0, reaped = 0, bad = 0;
	// controller: fetched, not yet completed (real cid, fp)
	std::vector<std::pair<uint16_t, uint32_t>> pending;
	uint64_t d_cmds = 0, d_full = 0, max_real_inflight = 0, max_mirror_used = 0;
	relay::Counters ctr;

	explicit Rig(uint64_t seed, uint32_t depth) : rng(seed), D(depth)
	{
		limits.ns = {Ns{1, 9, 1u << 20}, Ns{3, 12, 1u << 16}};
		limits.max_transfer = 512 * 1024;
		std::vector<uint64_t> pages;
		for (uint32_t k = 0; k < NPAGES; k++)
			pages.push_back(mb::page_addr(0, k, true)); // every other page
		buffers.add(1, pages.data(), pages.size());
		foreign = mb::page_addr(0, 3, false); // a gap between owned pages
		// Pool: two pages per SQ slot, so a list may chain.
		mb::init_pair(p, 5, D, &buffers, &limits, 2 * D);
		// Flow control is what this rig exercises: no per-pass budget.
		p.relay->set_budget(UINT32_MAX);
	}
	uint64_t rnd(uint64_t n) { return rng() % n; }
	uint64_t owned() { return mb::page_addr(0, (uint32_t)rnd(NPAGES), true); }
	uint64_t pool_dma() const { return p.port.pool_dma; }

	// A command of known verdict, for SQ slot `slot`.
	sqe make(uint32_t slot, Expect *x)
	{
		sqe s{};
		s.cid = seq;
		s.nsid = rnd(4) ? 1 : 3;
		const uint32_t shift = s.nsid == 1 ? 9 : 12;
		const uint64_t cap = s.nsid == 1 ? 1u << 20 : 1u << 16;
		s.opc = rnd(2) ? READ : WRITE;
		// Fields nobody checks: never passed on.
		s.cdw2 = (uint32_t)rng();
		s.cdw3 = (uint32_t)rng();
		s.cdw13 = (uint32_t)rng();
		s.cdw12 = (uint32_t)(rnd(3) == 0 ? (1u << 30) : 0); // FUA sometimes
		*x = Expect{0, 0, true};
		const int kind = (int)rnd(30);
		uint64_t blocks = 1;
		std::vector<uint64_t> list;
		bool chained = false;
		// shape: 0 one page, 1 two pages, 2 a list
		int shape = kind < 8 ? 0 : kind < 12 ? 1 : kind < 16 ? 2 : (int)rnd(3);
		// PRP1: a dword-aligned offset in an owned page.
		s.prp1 = owned() + (shape == 2 && rnd(2) ? 0 : 4 * rnd(1024));
		const uint64_t first = PAGE - (s.prp1 & (PAGE - 1));
		const uint64_t lb = 1ull << shift;
		auto blocks_for = [&](uint64_t lo, uint64_t hi) { // bytes in (lo, hi]
			uint64_t b = (lo + lb) / lb;
			uint64_t e = hi / lb;
			if (e < b)
				return (uint64_t)0;
			return b + rnd(e - b + 1);
		};
		if (shape == 0)
			blocks = std::max<uint64_t>(1, blocks_for(0, first));
		else if (shape == 1)
			blocks = blocks_for(first, first + PAGE);
		else
			blocks = blocks_for(first + PAGE, std::min<uint64_t>(first + 100 * PAGE, limits.max_transfer));
		if (blocks == 0) { // no block size fits the shape: one block
			shape = first >= lb ? 0 : (first + PAGE >= lb ? 1 : 2);
			blocks = 1;
		}
		const uint64_t len = blocks * lb;
		shape = len <= first ? 0 : len <= first + PAGE ? 1 : 2;
		const uint64_t slba = rnd(cap - blocks + 1);
		s.cdw10 = (uint32_t)slba;
		s.cdw11 = (uint32_t)(slba >> 32);
		s.cdw12 |= (uint32_t)(blocks - 1);
		uint64_t *pool = p.pool + (size_t)slot * 2 * (PAGE / 8); // this slot's two pool pages
		const uint64_t pool_at = pool_dma() + (uint64_t)slot * 2 * PAGE;
		if (shape == 0) {
			s.prp2 = rng(); // not used, not passed on
		} else if (shape == 1) {
			s.prp2 = owned();
		} else {
			const uint64_t n = div_ceil(len - first, PAGE);
			// Start anywhere in the first pool page; chain into the second
			// at its last entry if the list does not fit.
			const uint64_t start = rnd(512);
			uint64_t at = start;
			for (uint64_t i = 0; i < n; i++) {
				if (at == 511 && n - i > 1) {
					pool[511] = pool_at + PAGE; // chain pointer
					at = 512;
					chained = true;
				}
				const uint64_t e = owned();
				pool[at++] = e;
				list.push_back(e);
			}
			s.prp2 = pool_at + start * 8;
		}
		// The accepted command's image at the controller.
		const uint32_t dsm = s.cdw13 & 0xff;
		x->fp = fp_of(s.opc, s.nsid, s.prp1, shape == 2 ? list.data() : nullptr, list.size(),
			      shape == 0 ? 0 : s.prp2, s.cdw10, s.cdw11, s.cdw12, dsm);
		if (kind >= 16 && kind < 18) { // Flush: only the namespace goes on
			s.opc = FLUSH;
			x->fp = fp_of(FLUSH, s.nsid, 0, nullptr, 0, 0, 0, 0, 0, 0);
		} else if (kind >= 18 && kind < 20) { // Write Zeroes
			s.opc = WRITE_ZEROES;
			if (rnd(2))
				s.cdw12 |= 1u << 25;
			x->fp = fp_of(WRITE_ZEROES, s.nsid, 0, nullptr, 0, 0, s.cdw10, s.cdw11, s.cdw12, 0);
		} else if (kind >= 20) {
			// One rule broken; the status it must complete with.
			Reject why = Reject::Field;
			switch (rnd(17)) {
			case 0: s.flags = (uint8_t)(1 + rnd(255)); break;
			case 1: s.opc = (uint8_t)(0x03 + rnd(5)); if (s.opc == 0x08) s.opc = 0x7f; why = Reject::Opcode; break;
			case 2: s.nsid = rnd(2) ? 2 : 0; why = Reject::Namespace; break;
			case 3: s.mptr = owned(); break;
			case 4: s.cdw14 = 1; break;
			case 5: s.cdw15 = 0x100; break;
			case 6: s.cdw12 |= 1u << (24 + rnd(6)); break; // PRINFO/reserved (not 25 for R/W either)
			case 7: { uint64_t b = cap - rnd(blocks) ; s.cdw10 = (uint32_t)b; s.cdw11 = (uint32_t)(b >> 32); why = Reject::LbaRange; break; }
			case 8: s.cdw11 = 0xffffffffu; s.cdw10 = 0xffffffffu; why = Reject::LbaRange; break;
			case 9: s.prp1 = foreign + (s.prp1 & (PAGE - 4)); break;
			case 10: s.prp1 |= 1 + rnd(3); break;
			case 11:
				if (shape == 1) { s.prp2 = foreign; break; }
				if (shape == 2) { s.prp2 = owned(); break; } // a list not in the pool
				s.prp1 = foreign; break;
			case 12:
				if (shape == 1) { s.prp2 += 8; break; }
				if (shape == 2) { s.prp2 += 4; break; } // misaligned list pointer
				s.prp1 += 2; break;
			case 13: case 14:
				if (shape == 2) { // spoil an entry: foreign or misaligned
					uint64_t *e = &pool[(s.prp2 - pool_at) / 8 + rnd(std::min<uint64_t>(list.size(), 400))];
					if (*e == pool_at + PAGE) e++; // not the chain pointer
					*e = rnd(2) ? foreign : *e + 8;
					break;
				}
				s.prp1 = foreign; break;
			case 15:
				if (chained) {
					pool[511] = rnd(2) ? owned() : pool_at + PAGE + 8; // chain out of the pool / misaligned
					break;
				}
				s.flags = 0x40; break; // SGL
			default: { // over the transfer limit
				s.cdw12 = (s.cdw12 & ~0xffffu) | (s.nsid == 1 ? 1024u : 128u); // 1025 x 512 B / 129 x 4 KiB
				s.cdw10 = 0; s.cdw11 = 0;
				break;
			}
			}
			*x = Expect{status(why), 0, false};
		}
		return s;
	}

	// The file: random reaping and random batches, within its own rules.
	void client()
	{
		uint32_t n = 0, want = rnd(3) ? (uint32_t)-1 : (uint32_t)rnd(4);
		while (n < want) {
			const cqe *c = &p.shadow_cq[p.c_head];
			const uint32_t dw3 = __atomic_load_n((const uint32_t *)c + 3, __ATOMIC_ACQUIRE);
			if (((dw3 >> 16) & 1u) != p.c_phase)
				break;
			const uint32_t dw0 = ((const uint32_t *)c)[0];
			const uint16_t cid = (uint16_t)dw3, sf = (uint16_t)((dw3 >> 16) & ~1u);
			auto it = outstanding.find(cid);
			if (it == outstanding.end() || c->sqid != 5) {
				bad++;
			} else {
				const Expect &x = it->second;
				if (x.accepted) {
					// the controller fails 1 in 8 with a media error
					const uint16_t st = (x.fp % 8 == 0) ? (uint16_t)((1u << 15) | (0x281u << 1)) : 0;
					if (sf != st || dw0 != x.fp)
						bad++;
				} else if (sf != x.status) {
					bad++;
				}
				outstanding.erase(it);
			}
			if (++p.c_head == D) {
				p.c_head = 0;
				p.c_phase ^= 1;
			}
			reaped++;
			n++;
		}
		if (n || rnd(10) == 0 || !p.c_submit)
			__atomic_store_n((uint32_t *)(p.cells + relay::SHADOW_CQ_HEAD), p.c_head, __ATOMIC_RELEASE);
		if (!p.c_submit) { // draining: no new commands, every cell right
			__atomic_store_n((uint32_t *)(p.cells + relay::SHADOW_SQ_TAIL), p.c_tail, __ATOMIC_RELEASE);
			return;
		}
		const uint32_t room = D - 1 - (uint32_t)outstanding.size();
		const uint32_t b = room ? (uint32_t)rnd(room + 1) : 0;
		for (uint32_t i = 0; i < b; i++) {
			Expect x;
			sqe s = make(p.c_tail, &x);
			outstanding[s.cid] = x;
			(x.accepted ? n_valid : n_invalid)++;
			seq = (uint16_t)(seq + 1 + rnd(3));
			p.shadow_sq[p.c_tail] = s;
			p.c_tail = p.c_tail + 1 == D ? 0 : p.c_tail + 1;
		}
		if (b || rnd(10) == 0)
			__atomic_store_n((uint32_t *)(p.cells + relay::SHADOW_SQ_TAIL), p.c_tail, __ATOMIC_RELEASE);
		// Now and then an out-of-range value, put right on the next write.
		if (rnd(50) == 0)
			__atomic_store_n((uint32_t *)(p.cells + (rnd(2) ? relay::SHADOW_SQ_TAIL : relay::SHADOW_CQ_HEAD)),
					 D + (uint32_t)rnd(1000), __ATOMIC_RELEASE);
	}

	// The controller: fetch all exposed SQEs, complete a random subset in
	// random order, 1 in 8 (by fingerprint) with a media error.
	void controller()
	{
		const uint32_t db = swnvme::ld_acquire(&p.db->sq_tail_db);
		CHECK(db < D);
		while (p.d_head != db) {
			sqe e = p.real_sq[p.d_head];
			p.d_head = p.d_head + 1 == D ? 0 : p.d_head + 1;
			uint32_t spoil = (e.flags || e.mptr || e.cdw2 || e.cdw3 || e.cdw14 || e.cdw15) ? 1 : 0;
			const uint64_t lists = p.port.lists_dma;
			uint32_t f;
			if (e.prp2 >= lists && e.prp2 < lists + p.list_bytes) {
				if (e.prp2 != lists + (uint64_t)e.cid * p.list_entries * 8)
					spoil |= 2;
				const uint32_t shift = e.nsid == 1 ? 9 : 12;
				const uint64_t len = ((uint64_t)(e.cdw12 & 0xffff) + 1) << shift;
				const uint64_t n = div_ceil(len - (PAGE - (e.prp1 & (PAGE - 1))), PAGE);
				f = fp_of(e.opc, e.nsid, e.prp1, (const uint64_t *)(uintptr_t)e.prp2, n, 0,
					  e.cdw10, e.cdw11, e.cdw12, e.cdw13);
			} else {
				f = fp_of(e.opc, e.nsid, e.prp1, nullptr, 0, e.prp2, e.cdw10, e.cdw11, e.cdw12, e.cdw13);
			}
			pending.push_back({e.cid, f ^ spoil});
		}
		max_real_inflight = std::max<uint64_t>(max_real_inflight, pending.size());
		uint32_t k = pending.empty() ? 0 : (uint32_t)rnd(pending.size() + 1);
		while (k--) {
			const uint32_t head = swnvme::ld_acquire(&p.db->cq_head_db);
			if ((p.d_tail + 1) % D == head) {
				d_full++;
				break;
			}
			const size_t i = rnd(pending.size());
			const auto [cid, f] = pending[i];
			pending.erase(pending.begin() + (long)i);
			const uint32_t st = (f % 8 == 0) ? 0x4281u : 0; // DNR, SCT 2, SC 81h
			volatile uint32_t *c = (volatile uint32_t *)&p.real_cq[p.d_tail];
			c[0] = f;
			c[1] = 0;
			c[2] = p.d_head | 5u << 16;
			swnvme::st_release(&c[3], cid | p.d_phase << 16 | st << 17);
			if (++p.d_tail == D) {
				p.d_tail = 0;
				p.d_phase ^= 1;
			}
			d_cmds++;
		}
	}

	void step()
	{
		p.relay->step(p.port, ctr);
		CHECK(p.relay->in_flight() <= D - 1);
		// The mirror never holds more than depth-1 unconsumed entries.
		const uint64_t posted = ctr.cqes_mirrored + ctr.sqes_rejected;
		max_mirror_used = std::max<uint64_t>(max_mirror_used, posted - reaped);
		CHECK(posted - reaped <= D - 1);
	}
};

static void random_commands_come_back_once_with_their_verdict()
{
	for (uint32_t depth : {2u, 3u, 4u, 8u, 32u, 64u})
		for (uint64_t seed = 1; seed <= 3; seed++) {
			Rig r(seed * 1000 + depth, depth);
			for (int it = 0; it < 6000; it++) {
				r.client();
				r.step();
				r.controller();
			}
			r.p.c_submit = false;
			for (int it = 0; it < 100000 && !(r.outstanding.empty() && r.pending.empty()); it++) {
				r.client();
				r.step();
				r.controller();
			}
			CHECK(r.outstanding.empty());
			CHECK_EQ(r.bad, 0u);
			CHECK_EQ(r.ctr.sqes_accepted, r.n_valid);
			CHECK_EQ(r.ctr.sqes_rejected, r.n_invalid);
			CHECK_EQ(r.d_cmds, r.n_valid);
			CHECK_EQ(r.d_full, 0u); // the real CQ never filled
			CHECK(r.max_real_inflight <= depth - 1);
			CHECK(r.n_valid > 100 && r.n_invalid > 50);
			CHECK(r.ctr.bad_doorbell_values > 0);
			CHECK(r.ctr.sq_doorbell_writes <= r.ctr.polls);
			if (depth >= 8)
				CHECK(r.max_mirror_used == depth - 1); // flow control was exercised
		}
}

// Whatever a file writes into its shadow SQ and cells, the real SQ holds at
// most depth-1 commands, the real CQ never fills, every real completion
// maps back to one relayed command, and the relay never posts more into
// the CQ mirror than the room the file's last in-range head leaves.
static void a_hostile_file_cannot_overrun_the_real_queues()
{
	for (uint32_t depth : {2u, 4u, 16u})
		for (uint64_t seed = 1; seed <= 4; seed++) {
			Rig r(seed * 77 + depth, depth);
			uint32_t head = 0;
			for (int it = 0; it < 20000; it++) {
				// Random SQEs anywhere, random (sometimes lying) tail and head.
				for (int j = (int)r.rnd(4); j-- > 0;) {
					Expect x;
					sqe s = r.make((uint32_t)r.rnd(depth), &x);
					if (r.rnd(4) == 0) { // raw garbage
						uint64_t *w = (uint64_t *)&s;
						for (int i = 0; i < 8; i++)
							w[i] = r.rng();
					}
					r.p.shadow_sq[r.rnd(depth)] = s;
				}
				if (r.rnd(2))
					__atomic_store_n((uint32_t *)(r.p.cells + relay::SHADOW_SQ_TAIL),
							 (uint32_t)r.rnd(r.rnd(8) ? depth : 4 * depth), __ATOMIC_RELEASE);
				if (r.rnd(2)) {
					const uint32_t h = (uint32_t)r.rnd(r.rnd(8) ? depth : 4 * depth);
					__atomic_store_n((uint32_t *)(r.p.cells + relay::SHADOW_CQ_HEAD), h, __ATOMIC_RELEASE);
					if (h < depth)
						head = h; // what the relay goes by
				}
				// The mirror's room as the file's last in-range head gives it
				// (posted entries so far mod depth = the relay's CQ tail).
				const uint64_t before = r.ctr.cqes_mirrored + r.ctr.sqes_rejected;
				const uint32_t room = depth - 1 - (uint32_t)((before % depth + depth - head) % depth);
				r.p.relay->step(r.p.port, r.ctr);
				CHECK(r.ctr.cqes_mirrored + r.ctr.sqes_rejected - before <= room);
				CHECK(r.p.relay->in_flight() <= depth - 1);
				r.controller();
			}
			CHECK_EQ(r.d_full, 0u);
			CHECK(r.max_real_inflight <= depth - 1);
			// Every accepted command is either completed and mirrored, or still in flight.
			CHECK_EQ(r.ctr.sqes_accepted, r.ctr.cqes_mirrored + r.p.relay->in_flight());
			CHECK(r.ctr.sqes_accepted > 0 && r.ctr.sqes_rejected > 0);
		}
}

} // namespace e2e

// ================================================== the microbench's own checks

static void microbench_checks_hold_in_both_modes()
{
	for (mb::Config c : mb::standard(0.02, 1, {})) {
		c.pairs = 8;
		mb::Result r = mb::run(c);
		if (!r.ok())
			fprintf(stderr, "  %s\n", mb::json(r).c_str());
		CHECK(r.ok());
		// One pass of the single-thread loop always submits a full batch
		// (mixed: one rejected command in each 20).
		if (!c.cross) {
			CHECK(r.cmds > 0);
			CHECK(strcmp(c.mix, "mixed") ? r.rejected == 0 : r.rejected > 0);
		}
	}
}

int main()
{
	struct T {
		const char *name;
		void (*fn)();
	};
	const T tests[] = {
#define T_(ns, f) {#ns "::" #f, ns::f}
		T_(bridge_tests, accepted_commands_go_out_under_kernel_ids_and_come_back_under_the_files),
		T_(bridge_tests, a_pass_spends_at_most_its_budget),
		T_(bridge_tests, a_file_shares_one_budget_per_pass_among_its_pairs),
		T_(bridge_tests, rejected_commands_never_reach_the_controller),
		T_(bridge_tests, rings_only_on_change),
		T_(bridge_tests, a_full_shadow_cq_holds_back_new_commands),
		T_(bridge_tests, out_of_range_values_are_counted_not_used),
		T_(bridge_tests, completions_for_unknown_ids_are_dropped),
		T_(validate_tests, allow_list_and_fields),
		T_(validate_tests, lba_range),
		T_(validate_tests, prps_must_be_the_files),
		T_(validate_tests, lists_are_copied_and_checked),
		T_(validate_tests, lists_chain_across_pool_pages),
		T_(validate_tests, transfer_limit_and_status),
		T_(validate_tests, a_list_longer_than_the_kernel_slot_is_refused),
		T_(validate_tests, check_cost_counts_the_pages_a_command_may_name),
		T_(buffers_tests, pages_are_owned_until_removed),
		T_(buffers_tests, long_range_found_behind_short_ones),
		T_(e2e, random_commands_come_back_once_with_their_verdict),
		T_(e2e, a_hostile_file_cannot_overrun_the_real_queues),
		{"microbench_checks_hold_in_both_modes", microbench_checks_hold_in_both_modes},
#undef T_
	};
	int passed = 0, failed = 0, n = 0;
	printf("TAP version 13\n1..%zu\n", sizeof(tests) / sizeof(tests[0]));
	for (const T &t : tests) {
		g_fail_in_test = 0;
		t.fn();
		n++;
		if (g_fail_in_test) {
			failed++;
			printf("not ok %d %s (%d checks failed)\n", n, t.name, g_fail_in_test);
		} else {
			passed++;
			printf("ok %d %s\n", n, t.name);
		}
		fflush(stdout);
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
