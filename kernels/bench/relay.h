// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// relay.h - shared mode's validating relay (UAPI v2) ported to host C++ for
// the bench, rule for rule:
//
//   namespace validate  rust/bridge/validate.rs  `check`, `check_prps`,
//                                         `shared_max_transfer`, `list_entries`
//   class Buffers       rust/dma/buffers.rs   `Buffers::{add, remove, owns_page}`
//   class Relay         rust/bridge.rs    `Relay::{new, step, post, alloc_cid,
//                                         cq_room}` and `Counters`
//   struct PairPort     rust/bridge.rs    `KernelPort` (+ `Reach`): the real
//                                         memory of one shared pair
//   relay_thread_loop   rust/bridge/bridge_thread.c `gpunvme_relay_fn`: one pool
//                                         thread stepping its pairs
//
// Each block below names the Rust lines it follows. Where C++ has to say
// something Rust's types say (Option, Result, checked arithmetic), the
// comment says how. Two things differ from the kernel, and only in where
// the memory is: the "real doorbells" are the software fixture's doorbell
// cells (sw_nvme_fixture.h), not BAR0 MMIO, and the "DMA addresses" are
// whatever addresses the bench's controller (fixture or in-memory model)
// translates. The kernel's Mutex is std::mutex (both are one atomic RMW
// each way when uncontended) and ktime_get_ns() is CLOCK_MONOTONIC.
//
// Memory ordering, as in bridge.rs:
//   - shadow cells, shadow SQEs: read_volatile -> relaxed atomic loads; the
//     dma_mb(Read) after a new tail -> an acquire fence (so the tail load
//     acquires the SQEs the file wrote before it);
//   - real CQE: the phase-tag dword FIRST, dma_mb(Read) (acquire), then
//     dwords 0-2 (KernelPort::real_cqe);
//   - mirrored CQE: dwords 0-2, dma_mb(Write) (release fence), the
//     phase-tag dword LAST (KernelPort::mirror_cqe);
//   - real SQE: write_volatile of the whole entry, then the doorbell write
//     (writel: release) publishes it.
#ifndef GPUNVME_BENCH_RELAY_H
#define GPUNVME_BENCH_RELAY_H

#include <gpunvme/nvme.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <optional>
#include <thread>
#include <unistd.h>
#include <vector>

#include "sw_nvme_fixture.h"

namespace relay {

using gpunvme::cqe;
using gpunvme::sqe;

// ------------------------------------------------------------ validate.rs

namespace validate {

// `mod opcode`: NVM command set opcodes allowed in shared mode.
enum : uint8_t {
	FLUSH = 0x00,
	WRITE = 0x01,
	READ = 0x02,
	WRITE_ZEROES = 0x08,
};

// `enum Reject`: the generic status code (SCT 0) a refused SQE completes
// with. `Ok` is not a Rust variant: check() returns it for Result::Ok.
enum class Reject : uint16_t {
	Ok = 0,
	Opcode = 0x01,    // Invalid Command Opcode
	Field = 0x02,     // Invalid Field in Command
	Namespace = 0x0b, // Invalid Namespace or Format
	LbaRange = 0x80,  // LBA Out of Range
};

// `Reject::status`: the CQE status field (without the phase tag): SCT 0,
// this SC, DNR.
inline uint16_t status(Reject r) { return (uint16_t)((1u << 15) | ((unsigned)r << 1)); }

// `struct Ns`, `struct Limits`.
struct Ns {
	uint32_t nsid;
	uint32_t lba_shift; // log2 of the logical block size
	uint64_t capacity;
};

struct Limits {
	std::vector<Ns> ns;
	uint64_t max_transfer; // bytes; at most one list page's worth
};

constexpr uint64_t PAGE = 4096;
constexpr uint64_t ENTRIES_PER_PAGE = PAGE / 8;

// cdw12 bits a Read or Write may set besides NLB: LR (31) and FUA (30).
constexpr uint32_t RW_CDW12_ALLOWED = (1u << 31) | (1u << 30) | 0xffffu;
// Write Zeroes may also set DEAC (25).
constexpr uint32_t WZ_CDW12_ALLOWED = RW_CDW12_ALLOWED | (1u << 25);

inline uint64_t div_ceil(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

// `check_prps`: PRP1/PRP2 for a transfer of len bytes (NVMe base spec 2.0,
// 4.1.1). Mem is the `Memory` trait: owns_page(page), and pool_entry(addr,
// &v) returning false for Rust's None. `list` (list_len entries) is the
// kernel's list for this command at DMA address list_dma.
template <class Mem>
inline Reject check_prps(uint64_t prp1, uint64_t prp2, uint64_t len, const Mem &mem,
			 uint64_t *list, size_t list_len, uint64_t list_dma,
			 uint64_t *out1, uint64_t *out2)
{
	if ((prp1 & 3) != 0 || !mem.owns_page(prp1 & ~(PAGE - 1)))
		return Reject::Field;
	const uint64_t first = PAGE - (prp1 & (PAGE - 1));
	if (len <= first) {
		*out1 = prp1;
		*out2 = 0;
		return Reject::Ok;
	}
	if (len <= first + PAGE) {
		if ((prp2 & (PAGE - 1)) != 0 || !mem.owns_page(prp2))
			return Reject::Field;
		*out1 = prp1;
		*out2 = prp2;
		return Reject::Ok;
	}
	// A list: PRP2 points at it (8-byte aligned, in the pool); the last
	// entry of a list page points at the next page when more entries follow.
	const uint64_t n = div_ceil(len - first, PAGE);
	if (n > (uint64_t)list_len)
		return Reject::Field;
	uint64_t at = prp2;
	// for (i, slot) in list.iter_mut().take(n).enumerate()
	for (uint64_t i = 0; i < n; i++) {
		const uint64_t remaining = n - i;
		if (at % PAGE == PAGE - 8 && remaining > 1) {
			uint64_t next;
			if (!mem.pool_entry(at, &next)) // .ok_or(Reject::Field)?
				return Reject::Field;
			if (next % PAGE != 0)
				return Reject::Field;
			at = next;
		}
		uint64_t entry;
		if (!mem.pool_entry(at, &entry))
			return Reject::Field;
		if (entry == 0 || entry % PAGE != 0 || !mem.owns_page(entry)) // 0 ends a slot (`retire`)
			return Reject::Field;
		list[i] = entry; // *slot = entry
		at += 8;
	}
	*out1 = prp1;
	*out2 = list_dma;
	return Reject::Ok;
}

// `check_cost`: what checking s costs at most, in page checks: one, plus
// one per page a Read or Write of a known namespace may name, its length
// capped at the largest transfer checked.
inline uint32_t check_cost(const sqe &s, const Limits &lim)
{
	if (s.opc != READ && s.opc != WRITE)
		return 1;
	for (const Ns &n : lim.ns)
		if (n.nsid == s.nsid) {
			const uint64_t len = (uint64_t)((s.cdw12 & 0xffff) + 1) << n.lba_shift;
			return 1 + (uint32_t)(std::min(len, lim.max_transfer) / PAGE + 1);
		}
	return 1;
}

// `check`: on Ok, *out is the SQE to put in the real SQ (its command ID
// still to be set), built field by field, never copied whole.
template <class Mem>
inline Reject check(const sqe &s, const Limits &lim, const Mem &mem, uint64_t *list,
		    size_t list_len, uint64_t list_dma, sqe *out)
{
	// Fused (bits 1:0), reserved (5:2) and PSDT (7:6, anything but PRPs).
	if (s.flags != 0)
		return Reject::Field;
	// let allowed = match sqe.opcode { FLUSH => None, ... }
	bool has_allowed;
	uint32_t allowed = 0;
	switch (s.opc) {
	case FLUSH:
		has_allowed = false;
		break;
	case READ:
	case WRITE:
		has_allowed = true;
		allowed = RW_CDW12_ALLOWED;
		break;
	case WRITE_ZEROES:
		has_allowed = true;
		allowed = WZ_CDW12_ALLOWED;
		break;
	default:
		return Reject::Opcode;
	}
	// lim.ns.iter().find(|n| n.nsid == sqe.nsid).ok_or(Reject::Namespace)?
	const Ns *ns = nullptr;
	for (const Ns &n : lim.ns)
		if (n.nsid == s.nsid) {
			ns = &n;
			break;
		}
	if (!ns)
		return Reject::Namespace;
	// Sqe { opcode, nsid, ..Default::default() }
	*out = sqe{};
	out->opc = s.opc;
	out->nsid = s.nsid;
	if (!has_allowed)
		return Reject::Ok;
	if (s.mptr != 0 || s.cdw14 != 0 || s.cdw15 != 0 || (s.cdw12 & ~allowed) != 0)
		return Reject::Field;
	const uint64_t slba = (uint64_t)s.cdw10 | ((uint64_t)s.cdw11 << 32);
	const uint64_t nlb = (uint64_t)(s.cdw12 & 0xffffu) + 1;
	// slba.checked_add(nlb): Some(end) if end <= capacity; None (a wrap) refused.
	const uint64_t end = slba + nlb;
	if (end < slba || end > ns->capacity)
		return Reject::LbaRange;
	out->cdw10 = s.cdw10;
	out->cdw11 = s.cdw11;
	out->cdw12 = s.cdw12;
	if (s.opc == WRITE_ZEROES)
		return Reject::Ok;
	// Dataset management hints only; directives are not passed on.
	out->cdw13 = s.cdw13 & 0xffu;
	const uint64_t len = nlb << ns->lba_shift;
	if (len > lim.max_transfer)
		return Reject::Field;
	uint64_t p1, p2;
	Reject r = check_prps(s.prp1, s.prp2, len, mem, list, list_len, list_dma, &p1, &p2);
	if (r != Reject::Ok)
		return r;
	out->prp1 = p1;
	out->prp2 = p2;
	return Reject::Ok;
}

// `shared_max_transfer`: MDTS (0: none), capped so that one page of list
// entries covers it (2 MiB).
inline uint32_t shared_max_transfer(uint32_t mdts_bytes)
{
	const uint32_t cap = (uint32_t)(ENTRIES_PER_PAGE * PAGE);
	return mdts_bytes == 0 ? cap : std::min(mdts_bytes, cap);
}

// `list_entries`: entries one command's list needs at most.
inline uint64_t list_entries(uint64_t max_transfer)
{
	return std::clamp<uint64_t>(div_ceil(max_transfer, PAGE), 1, ENTRIES_PER_PAGE);
}

// qpair.rs `QPair::alloc`: "a power of two of entries per command, so no
// list crosses a page", and the pool and the lists are each
// round_to_page(depth * list_entries * 8) bytes.
inline size_t pair_list_entries(uint64_t max_transfer)
{
	size_t n = (size_t)list_entries(max_transfer), p = 1;
	while (p < n)
		p <<= 1;
	return p;
}

inline size_t pair_list_bytes(uint32_t depth, size_t list_entries)
{
	size_t b = (size_t)depth * list_entries * 8;
	return (b + PAGE - 1) / PAGE * PAGE;
}

} // namespace validate

// ------------------------------------------------------------- buffers.rs

// The DMA pages one open file mapped: the only pages its shared-mode
// commands may name. Ranges sorted by start; `longest` bounds how far back
// a lookup scans. Relays check against a copy of their own (`View`),
// refreshed when `generation` moved (every change bumps it under the lock),
// and count accepted commands in their own counter shard
// (`admit_checked`), as the Rust does.
using Epoch = uint8_t;
constexpr size_t SHARDS = 8;
inline size_t shard_of(uint16_t qid) { return qid % SHARDS; }

struct Range {
	uint64_t start, end;
	uint32_t handle;
};

// `owns`: does a range of `list` (sorted by start, none longer than
// `longest`) hold the 4 KiB page at `page`?
inline bool owns(const std::vector<Range> &list, uint64_t longest, uint64_t page)
{
	// let at = partition_point(|r| r.start <= page);
	size_t at = (size_t)(std::partition_point(list.begin(), list.end(),
						  [&](const Range &r) { return r.start <= page; }) -
			     list.begin());
	// list[..at].iter().rev().take_while(|r| r.start + longest > page)
	//           .any(|r| page + PAGE <= r.end)
	for (size_t i = at; i-- > 0;) {
		const Range &r = list[i];
		if (!(r.start + longest > page))
			break;
		if (page + 4096 <= r.end)
			return true;
	}
	return false;
}

// `View`: a relay's copy of the file's pages and epoch.
struct View {
	uint64_t generation = UINT64_MAX; // never a generation: the first check copies
	std::vector<Range> list;
	uint64_t longest = 0;
	Epoch epoch = 0;
	bool owns_page(uint64_t page) const { return owns(list, longest, page); }
};

class Buffers {
public:
	// `add`: record the pages of mapping `handle` (one DMA address per
	// 4 KiB page), merging runs of contiguous pages.
	void add(uint32_t handle, const uint64_t *pages, size_t n)
	{
		std::vector<Range> runs;
		for (size_t i = 0; i < n; i++) {
			const uint64_t p = pages[i];
			if (!runs.empty() && runs.back().end == p)
				runs.back().end += PAGE;
			else
				runs.push_back({p, p + PAGE, handle});
		}
		std::lock_guard<std::mutex> g(m_);
		for (const Range &r : runs) {
			// partition_point(|x| x.start <= r.start)
			auto at = std::partition_point(list_.begin(), list_.end(),
						       [&](const Range &x) { return x.start <= r.start; });
			longest_ = std::max(longest_, r.end - r.start);
			list_.insert(at, r);
		}
		changed();
	}

	// `remove`: forget mapping `handle`.
	void remove(uint32_t handle)
	{
		std::lock_guard<std::mutex> g(m_);
		list_.erase(std::remove_if(list_.begin(), list_.end(),
					   [&](const Range &r) { return r.handle == handle; }),
			    list_.end());
		changed();
	}

	// `admit_checked`: check one command against `view` (refreshed when the
	// pages changed) and, if it passes, count it in shard `shard`; the
	// count (fully ordered) comes before `generation` is read again, so a
	// change meanwhile makes it check again. `check(view)` returns Ok or
	// why not; *epoch gets the epoch for `complete`.
	template <class Check>
	validate::Reject admit_checked(View &view, size_t shard, Epoch *epoch, Check check) const
	{
		std::atomic<uint32_t> *counts = shards_[shard % SHARDS].n;
		for (;;) {
			if (generation_.load(std::memory_order_acquire) != view.generation)
				refresh(view);
			const validate::Reject why = check(static_cast<const View &>(view));
			if (why != validate::Reject::Ok)
				return why;
			const Epoch e = view.epoch;
			counts[e].fetch_add(1, std::memory_order_seq_cst);
			if (generation_.load(std::memory_order_relaxed) == view.generation) {
				*epoch = e;
				return why;
			}
			counts[e].fetch_sub(1, std::memory_order_release);
		}
	}

	// `complete`: n commands counted in epoch e in shard `shard` completed.
	void complete(Epoch e, uint32_t n, size_t shard) const
	{
		if (n)
			shards_[shard % SHARDS].n[e & 1].fetch_sub(n, std::memory_order_release);
	}

	// `counted`: commands counted in epoch e, over all shards.
	uint32_t counted(Epoch e) const
	{
		uint32_t n = 0;
		for (const Shard &s : shards_)
			n += s.n[e & 1].load(std::memory_order_acquire);
		return n;
	}

	// `Buffers::owns_page` (KUnit only in the Rust): lock, then look.
	bool owns_page(uint64_t page) const
	{
		std::lock_guard<std::mutex> g(m_);
		return owns(list_, longest_, page);
	}

	size_t ranges() const
	{
		std::lock_guard<std::mutex> g(m_);
		return list_.size();
	}

private:
	static constexpr uint64_t PAGE = 4096;
	struct alignas(64) Shard {
		std::atomic<uint32_t> n[2] = {{0}, {0}};
	};

	// `changed` (lock held): fully ordered, as a revoke reads the counts
	// after it.
	void changed() { generation_.fetch_add(1, std::memory_order_seq_cst); }

	// `refresh`: copy the pages into `view`.
	void refresh(View &view) const
	{
		std::lock_guard<std::mutex> g(m_);
		view.list = list_;
		view.longest = longest_;
		view.epoch = epoch_;
		view.generation = generation_.load(std::memory_order_relaxed);
	}

	mutable std::mutex m_;
	std::vector<Range> list_;
	uint64_t longest_ = 0;
	Epoch epoch_ = 0;
	std::atomic<uint64_t> generation_{0};
	mutable Shard shards_[SHARDS];
};

// -------------------------------------------------------------- bridge.rs

// Offsets of the two shadow cells in the shadow page (own cache lines).
constexpr uint32_t SHADOW_SQ_TAIL = 0;
constexpr uint32_t SHADOW_CQ_HEAD = 64;

// `Counters`: shown in debugfs, in this order.
// Each pair's own cache line (in the kernel each sits in its pair's Ctx).
struct alignas(64) Counters {
	uint64_t polls = 0;
	uint64_t sq_doorbell_writes = 0;
	uint64_t cq_doorbell_writes = 0;
	uint64_t cqes_mirrored = 0;
	uint64_t max_sq_tail = 0;
	uint64_t bad_doorbell_values = 0;
	uint64_t sqes_accepted = 0;
	uint64_t sqes_rejected = 0;
	uint64_t relay_ns = 0; // written by the thread loop (bridge_thread.c)

	void add(const Counters &o)
	{
		polls += o.polls;
		sq_doorbell_writes += o.sq_doorbell_writes;
		cq_doorbell_writes += o.cq_doorbell_writes;
		cqes_mirrored += o.cqes_mirrored;
		max_sq_tail = std::max(max_sq_tail, o.max_sq_tail);
		bad_doorbell_values += o.bad_doorbell_values;
		sqes_accepted += o.sqes_accepted;
		sqes_rejected += o.sqes_rejected;
		relay_ns += o.relay_ns;
	}
};

inline bool cqe_phase(const cqe &c) { return c.sf & 1u; }

// `Relay`: relay state for one queue pair, for its whole lifetime. Port is
// the Rust `Port` trait (statically dispatched there too: `&impl Port`):
//   uint32_t shadow_sq_tail(); uint32_t shadow_cq_head();
//   sqe shadow_sqe(slot);      // a copy, read once
//   Reject validate(const sqe &, uint16_t cid, sqe *out, Epoch *e); uint32_t cost(const sqe &);
//   void completed(Epoch); void retire(uint16_t cid);
//   void write_real_sqe(slot, const sqe &); void ring_sq(tail); void ring_cq(head);
//   cqe real_cqe(slot); void mirror_cqe(slot, const cqe &);
// `BUDGET`: page checks one pass spends on one file's new commands at most
// (shared by its pairs where a thread serves several files; a pair's own
// where it serves one).
constexpr uint32_t BUDGET = 256;

// `Step`: whether anything moved, and the page checks spent on new commands.
struct Step {
	uint32_t spent;
	bool progress;
};

class Relay {
public:
	// `Relay::new`
	Relay(uint16_t qid, uint32_t depth) : qid_(qid), depth_(depth), inflight_(depth) {}

	// Commands started on the controller and not yet completed.
	uint32_t in_flight() const { return in_flight_; }
	// Bench only: the budget a pair gets where its thread serves one file
	// (the kernel's is always BUDGET).
	void set_budget(uint32_t b) { budget_ = b; }
	uint32_t budget() const { return budget_; }

	// `step`: one pass with the pair's whole budget; true when anything moved.
	template <class Port>
	bool step(const Port &port, Counters &c)
	{
		return step_within(port, c, budget_).progress;
	}

	// `step_within`: completions all mirrored; new commands taken while
	// fewer than `budget` page checks were spent (none with 0).
	template <class Port>
	Step step_within(const Port &port, Counters &c, uint32_t budget)
	{
		bool progress = false;
		c.polls += 1;

		const uint32_t head = port.shadow_cq_head();
		if (head < depth_) {
			user_head_ = head;
		} else if (head != last_bad_head_) {
			c.bad_doorbell_values += 1;
			last_bad_head_ = head;
		}

		// Completions first: they make room for new commands.
		bool reaped = false;
		while (cq_room() > 0) {
			const cqe e = port.real_cqe(real_head_);
			if (cqe_phase(e) != real_phase_)
				break;
			real_head_ = next(real_head_);
			if (real_head_ == 0)
				real_phase_ = !real_phase_;
			reaped = true;
			// Only the relay submits on this queue, so every command ID
			// is one it gave out; anything else is dropped, not mirrored.
			// inflight.get_mut(cid).and_then(Option::take)
			if (e.cid >= depth_ || !inflight_[e.cid])
				continue;
			const uint16_t user_cid = inflight_[e.cid]->first;
			const Epoch epoch = inflight_[e.cid]->second;
			inflight_[e.cid].reset();
			in_flight_ -= 1;
			post(port, user_cid, e.dw0, e.sf);
			port.retire(e.cid);
			port.completed(epoch);
			c.cqes_mirrored += 1;
		}
		if (reaped) {
			port.ring_cq(real_head_);
			c.cq_doorbell_writes += 1;
			progress = true;
		}

		const uint32_t tail = port.shadow_sq_tail();
		if (tail < depth_) {
			tail_ = tail;
		} else if (tail != last_bad_tail_) {
			// Out of range: never acted on; counted once per distinct value.
			c.bad_doorbell_values += 1;
			last_bad_tail_ = tail;
		}
		if (tail_ != sq_head_)
			// dma_mb(Read): the shadow SQEs up to the tail were written before it.
			std::atomic_thread_fence(std::memory_order_acquire);
		bool submitted = false;
		uint32_t spent = 0; // page checks this pass (`budget`)
		while (tail_ != sq_head_ && in_flight_ + 1 < depth_ && in_flight_ < cq_room() &&
		       spent < budget) {
			const sqe s = port.shadow_sqe(sq_head_);
			spent += port.cost(s); // saturating in Rust; far below 2^32 here
			sq_head_ = next(sq_head_);
			progress = true;
			// let Some(cid) = self.alloc_cid() else { break }; (the loop
			// condition leaves at least two IDs free, so never taken)
			std::optional<uint16_t> cid = alloc_cid();
			if (!cid)
				break;
			sqe real;
			Epoch epoch = 0;
			const validate::Reject why = port.validate(s, *cid, &real, &epoch);
			if (why == validate::Reject::Ok) {
				real.cid = *cid;
				port.write_real_sqe(real_tail_, real);
				real_tail_ = next(real_tail_);
				inflight_[*cid] = std::make_pair(s.cid, epoch);
				in_flight_ += 1;
				c.sqes_accepted += 1;
				submitted = true;
			} else {
				// A list refused halfway was partly copied.
				port.retire(*cid);
				post(port, s.cid, 0, validate::status(why));
				c.sqes_rejected += 1;
			}
		}
		if (submitted) {
			port.ring_sq(real_tail_);
			c.sq_doorbell_writes += 1;
			c.max_sq_tail = std::max<uint64_t>(c.max_sq_tail, real_tail_);
		}
		return Step{spent, progress};
	}

private:
	uint32_t next(uint32_t i) const { return i + 1 == depth_ ? 0 : i + 1; }

	// `cq_room`: free entries of the shadow CQ, as the file's head says.
	uint32_t cq_room() const
	{
		const uint32_t used = (cq_tail_ + depth_ - user_head_) % depth_;
		return depth_ - 1 - used;
	}

	// `post`: one CQE into the shadow CQ at cq_tail with the current phase.
	template <class Port>
	void post(const Port &port, uint16_t cid, uint32_t result, uint16_t status)
	{
		cqe e{};
		e.dw0 = result;
		e.dw1 = 0;
		e.sqhd = (uint16_t)sq_head_;
		e.sqid = qid_;
		e.cid = cid;
		e.sf = (uint16_t)((status & ~1u) | (cq_phase_ ? 1u : 0u));
		port.mirror_cqe(cq_tail_, e);
		cq_tail_ = next(cq_tail_);
		if (cq_tail_ == 0)
			cq_phase_ = !cq_phase_;
	}

	// `alloc_cid`: the next free kernel command ID, round robin.
	std::optional<uint16_t> alloc_cid()
	{
		for (uint32_t k = 0; k < depth_; k++) {
			const uint32_t cid = next_cid_;
			next_cid_ = next(cid);
			if (!inflight_[cid])
				return (uint16_t)cid;
		}
		return std::nullopt;
	}

	uint16_t qid_;
	uint32_t depth_;
	uint32_t budget_ = BUDGET;
	uint32_t sq_head_ = 0;   // next shadow SQ slot to take
	uint32_t tail_ = 0;      // last in-range shadow tail the file wrote
	uint32_t real_tail_ = 0;
	uint32_t real_head_ = 0;
	bool real_phase_ = true;
	uint32_t cq_tail_ = 0;   // next shadow CQ slot and its phase
	bool cq_phase_ = true;
	uint32_t user_head_ = 0; // the file's last in-range head
	// File cid and admission epoch per kernel cid.
	std::vector<std::optional<std::pair<uint16_t, Epoch>>> inflight_;
	uint32_t in_flight_ = 0;
	uint32_t next_cid_ = 0;
	uint32_t last_bad_tail_ = UINT32_MAX;
	uint32_t last_bad_head_ = UINT32_MAX;
};

// `PairMemory` + `KernelPort` + `Reach`: where one shared pair's memory is.
// Host pointers; the *_dma fields are the addresses the controller and the
// file use for the PRP pool and the kernel's lists.
struct PairPort {
	sqe *real_sq = nullptr;
	const cqe *real_cq = nullptr;
	uint8_t *cells = nullptr;          // shadow page: SQ tail at 0, CQ head at 64
	const sqe *shadow_sq = nullptr;
	cqe *shadow_cq = nullptr;
	const uint8_t *pool = nullptr;     // the pair's PRP pool
	uint64_t pool_dma = 0;
	size_t pool_bytes = 0;
	uint64_t *lists = nullptr;         // kernel lists: list_entries per cid
	uint64_t lists_dma = 0;
	size_t list_entries = 0;
	swnvme::regs *real_db = nullptr;   // the controller's doorbells (BAR0 in the kernel)
	const Buffers *buffers = nullptr;
	const validate::Limits *limits = nullptr;
	uint16_t qid = 0;
	mutable View view; // this relay's copy of the file's pages

	// `Reach`: what a validation may read (validate::Memory).
	struct Reach {
		const PairPort &p;
		const View &v;
		bool owns_page(uint64_t page) const { return v.owns_page(page); }
		bool pool_entry(uint64_t addr, uint64_t *v) const
		{
			// let off = addr.checked_sub(pool_dma)?;
			if (addr < p.pool_dma)
				return false;
			const uint64_t off = addr - p.pool_dma;
			// off % 8 != 0 || off + 8 > pool_bytes (written so it cannot wrap)
			if (off % 8 != 0 || off > p.pool_bytes || p.pool_bytes - off < 8)
				return false;
			// Read once; only the copy is used (the file may write it now).
			*v = __atomic_load_n((const uint64_t *)(p.pool + off), __ATOMIC_RELAXED);
			return true;
		}
	};

	uint32_t shadow_sq_tail() const
	{
		return __atomic_load_n((const uint32_t *)(cells + SHADOW_SQ_TAIL), __ATOMIC_RELAXED);
	}
	uint32_t shadow_cq_head() const
	{
		return __atomic_load_n((const uint32_t *)(cells + SHADOW_CQ_HEAD), __ATOMIC_RELAXED);
	}
	// read_volatile of the 64-byte SQE: a copy, and only the copy is used.
	sqe shadow_sqe(uint32_t slot) const
	{
		const uint64_t *src = (const uint64_t *)&shadow_sq[slot];
		uint64_t w[8];
		for (int i = 0; i < 8; i++)
			w[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
		sqe s;
		__builtin_memcpy(&s, w, sizeof(s));
		return s;
	}
	uint32_t cost(const sqe &s) const { return validate::check_cost(s, *limits); }
	validate::Reject validate(const sqe &s, uint16_t cid, sqe *out, Epoch *epoch) const
	{
		const size_t at = (size_t)cid * list_entries;
		return buffers->admit_checked(view, shard_of(qid), epoch, [&](const View &v) {
			return validate::check(s, *limits, Reach{*this, v}, lists + at, list_entries,
					       lists_dma + (uint64_t)at * 8, out);
		});
	}
	void completed(Epoch e) const { buffers->complete(e, 1, shard_of(qid)); }
	// `retire`: the kernel list slot of a command no longer in flight goes
	// back to zero (up to the first zero: what it wrote).
	void retire(uint16_t cid) const
	{
		uint64_t *l = lists + (size_t)cid * list_entries;
		for (size_t i = 0; i < list_entries && l[i]; i++)
			l[i] = 0;
	}
	void write_real_sqe(uint32_t slot, const sqe &s) const
	{
		uint64_t w[8];
		__builtin_memcpy(w, &s, sizeof(w));
		uint64_t *dst = (uint64_t *)&real_sq[slot];
		for (int i = 0; i < 8; i++)
			__atomic_store_n(&dst[i], w[i], __ATOMIC_RELAXED);
	}
	void ring_sq(uint32_t tail) const { swnvme::st_release(&real_db->sq_tail_db, tail); }
	void ring_cq(uint32_t head) const { swnvme::st_release(&real_db->cq_head_db, head); }
	// The dword with the phase tag first, then (after a read barrier) the
	// rest: whatever the phase says, the rest is at least as new.
	cqe real_cqe(uint32_t slot) const
	{
		const uint32_t *src = (const uint32_t *)&real_cq[slot];
		uint32_t w[4];
		w[3] = __atomic_load_n(&src[3], __ATOMIC_RELAXED);
		std::atomic_thread_fence(std::memory_order_acquire); // dma_mb(Read)
		for (int i = 0; i < 3; i++)
			w[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
		cqe c;
		__builtin_memcpy(&c, w, sizeof(c));
		return c;
	}
	// The first 12 bytes; a write barrier; the dword with the phase tag.
	void mirror_cqe(uint32_t slot, const cqe &c) const
	{
		uint32_t w[4];
		__builtin_memcpy(w, &c, sizeof(w));
		uint32_t *dst = (uint32_t *)&shadow_cq[slot];
		for (int i = 0; i < 3; i++)
			__atomic_store_n(&dst[i], w[i], __ATOMIC_RELAXED);
		std::atomic_thread_fence(std::memory_order_release); // dma_mb(Write)
		__atomic_store_n(&dst[3], w[3], __ATOMIC_RELAXED);
	}
};

// -------------------------------------------------------- bridge_thread.c

inline uint64_t ktime_get_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

inline void cpu_relax()
{
#if defined(__x86_64__) || defined(__i386__)
	asm volatile("pause" ::: "memory");
#elif defined(__aarch64__)
	asm volatile("yield" ::: "memory");
#endif
}

// One relay's work on one pair: what `gpunvme_bridge_step(ctx, budget)` runs.
struct PairCtx {
	Relay *relay;
	const PairPort *port;
	Counters *counters;
	uint64_t idle_steps = 0; // bench only: steps that moved nothing
	unsigned file = 0;       // its file (the kernel's `gpunvme_relay_file`), 0..
	uint64_t file_pass_checks_max = 0; // the debugfs counter of that name
};

// One pass of a pool thread over `pairs`, starting at pair `first` (the
// kernel turns its list by one each pass): where the thread serves several
// files, a file's pairs share BUDGET page checks for new commands; where
// it serves one, each pair gets its own budget. `spent` is scratch, one
// entry per file. What moved and whether a pair has commands in flight.
struct PassResult {
	bool progress, busy;
};
template <class P>
inline PassResult relay_pass(std::vector<P> &pairs, size_t first, std::vector<uint32_t> &spent)
{
	PassResult r{false, false};
	unsigned nfiles = 0;
	spent.assign(spent.size(), 0);
	for (const P &b : pairs) {
		if (b.file >= spent.size())
			spent.resize(b.file + 1, 0);
	}
	for (size_t f = 0; f < spent.size(); f++)
		for (const P &b : pairs)
			if (b.file == f) {
				nfiles++;
				break;
			}
	const bool shared = nfiles > 1;
	for (size_t k = 0; k < pairs.size(); k++) {
		P &b = pairs[(first + k) % pairs.size()];
		const uint32_t budget = shared ? BUDGET - std::min(spent[b.file], BUDGET) : b.relay->budget();
		const uint64_t start = ktime_get_ns();
		const Step s = b.relay->step_within(*b.port, *b.counters, budget);
		b.counters->relay_ns += ktime_get_ns() - start;
		spent[b.file] += s.spent;
		b.idle_steps += !s.progress;
		r.progress |= s.progress;
		r.busy |= b.relay->in_flight() != 0;
	}
	if (shared)
		for (P &b : pairs)
			b.file_pass_checks_max = std::max<uint64_t>(b.file_pass_checks_max, spent[b.file]);
	return r;
}

// How long a thread keeps spinning after it last moved something (the
// module's relay_spin_us default), and while a pair has commands on the
// controller (GPUNVME_BRIDGE_BUSY_SPIN_NS).
constexpr uint64_t SPIN_NS = 200 * 1000;
constexpr uint64_t BUSY_SPIN_NS = 10 * 1000 * 1000;

// `gpunvme_relay_fn`: one pool thread. Each pass takes the thread's lock,
// steps every pair it serves (`relay_pass`), timing each step into that pair's relay_ns;
// on progress it passes again at once, otherwise it spins for SPIN_NS
// (BUSY_SPIN_NS while a pair has commands in flight) after the last
// progress, then sleeps 20 us doubling to 1 ms
// (usleep_range(s, s + s/2): the caller may set the timer slack).
// `pairs` is the thread's list; `stop` is kthread_should_stop().
inline void relay_thread_loop(std::vector<PairCtx> &pairs, std::mutex &lock,
			      const std::atomic<bool> &stop)
{
	unsigned sleep_us = 20;
	uint64_t last = ktime_get_ns();
	std::vector<uint32_t> spent;
	size_t first = 0;
	while (!stop.load(std::memory_order_relaxed)) {
		bool progress = false, busy = false;
		{
			std::lock_guard<std::mutex> g(lock);
			const PassResult r = relay_pass(pairs, first, spent);
			first = pairs.empty() ? 0 : (first + 1) % pairs.size();
			progress = r.progress;
			busy = r.busy;
		}
		if (progress) {
			last = ktime_get_ns();
			sleep_us = 20;
			continue; // cond_resched()
		}
		if (ktime_get_ns() - last < (busy ? BUSY_SPIN_NS : SPIN_NS)) {
			cpu_relax();
			continue;
		}
		usleep(sleep_us);
		sleep_us = std::min(sleep_us * 2, 1000u);
	}
}

} // namespace relay

#endif // GPUNVME_BENCH_RELAY_H
