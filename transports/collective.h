#pragma once
// Collectives on any Transport: ring all-reduce (float sum), broadcast, barrier and all-gather over a
// Communicator, a sorted subset of the transport's ranks that shares a membership epoch.
//
// Contract
// - Every member calls the same collectives in the same order with buffers of the same size (broadcast:
//   the same root). A member that disagrees gets InvalidArgument naming the sender and sizes, or a Timeout.
// - Every call carries a deadline and never hangs: each wait watches ALL members, so the death of any member
//   (not only a ring neighbour) aborts the call on every survivor with PeerLost(rank) naming the lost rank as
//   soon as the transport reports it; an unresponsive member trips the deadline (Timeout). A failed call
//   leaves the buffer's contents unspecified and cancels what it had posted.
// - Rebuilding after a failure: rebuildCommunicator() from the survivors with a higher epoch, over the same
//   transport. Tags carry the epoch, so messages of an aborted collective of an older epoch never match.
// - A Communicator is used by one thread at a time (its sequence number advances with every call).
//
// Tags (48-bit user space of transport.h): bit 47 set marks a collective, so collectives never match a
// strategy's point-to-point traffic, which must keep bit 47 clear (tag <= kMaxP2pTag).
//   bit  47     : 1 (collective)
//   bits 46..35 : epoch mod 2^12
//   bits 34..16 : the communicator's operation sequence number mod 2^19
//   bits 15..0  : step within the operation (ring step, barrier round)
//
// Algorithms
// - allreduce, chosen by size as MPI libraries do (CollectiveOptions::algorithm). Every member ends with
//   bit-identical sums: the ring and halving-doubling reduce each element in one place, and recursive
//   doubling adds the same two operands on both sides of each exchange.
//   - ring: ring reduce-scatter then ring all-gather (2(N-1) steps). Each of the N segments is cut into
//     chunks of about `chunk_bytes`; chunks flow through the steps in a pipeline: a chunk is forwarded as soon
//     as it has been received and reduced, while later chunks are in flight. Reduce-scatter receives into a
//     small reusable scratch window and reduces into the user buffer; all-gather receives straight into the
//     user buffer. Best for large buffers, where bandwidth rules and each step is long.
//   - halving_doubling (Rabenseifner): reduce-scatter by recursive halving, then all-gather by recursive
//     doubling, over the largest power of two P <= N members (2 log2 P steps, each one message each way
//     with one partner); the other N - P members first hand their buffer to a neighbour and get the result
//     back at the end. Fewer, larger steps: best for mid sizes, where each step's latency rules.
//   - recursive_doubling: log2 P exchanges of the whole buffer, each side adding what it receives (same
//     folding). The fewest steps, but each moves the whole buffer: best for small buffers.
//   - direct: N blocks, block j owned by member j. Every member sends block j to member j and adds what it
//     receives into its own block, then sends its sum to every other member: two rounds of N-1 concurrent
//     messages each way, the ring's bytes. No member waits on a chain of others, which counts most when
//     ranks outnumber cores; the message count grows with N, so it serves small communicators.
//   Any size works (including sizes not divisible by N, smaller than N, and N = 1).
// - allgather: the ring all-gather half, pipelined the same way.
// - broadcast: a pipelined chain from the root (each member forwards a chunk to the next as it arrives).
// - barrier: dissemination barrier, ceil(log2 N) rounds of empty messages.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "transports/base/status.h"
#include "transports/transport.h"

namespace chaosbed {

inline constexpr Tag kCollectiveTagBit = Tag{1} << (kUserTagBits - 1);
// The largest tag a point-to-point user (strategy, test) may use.
inline constexpr Tag kMaxP2pTag = kCollectiveTagBit - 1;
inline constexpr bool isCollectiveTag(Tag tag) { return (tag & kCollectiveTagBit) != 0; }
// The tag of step `step` of operation `op` of a communicator in `epoch` (layout above).
Tag collectiveTag(uint32_t epoch, uint64_t op, uint32_t step);

struct Communicator {
  Transport* transport = nullptr;  // not owned; outlives the communicator
  std::vector<int> members;        // global ranks, sorted, unique, including this rank
  uint32_t epoch = 0;
  uint64_t next_op = 0;  // sequence number of the next collective call; advances on every call

  int size() const { return static_cast<int>(members.size()); }
  // This rank's index in members, or -1 if it is not a member.
  int myIndex() const;
  // The index of a global rank in members, or -1.
  int indexOf(int rank) const;
  int rankAt(int index) const { return members[static_cast<size_t>(index)]; }
};

// Validates and sorts members: every rank within [0, transport->size()), no duplicates, this rank included.
Result<Communicator> makeCommunicator(Transport* transport, std::vector<int> members, uint32_t epoch);
// All ranks of the transport, epoch 0.
Result<Communicator> worldCommunicator(Transport* transport);
// After a failed collective: a communicator of `survivors` (all alive, as the membership service says) in
// `epoch` (greater than the failed one's). An aborted call cancels its pending sends, and a backend may
// have abandoned the endpoint of a live member for it (UCX does, see transport.h): every survivor whose
// peerStatus() is not OK is reconnect()ed first. Every survivor calls this with the same arguments.
Result<Communicator> rebuildCommunicator(Transport* transport, std::vector<int> survivors, uint32_t epoch,
                                         Deadline deadline);

enum class AllreduceAlgorithm { kAuto, kRing, kHalvingDoubling, kRecursiveDoubling, kDirect };

struct CollectiveOptions {
  // Pipeline unit; smaller overlaps more, larger costs fewer messages. At most the UCX transport's eager
  // limit (128 KiB), so that chunks stream into the receiver without a rendezvous handshake each.
  size_t chunk_bytes = 64 * 1024;
  int window = 4;  // ring: chunks received ahead of the one being reduced
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;
  // kAuto (chooseAllreduce), for communicators of up to direct_max_members members: direct below
  // direct_below_bytes (over sockets recursive doubling below halving_from_bytes: a message costs more
  // there); from direct_below_bytes the ring over shared memory, halving-doubling over sockets. Larger
  // communicators: recursive doubling below halving_from_bytes, then halving-doubling, or the ring over
  // shared memory from direct_below_bytes. Measured with `chaosbed bench allreduce
  // --bench_allreduce_algorithm ... [--bench_shm=false]` at 3 to 16 ranks (docs/design.md).
  size_t halving_from_bytes = 128 * 1024;
  size_t direct_below_bytes = 512 * 1024;
  int direct_max_members = 16;
  // The ring reduces a larger buffer in slices of this size one after another (each slice's data is still
  // in cache when its all-gather comes back to it).
  size_t ring_slice_bytes = 2 * 1024 * 1024;
};
// The algorithm kAuto picks for a buffer of `bytes` over `members` members of a transport that does or
// does not carry messages through shared memory (Transport::sharedMemory).
AllreduceAlgorithm chooseAllreduce(size_t bytes, int members, bool shared_memory, const CollectiveOptions& options);

// In-place sum over all members; on return every member holds the same sums.
Status allreduce(Communicator& comm, std::span<float> data, Deadline deadline,
                 const CollectiveOptions& options = {});
// Copies root's data (root is a global rank and a member) into every member's buffer.
Status broadcast(Communicator& comm, std::span<std::byte> data, int root, Deadline deadline,
                 const CollectiveOptions& options = {});
// Returns once every member has entered the barrier.
Status barrier(Communicator& comm, Deadline deadline);
// out (size() * in.size() bytes) receives every member's `in`, in member order.
Status allgather(Communicator& comm, std::span<const std::byte> in, std::span<std::byte> out, Deadline deadline,
                 const CollectiveOptions& options = {});

}  // namespace chaosbed
