#include "transports/collective.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>

namespace chaosbed {
namespace {

constexpr int kEpochBits = 12;
constexpr int kOpBits = 19;
constexpr int kStepBits = 16;
static_assert(1 + kEpochBits + kOpBits + kStepBits == kUserTagBits, "collective tag layout must fill 48 bits");

int mod(int a, int n) { return ((a % n) + n) % n; }

// The plain loop that GCC and Clang vectorise at -O3; __restrict tells them the buffers don't overlap.
// Training-size buffers sit in cache, where the vector width counts: one clone per ISA, picked at load time.
__attribute__((target_clones("avx512f", "avx2", "default")))
void addInto(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

// Reused across calls so that a training loop does not allocate per step: one window of reduce-scatter
// chunks per thread.
std::byte* scratch(size_t bytes) {
  thread_local std::vector<std::byte> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

// The state of one collective call: its name for errors, its tag base, and everything it has posted, so
// that a failure cancels all of it.
class Call {
 public:
  Call(Communicator& comm, const char* what) : comm_(comm), what_(what), op_(comm.next_op++) {}
  ~Call() {
    for (auto& r : posted_)
      if (r && !r->isComplete()) r->cancel();
  }

  Transport& transport() { return *comm_.transport; }
  Tag tag(int step) const { return collectiveTag(comm_.epoch, op_, static_cast<uint32_t>(step)); }

  // Waits for one request while watching every member; annotates a failure with the call and the step.
  Status waitFor(const RequestPtr& request, int step, int waiting_on, Deadline deadline) {
    Status s = waitAll(*comm_.transport, std::span<const RequestPtr>(&request, 1), deadline, comm_.members);
    if (s.isOk()) return s;
    return annotate(s, step, waiting_on);
  }
  // Waits for a receive from rank `from` and checks that it brought `expected` bytes: members whose buffers
  // differ in size get an error naming the sender, not a silently short sum.
  Status awaitReceive(const RequestPtr& request, size_t expected, int step, int from, Deadline deadline) {
    CHAOSBED_RETURN_IF_ERROR(waitFor(request, step, from, deadline));
    if (request->receivedBytes() == expected) return Status::ok();
    return annotate(Status::invalidArgument("rank " + std::to_string(from) + " sent " +
                                            std::to_string(request->receivedBytes()) + " bytes, expected " +
                                            std::to_string(expected) + " (do the members' buffers differ in size?)"),
                    step, from);
  }
  Status waitForAll(std::span<const RequestPtr> requests, int step, Deadline deadline) {
    Status s = waitAll(*comm_.transport, requests, deadline, comm_.members);
    if (s.isOk()) return s;
    return annotate(s, step, -1);
  }
  Status annotate(const Status& s, int step, int waiting_on) const {
    std::string context = std::string(what_) + "(epoch " + std::to_string(comm_.epoch) + ", op " +
                          std::to_string(op_) + ", step " + std::to_string(step);
    if (waiting_on >= 0) context += ", waiting for rank " + std::to_string(waiting_on);
    return s.withContext(context + ")");
  }
  Status invalid(const std::string& msg) const { return Status::invalidArgument(std::string(what_) + ": " + msg); }

  // Keeps a request so that a failure (or destruction) cancels it.
  RequestPtr& keep(RequestPtr request) {
    posted_.push_back(std::move(request));
    return posted_.back();
  }

 private:
  Communicator& comm_;
  const char* what_;
  uint64_t op_;
  std::deque<RequestPtr> posted_;  // a deque: keep() hands out references that must stay valid
};

Status checkMember(const Communicator& comm, const char* what) {
  if (comm.transport == nullptr) return Status::invalidArgument(std::string(what) + ": communicator has no transport");
  if (comm.myIndex() < 0)
    return Status::invalidArgument(std::string(what) + ": rank " + std::to_string(comm.transport->rank()) +
                                   " is not a member of the communicator");
  return Status::ok();
}

// A ring pass over N segments of a buffer: `reduce_steps` reduce-scatter steps (float sum) followed by
// `gather_steps` all-gather steps. At step s member r sends segment r-s and receives segment r-s-1 (mod N),
// for both halves. Segments are cut into K chunks each; chunk k of step s is forwarded at step s+1 as soon
// as it has arrived (and been reduced), which pipelines the steps.
struct RingPass {
  std::byte* base = nullptr;
  size_t elem = 1;                  // element size in bytes
  std::vector<size_t> seg_offset;   // in elements
  std::vector<size_t> seg_length;   // in elements
  int reduce_steps = 0;
  int gather_steps = 0;
};

Status runRing(Call& call, Communicator& comm, const RingPass& pass, Deadline deadline,
               const CollectiveOptions& options) {
  const int n = comm.size();
  const int me = comm.myIndex();
  const int left = comm.rankAt(mod(me - 1, n));
  const int right = comm.rankAt(mod(me + 1, n));
  const size_t max_seg = *std::max_element(pass.seg_length.begin(), pass.seg_length.end());
  const size_t chunk_target = std::max<size_t>(options.chunk_bytes / pass.elem, 1);
  const size_t k_chunks = std::max<size_t>((max_seg + chunk_target - 1) / chunk_target, 1);
  const size_t steps = static_cast<size_t>(pass.reduce_steps + pass.gather_steps);
  const size_t total = steps * k_chunks;
  const size_t window = static_cast<size_t>(std::max(options.window, 1));

  // Chunk k of segment j: elements [off + len*k/K, off + len*(k+1)/K).
  auto chunk = [&](int seg, size_t k) {
    size_t off = pass.seg_offset[static_cast<size_t>(seg)];
    size_t len = pass.seg_length[static_cast<size_t>(seg)];
    size_t begin = off + len * k / k_chunks, end = off + len * (k + 1) / k_chunks;
    return std::span<std::byte>(pass.base + begin * pass.elem, (end - begin) * pass.elem);
  };
  auto sendSeg = [&](size_t i) { return mod(me - static_cast<int>(i / k_chunks), n); };
  auto recvSeg = [&](size_t i) { return mod(me - static_cast<int>(i / k_chunks) - 1, n); };
  auto isReduce = [&](size_t i) { return static_cast<int>(i / k_chunks) < pass.reduce_steps; };

  // Reduce-scatter chunks land in a window of scratch slots, cache-line aligned.
  const size_t slot_bytes = ((max_seg + k_chunks - 1) / k_chunks * pass.elem + 63) / 64 * 64;
  std::byte* slots = pass.reduce_steps > 0 ? scratch(slot_bytes * window) : nullptr;

  std::vector<RequestPtr*> sends(total, nullptr), recvs(total, nullptr);
  size_t next_send = 0, next_recv = 0, done = 0, send_retired = 0;
  while (done < total) {
    // A chunk goes out at step 0 at once, later once the previous step delivered (and reduced) it.
    for (; next_send < total && next_send < done + k_chunks; ++next_send) {
      std::span<std::byte> c = chunk(sendSeg(next_send), next_send % k_chunks);
      sends[next_send] = &call.keep(call.transport().isend(right, call.tag(static_cast<int>(next_send / k_chunks)),
                                                           c));
    }
    for (; next_recv < total && next_recv < done + window; ++next_recv) {
      std::span<std::byte> target;
      if (isReduce(next_recv)) {
        size_t bytes = chunk(recvSeg(next_recv), next_recv % k_chunks).size();
        target = std::span<std::byte>(slots + (next_recv % window) * slot_bytes, bytes);
      } else {
        target = chunk(recvSeg(next_recv), next_recv % k_chunks);
        // All-gather overwrites a chunk this member sent during reduce-scatter: that send must be finished.
        size_t reused = static_cast<size_t>(n - 1) * k_chunks;
        if (pass.reduce_steps > 0 && next_recv >= reused && sends[next_recv - reused] != nullptr) {
          CHAOSBED_RETURN_IF_ERROR(call.waitFor(*sends[next_recv - reused],
                                                static_cast<int>((next_recv - reused) / k_chunks), right, deadline));
        }
      }
      recvs[next_recv] = &call.keep(call.transport().irecv(left, call.tag(static_cast<int>(next_recv / k_chunks)),
                                                           target));
    }
    const int step = static_cast<int>(done / k_chunks);
    RequestPtr& r = *recvs[done];
    CHAOSBED_RETURN_IF_ERROR(call.awaitReceive(r, chunk(recvSeg(done), done % k_chunks).size(), step, left, deadline));
    if (isReduce(done)) {
      std::span<std::byte> dst = chunk(recvSeg(done), done % k_chunks);
      addInto(reinterpret_cast<float*>(dst.data()),
              reinterpret_cast<const float*>(slots + (done % window) * slot_bytes), dst.size() / sizeof(float));
    }
    r.reset();
    ++done;
    // Retire finished sends in order: an early error surfaces now rather than at the end.
    for (; send_retired < next_send && (*sends[send_retired])->isComplete(); ++send_retired) {
      if (Status s = (*sends[send_retired])->status(); !s.isOk())
        return call.annotate(s, static_cast<int>(send_retired / k_chunks), right);
      sends[send_retired]->reset();
    }
  }
  for (; send_retired < total; ++send_retired) {
    if (*sends[send_retired] == nullptr) continue;
    CHAOSBED_RETURN_IF_ERROR(
        call.waitFor(*sends[send_retired], static_cast<int>(send_retired / k_chunks), right, deadline));
  }
  return Status::ok();
}

// One exchange of the recursive algorithms: sends data[send_off, +send_len) to `partner` and receives its
// data[recv_off, +recv_len) (the partner's send region is this member's receive region, so the lengths agree
// when the buffers do), either adding it into the buffer (`reduce`, once this member's own send is out: the
// regions may be the same) or copying it there. One message each way: on shared memory a message costs far
// more than its bytes, so cutting it into pipelined chunks was measured slower.
Status exchange(Call& call, std::span<float> data, int partner, int step, size_t send_off, size_t send_len,
                size_t recv_off, size_t recv_len, bool reduce, Deadline deadline) {
  float* target = reduce ? reinterpret_cast<float*>(scratch(recv_len * sizeof(float))) : data.data() + recv_off;
  RequestPtr* recv = recv_len == 0 ? nullptr : &call.keep(call.transport().irecv(
      partner, call.tag(step), std::as_writable_bytes(std::span(target, recv_len))));
  RequestPtr* send = send_len == 0 ? nullptr : &call.keep(call.transport().isend(
      partner, call.tag(step), std::as_bytes(data.subspan(send_off, send_len))));
  if (recv) {
    CHAOSBED_RETURN_IF_ERROR(call.awaitReceive(*recv, recv_len * sizeof(float), step, partner, deadline));
    recv->reset();
  }
  if (send) CHAOSBED_RETURN_IF_ERROR(call.waitFor(*send, step, partner, deadline));
  if (reduce) addInto(data.data() + recv_off, target, recv_len);
  return Status::ok();
}

// The recursive all-reduces (collective.h) over member indexes. P = the largest power of two <= N, R = N - P.
// Among the first 2R members each even one hands its buffer to the odd one after it (step 0) and gets the
// result back from it at the end; the odd ones and every member from 2R on are virtual members 0..P-1.
// - Recursive doubling: log2 P exchanges of the whole buffer with partner v ^ mask, each side adding what it
//   receives (a + b == b + a exactly, so both sides hold the same bits).
// - Halving-doubling: the buffer is cut into P blocks; recursive halving leaves virtual member v with the
//   sum of block v (each partner keeps the half its bit says and sends the other), recursive doubling
//   spreads the blocks back.
Status recursiveAllreduce(Call& call, Communicator& comm, std::span<float> data, AllreduceAlgorithm algorithm,
                          Deadline deadline) {
  const int n = comm.size(), me = comm.myIndex();
  int p = 1, rounds = 0;
  for (; p * 2 <= n; p *= 2) ++rounds;
  const int extra = n - p;
  const size_t count = data.size();
  const int last_step = 2 * rounds + 1;
  if (me < 2 * extra && me % 2 == 0) {  // folded in: contributes, then receives the result
    const int keeper = comm.rankAt(me + 1);
    CHAOSBED_RETURN_IF_ERROR(exchange(call, data, keeper, 0, 0, count, 0, 0, false, deadline));
    return exchange(call, data, keeper, last_step, 0, 0, 0, count, false, deadline);
  }
  if (me < 2 * extra)
    CHAOSBED_RETURN_IF_ERROR(exchange(call, data, comm.rankAt(me - 1), 0, 0, 0, 0, count, true, deadline));
  const int v = me < 2 * extra ? me / 2 : me - extra;
  auto member = [&](int virtual_index) {
    return comm.rankAt(virtual_index < extra ? 2 * virtual_index + 1 : virtual_index + extra);
  };
  int step = 1;
  if (algorithm == AllreduceAlgorithm::kRecursiveDoubling) {
    for (int mask = 1; mask < p; mask *= 2, ++step)
      CHAOSBED_RETURN_IF_ERROR(exchange(call, data, member(v ^ mask), step, 0, count, 0, count, true, deadline));
  } else {
    auto offset = [&](int block) { return count * static_cast<size_t>(block) / static_cast<size_t>(p); };
    auto length = [&](int block, int blocks) { return offset(block + blocks) - offset(block); };
    int lo = 0, blocks = p;  // this member's blocks: [lo, lo + blocks)
    for (int mask = p / 2; mask >= 1; mask /= 2, ++step) {
      blocks /= 2;
      const int keep = (v & mask) ? lo + blocks : lo, give = (v & mask) ? lo : lo + blocks;
      CHAOSBED_RETURN_IF_ERROR(exchange(call, data, member(v ^ mask), step, offset(give), length(give, blocks),
                                        offset(keep), length(keep, blocks), true, deadline));
      lo = keep;
    }
    for (int mask = 1; mask < p; mask *= 2, ++step) {
      const int theirs = (v & mask) ? lo - blocks : lo + blocks;
      CHAOSBED_RETURN_IF_ERROR(exchange(call, data, member(v ^ mask), step, offset(lo), length(lo, blocks),
                                        offset(theirs), length(theirs, blocks), false, deadline));
      lo = std::min(lo, theirs);
      blocks *= 2;
    }
  }
  if (me < 2 * extra) return exchange(call, data, comm.rankAt(me - 1), last_step, 0, count, 0, 0, false, deadline);
  return Status::ok();
}

// Direct all-reduce (collective.h): the buffer is cut into N blocks, block j owned by member j. Reduce-scatter:
// every member sends block j to member j and receives its own block from every other member, all posted at
// once, then adds them in member order (so every run adds the same operands in the same order). All-gather:
// every member sends its summed block to every other member and receives theirs in place. Two phases, each one
// round of concurrent messages: no member waits for a chain of others, which counts when ranks outnumber cores.
Status directAllreduce(Call& call, Communicator& comm, std::span<float> data, Deadline deadline) {
  const int n = comm.size(), me = comm.myIndex();
  const size_t count = data.size();
  auto offset = [&](int block) { return count * static_cast<size_t>(block) / static_cast<size_t>(n); };
  auto length = [&](int block) { return offset(block + 1) - offset(block); };
  const size_t mine = length(me);
  const size_t slot = (mine * sizeof(float) + 63) / 64 * 64 / sizeof(float);  // cache-line aligned slots
  float* slots = reinterpret_cast<float*>(scratch(slot * sizeof(float) * static_cast<size_t>(n)));

  std::vector<RequestPtr*> recvs(static_cast<size_t>(n), nullptr), sends(static_cast<size_t>(n), nullptr);
  for (int j = 0; j < n; ++j) {
    if (j == me) continue;
    if (mine > 0)
      recvs[j] = &call.keep(call.transport().irecv(
          comm.rankAt(j), call.tag(0), std::as_writable_bytes(std::span(slots + slot * static_cast<size_t>(j), mine))));
    if (length(j) > 0)
      sends[j] = &call.keep(call.transport().isend(comm.rankAt(j), call.tag(0),
                                                   std::as_bytes(data.subspan(offset(j), length(j)))));
  }
  float* own = data.data() + offset(me);
  for (int j = 0; j < n; ++j) {
    if (recvs[j] == nullptr) continue;
    CHAOSBED_RETURN_IF_ERROR(call.awaitReceive(*recvs[j], mine * sizeof(float), 0, comm.rankAt(j), deadline));
    recvs[j]->reset();
    addInto(own, slots + slot * static_cast<size_t>(j), mine);
  }
  // Block j is overwritten below by member j's sum: the send that read it must be finished first.
  for (int j = 0; j < n; ++j) {
    if (sends[j] == nullptr) continue;
    CHAOSBED_RETURN_IF_ERROR(call.waitFor(*sends[j], 0, comm.rankAt(j), deadline));
    sends[j]->reset();
  }
  for (int j = 0; j < n; ++j) {
    if (j == me) continue;
    recvs[j] = length(j) == 0 ? nullptr : &call.keep(call.transport().irecv(
        comm.rankAt(j), call.tag(1), std::as_writable_bytes(data.subspan(offset(j), length(j)))));
    sends[j] = mine == 0 ? nullptr : &call.keep(call.transport().isend(
        comm.rankAt(j), call.tag(1), std::as_bytes(data.subspan(offset(me), mine))));
  }
  for (int j = 0; j < n; ++j) {
    if (recvs[j] == nullptr) continue;
    CHAOSBED_RETURN_IF_ERROR(call.awaitReceive(*recvs[j], length(j) * sizeof(float), 1, comm.rankAt(j), deadline));
  }
  for (int j = 0; j < n; ++j)
    if (sends[j] != nullptr) CHAOSBED_RETURN_IF_ERROR(call.waitFor(*sends[j], 1, comm.rankAt(j), deadline));
  return Status::ok();
}

// The ring all-reduce (collective.h) of one buffer: N segments, N-1 reduce-scatter and N-1 all-gather steps.
Status ringAllreduce(Call& call, Communicator& comm, std::span<float> data, Deadline deadline,
                     const CollectiveOptions& options) {
  const int n = comm.size();
  RingPass pass;
  pass.base = reinterpret_cast<std::byte*>(data.data());
  pass.elem = sizeof(float);
  size_t offset = 0;
  for (int j = 0; j < n; ++j) {
    size_t len = data.size() / static_cast<size_t>(n) + (static_cast<size_t>(j) < data.size() % n ? 1 : 0);
    pass.seg_offset.push_back(offset);
    pass.seg_length.push_back(len);
    offset += len;
  }
  pass.reduce_steps = n - 1;
  pass.gather_steps = n - 1;
  return runRing(call, comm, pass, deadline, options);
}

}  // namespace

AllreduceAlgorithm chooseAllreduce(size_t bytes, int members, bool shared_memory, const CollectiveOptions& options) {
  if (options.algorithm != AllreduceAlgorithm::kAuto) return options.algorithm;
  if (members <= 1) return AllreduceAlgorithm::kRing;
  const bool direct = members <= options.direct_max_members;
  if (bytes < options.halving_from_bytes && !(direct && shared_memory)) return AllreduceAlgorithm::kRecursiveDoubling;
  if (bytes < options.direct_below_bytes) return direct ? AllreduceAlgorithm::kDirect : AllreduceAlgorithm::kHalvingDoubling;
  return shared_memory ? AllreduceAlgorithm::kRing : AllreduceAlgorithm::kHalvingDoubling;
}

Tag collectiveTag(uint32_t epoch, uint64_t op, uint32_t step) {
  const Tag e = epoch & ((Tag{1} << kEpochBits) - 1);
  const Tag o = op & ((Tag{1} << kOpBits) - 1);
  const Tag s = step & ((Tag{1} << kStepBits) - 1);
  return kCollectiveTagBit | (e << (kOpBits + kStepBits)) | (o << kStepBits) | s;
}

int Communicator::indexOf(int rank) const {
  auto it = std::lower_bound(members.begin(), members.end(), rank);
  return it != members.end() && *it == rank ? static_cast<int>(it - members.begin()) : -1;
}

int Communicator::myIndex() const { return transport == nullptr ? -1 : indexOf(transport->rank()); }

Result<Communicator> makeCommunicator(Transport* transport, std::vector<int> members, uint32_t epoch) {
  if (transport == nullptr) return Status::invalidArgument("communicator: no transport");
  std::sort(members.begin(), members.end());
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= transport->size())
      return Status::invalidArgument("communicator: member " + std::to_string(members[i]) + " is outside [0, " +
                                     std::to_string(transport->size()) + ")");
    if (i > 0 && members[i] == members[i - 1])
      return Status::invalidArgument("communicator: member " + std::to_string(members[i]) + " listed twice");
  }
  Communicator comm{transport, std::move(members), epoch, 0};
  if (comm.myIndex() < 0)
    return Status::invalidArgument("communicator: rank " + std::to_string(transport->rank()) +
                                   " is not among the members");
  return comm;
}

Result<Communicator> worldCommunicator(Transport* transport) {
  if (transport == nullptr) return Status::invalidArgument("communicator: no transport");
  std::vector<int> all(static_cast<size_t>(transport->size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return makeCommunicator(transport, std::move(all), 0);
}

Result<Communicator> rebuildCommunicator(Transport* transport, std::vector<int> survivors, uint32_t epoch,
                                         Deadline deadline) {
  CHAOSBED_ASSIGN_OR_RETURN(Communicator comm, makeCommunicator(transport, std::move(survivors), epoch));
  for (int peer : comm.members) {
    if (peer == transport->rank() || transport->peerStatus(peer).isOk()) continue;
    if (Status s = transport->reconnect(peer, deadline); !s.isOk())
      return s.withContext("rebuilding the communicator of epoch " + std::to_string(epoch) + ": rank " +
                           std::to_string(peer));
  }
  return comm;
}

Status allreduce(Communicator& comm, std::span<float> data, Deadline deadline, const CollectiveOptions& options) {
  Call call(comm, "allreduce");
  CHAOSBED_RETURN_IF_ERROR(checkMember(comm, "allreduce"));
  const int n = comm.size();
  if (n == 1 || data.empty()) return Status::ok();
  const auto algorithm = chooseAllreduce(data.size_bytes(), n, comm.transport->sharedMemory(), options);
  if (algorithm == AllreduceAlgorithm::kDirect) return directAllreduce(call, comm, data, deadline);
  if (algorithm != AllreduceAlgorithm::kRing) return recursiveAllreduce(call, comm, data, algorithm, deadline);
  // A large buffer goes round the ring in slices, one after another, each its own operation (its own tags):
  // a slice's blocks are still in cache when its all-gather half comes back to them.
  const size_t slice = std::max(options.ring_slice_bytes / sizeof(float), static_cast<size_t>(n));
  CHAOSBED_RETURN_IF_ERROR(ringAllreduce(call, comm, data.first(std::min(slice, data.size())), deadline, options));
  for (size_t begin = slice; begin < data.size(); begin += slice) {
    Call next(comm, "allreduce");
    CHAOSBED_RETURN_IF_ERROR(
        ringAllreduce(next, comm, data.subspan(begin, std::min(slice, data.size() - begin)), deadline, options));
  }
  return Status::ok();
}

Status allgather(Communicator& comm, std::span<const std::byte> in, std::span<std::byte> out, Deadline deadline,
                 const CollectiveOptions& options) {
  Call call(comm, "allgather");
  CHAOSBED_RETURN_IF_ERROR(checkMember(comm, "allgather"));
  const int n = comm.size();
  const size_t block = in.size();
  if (out.size() != block * static_cast<size_t>(n))
    return call.invalid("output holds " + std::to_string(out.size()) + " bytes, expected " + std::to_string(n) +
                        " x " + std::to_string(block));
  const int me = comm.myIndex();
  if (block > 0) std::memcpy(out.data() + static_cast<size_t>(me) * block, in.data(), block);
  if (n == 1 || block == 0) return Status::ok();
  RingPass pass;
  pass.base = out.data();
  pass.elem = 1;
  for (int j = 0; j < n; ++j) {
    pass.seg_offset.push_back(static_cast<size_t>(j) * block);
    pass.seg_length.push_back(block);
  }
  pass.gather_steps = n - 1;
  return runRing(call, comm, pass, deadline, options);
}

Status broadcast(Communicator& comm, std::span<std::byte> data, int root, Deadline deadline,
                 const CollectiveOptions& options) {
  Call call(comm, "broadcast");
  CHAOSBED_RETURN_IF_ERROR(checkMember(comm, "broadcast"));
  const int n = comm.size();
  const int root_index = comm.indexOf(root);
  if (root_index < 0) return call.invalid("root " + std::to_string(root) + " is not a member");
  if (n == 1 || data.empty()) return Status::ok();
  const int me = comm.myIndex();
  const int position = mod(me - root_index, n);  // 0 = root, n-1 = end of the chain
  const int prev = comm.rankAt(mod(me - 1, n));
  const int next = comm.rankAt(mod(me + 1, n));
  const size_t chunk_bytes = std::max<size_t>(options.chunk_bytes, 1);
  const size_t k_chunks = (data.size() + chunk_bytes - 1) / chunk_bytes;
  const size_t window = static_cast<size_t>(std::max(options.window, 1));
  auto chunk = [&](size_t k) {
    size_t begin = data.size() * k / k_chunks, end = data.size() * (k + 1) / k_chunks;
    return data.subspan(begin, end - begin);
  };

  std::vector<RequestPtr*> sends;
  if (position == 0) {
    for (size_t k = 0; k < k_chunks; ++k) sends.push_back(&call.keep(call.transport().isend(next, call.tag(0), chunk(k))));
  } else {
    std::vector<RequestPtr*> recvs(k_chunks, nullptr);
    size_t next_recv = 0;
    for (size_t done = 0; done < k_chunks; ++done) {
      for (; next_recv < k_chunks && next_recv < done + window; ++next_recv)
        recvs[next_recv] = &call.keep(call.transport().irecv(prev, call.tag(0), chunk(next_recv)));
      RequestPtr& r = *recvs[done];
      CHAOSBED_RETURN_IF_ERROR(call.awaitReceive(r, chunk(done).size(), 0, prev, deadline));
      r.reset();
      if (position < n - 1)
        sends.push_back(&call.keep(call.transport().isend(next, call.tag(0), chunk(done))));
    }
  }
  for (RequestPtr* s : sends) CHAOSBED_RETURN_IF_ERROR(call.waitFor(*s, 0, next, deadline));
  return Status::ok();
}

Status barrier(Communicator& comm, Deadline deadline) {
  Call call(comm, "barrier");
  CHAOSBED_RETURN_IF_ERROR(checkMember(comm, "barrier"));
  const int n = comm.size();
  const int me = comm.myIndex();
  int round = 0;
  for (int distance = 1; distance < n; distance *= 2, ++round) {
    std::vector<RequestPtr> ops;
    ops.push_back(call.transport().irecv(comm.rankAt(mod(me - distance, n)), call.tag(round), {}));
    ops.push_back(call.transport().isend(comm.rankAt(mod(me + distance, n)), call.tag(round), {}));
    CHAOSBED_RETURN_IF_ERROR(call.waitForAll(ops, round, deadline));
  }
  return Status::ok();
}

}  // namespace chaosbed
