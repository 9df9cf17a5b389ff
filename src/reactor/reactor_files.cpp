// File transfers on the reactor's loop (docs/DESIGN.md, "File I/O"): a
// leased transfer is cut into pieces, at most its queue depth in flight,
// handed to the file engine (io_uring or the thread pool); completions are
// reaped every pass; the lease is released only once the kernel has
// reported every piece, cancelled ones included.
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <new>

#include "file/file_state.hpp"
#include "reactor.hpp"

namespace xrtio::detail {

using rc = reactor_counters;

namespace {
constexpr unsigned piece_block = 64;
// On the io_uring engine, cached reads up to this size go to the ring while
// other candidate reads of the caller's context are in flight
// (file_try_inline).
constexpr std::size_t batch_read_limit = std::size_t(64) << 10;
std::error_code sys(int e) { return {e, std::system_category()}; }
bool aligned(std::uint64_t v) { return v % file::direct_alignment == 0; }

// preadv2(fd, {p, n}, offset, RWF_NOWAIT) as the system call itself. glibc's
// wrapper is a cancellation point: in a process with threads it switches
// the thread to asynchronous cancellation and back around the call, about
// 25 ns of a cached 4 KiB read's 215 here (docs/PERFORMANCE.md, "A read
// done in place: no linger, no backlog count"), and a cancellation there
// would unwind through these noexcept functions with a lease held. The kernel
// takes the offset as two longs, low then high; on a 64-bit long the low
// one holds it whole (the kernel's shift of the high one by 64 gives 0).
// The sanitizers' interceptors do not see this call: ASan no longer checks
// the destination here (the lease and buffer::map already bound it), and
// TSan sees no write by it (the handler reads the bytes after a post, which
// orders them either way).
ssize_t read_nowait(int fd, std::byte* p, std::size_t n, std::uint64_t offset) noexcept {
  iovec v{p, n};
  static_assert(sizeof(long) == 8 || sizeof(long) == 4);
  unsigned long low = static_cast<unsigned long>(offset);
  unsigned long high = sizeof(long) == 8 ? 0 : static_cast<unsigned long>(offset >> 32);
  return ::syscall(SYS_preadv2, fd, &v, 1, low, high, RWF_NOWAIT);
}
}  // namespace

// Leased (caller's thread at submission, or the loop after a wait): a write
// first brings the device's data to the host.
void reactor::file_begin(run_op_base* op) noexcept {
  auto* f = static_cast<file_op_base*>(op);
  std::error_code ec;
  if (f->dir == file_op_base::direction::write) {
    try {
      f->native->sync(backend::sync_direction::from_device, f->length, 0);
    } catch (const xrtio::error& e) {
      ec = e.code();
    } catch (...) {
      ec = errc::backend_failure;
    }
  }
  if (ec) {
    op->core.release();
    op->ec = ec;
    op->ph = run_op_base::phase::finished;
    return;
  }
  op->ph = run_op_base::phase::on_device;
}

// At submission, on the caller's thread, the lease held: a small buffered
// read whose range the page cache holds whole is one preadv2(RWF_NOWAIT) here
// (it copies only cached pages and never blocks), and its completion is
// posted from here, unless it is declined in favour of the ring (below). A
// read from the cache would otherwise cost two thread hops (to the loop,
// which submits it to the ring where it completes inline, and back): at
// 4 KiB and one read in flight, 16,928 against pread's 983,569 reads/s
// (docs/PERFORMANCE.md, "File I/O"). Returns whether the transfer
// is complete or gathered; otherwise it goes on to the loop as usual, past
// the bytes read here, if any.
bool reactor::file_try_inline(run_op_base* op) noexcept {
  auto* f = static_cast<file_op_base*>(op);
  if (op->ph != run_op_base::phase::on_device || f->dir != file_op_base::direction::read || trace_ ||
      f->tried_at_once)
    return false;
  auto& fs = *f->file;
  if (!f->inline_candidate || fs.nowait_refused.load(std::memory_order_relaxed) ||
      stopping_.load(std::memory_order_acquire))
    return false;
  // Other candidate reads whose handlers run in the caller's context are in
  // flight (completion_registry::inline_candidates counts this one too, and
  // at_once the reads done before registering; done or not, their handlers
  // not yet run): a small one joins them on the ring,
  // where the reads a pass gathers share one io_uring_enter, instead of
  // costing a system call of its own here. Alone (a loop of read, await,
  // read) it is done here: no thread hop. Over batch_read_limit the copy
  // outweighs the system call (1 MiB: ~40 us against ~1 us), and the ring's
  // pass would only gather a burst of copies on the loop: done here as
  // before (docs/PERFORMANCE.md, "File I/O"). Only on the ring: the thread
  // pool does one pread per piece whatever arrives together, so a declined
  // read would pay the two thread hops and share nothing. The engine is made
  // at the first transfer the loop takes in, or once the first read done
  // on a caller's thread asks for it (file_prepare); until then file_path_ is none
  // and the engine the options ask for is the one assumed (io_uring may
  // still be refused and the pool made: one burst declined for nothing).
  //
  // With a reactor thread, the ring is another thread's: a declined read
  // whose handler's context this thread runs (we are inside one of its
  // handlers) is gathered with the others this handler issues and read with
  // them once it returns, here, in one submission, with no thread hop
  // (gathered_reads.cpp; run_op's gather). In-loop, this thread is the
  // loop's: the reads it declines reach the ring together at its next pass.
  //
  // A large one (file_options::worker_read_min) goes to the loop instead
  // when the reads in flight hold enough bytes for the workers
  // (worker_in_flight_min): there its pieces are copied by the kernel's
  // workers, on any free core, at the same time as the others' (file_pump).
  // The ring's bytes in flight are the loop's to count; here the context's
  // candidates times this read's length stand in for them (each candidate
  // is at most inline_read_limit, and a burst of reads at depth is
  // typically of one size).
  std::size_t candidates = f->registry ? f->registry->inline_candidates.load(std::memory_order_relaxed) +
                                             f->registry->at_once.load(std::memory_order_relaxed)
                                       : 0;
  if (declined(*f, candidates)) {
    counters_.inline_declined.fetch_add(1, std::memory_order_relaxed);
    return f->length <= batch_read_limit && !driven() && op->vt().gather(op, true);
  }
  if (read_cached(f) != cached_read::done) return false;
  op->batch_next = nullptr;
  op->vt().post_batch(op, false);  // never inline: through the handler's executor; not the loop's backlog
  return true;
}

// The read at once itself, its lease held (file_try_inline, read_at_once):
// one read_nowait, and one more past a short count (file_confirm_end).
// done: whole, or up to the end of the file, synced, finished, its lease
// released. part: bytes are in the buffer and the loop reads on from them
// (issued and done say where; a failed sync, too). none: nothing read.
reactor::cached_read reactor::read_cached(file_op_base* f) noexcept {
  ssize_t n = read_nowait(f->file->fd, f->memory, f->length, f->offset);
  if (n < 0) {
    // EAGAIN: not all of it is cached. Any other error the loop's own
    // request reports; these mean the flag is not supported here.
    if (errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL)
      f->file->nowait_refused.store(true, std::memory_order_relaxed);
    return cached_read::none;
  }
  std::size_t got = file_confirm_end(f, std::size_t(n));
  if (got < std::min(f->length, f->end)) {
    // Part cached, or the end of the file unconfirmed (0 bytes: at or past
    // it): the loop reads the rest (and finds the end, if that was it).
    f->issued = f->done = got;
    return got > 0 ? cached_read::part : cached_read::none;
  }
  if (!file_done_on_caller(f, got, counters_.inline_reads, counters_.inline_bytes)) return cached_read::part;
  return cached_read::done;
}

// Before registration, on the initiating thread (launch_run): what submit
// and file_try_inline would do for a small cached read, without the
// registry. Registration exists so that a context destroyed with a run
// pending destroys its handler, not its leases; a read finished here is
// posted while the initiating call still keeps the context alive, so it
// needs none: two lock pairs (add, remove) and the registry's reference
// count, entry and exit, and the op's life exchange go (docs/PERFORMANCE.md,
// "A read done at once, unregistered"). It counts as an in-flight candidate
// of its context (reg.at_once) from before its read, as registration
// counted it, until its handler begins, so that reads issued beside it, on
// this thread or another of the context, join the ring as before.
// Runtimes that observe (histograms, trace) take the usual path.
// Returns done when done (its completion posted). A read declined beside
// the others is gathered here, unregistered, if it can be (gather_early).
// Otherwise the usual path takes the op: untouched if it was not read (a
// conflict, a stopping runtime, RWF_NOWAIT refused before); as it was if
// no byte was read (the lease given back), but for tried_at_once (the
// page cache not tried again); or, once bytes are in the buffer (part
// cached, or the sync failed), with the lease kept (leased_at_once), so
// that no other operation comes between those bytes and the rest.
at_once_outcome reactor::read_at_once(run_op_base* op, completion_registry& reg) noexcept {
  auto* f = static_cast<file_op_base*>(op);
  auto& fs = *f->file;
  if (observer_ || fs.nowait_refused.load(std::memory_order_relaxed) || stopping_.load(std::memory_order_acquire))
    return at_once_outcome::usual;
  // Declined: gathered (or the usual path, registered, which counts that
  // and hands it to the loop). Asked first with loads only (a read at
  // depth is declined without writing the shared count), then again with
  // the count this read's add returns.
  std::size_t registered = reg.inline_candidates.load(std::memory_order_relaxed);
  if (declined(*f, registered + reg.at_once.load(std::memory_order_relaxed) + 1)) return gather_early(f, reg, false);
  std::size_t candidates = registered + reg.at_once.fetch_add(1, std::memory_order_relaxed) + 1;
  auto uncount = [&] { reg.at_once.fetch_sub(1, std::memory_order_relaxed); };
  if (declined(*f, candidates)) return gather_early(f, reg, true);
  if (op->core.acquire(nullptr, nullptr) != acquire_status::acquired) {
    uncount();
    return at_once_outcome::usual;
  }
  auto r = read_cached(f);
  if (r == cached_read::done) {
    op->at_once_registry = &reg;  // counted above
    op->batch_next = nullptr;
    op->vt().post_batch(op, false);
    return at_once_outcome::done;
  }
  uncount();
  f->tried_at_once = true;
  if (r == cached_read::part) f->leased_at_once = true;  // bytes are in the buffer: the loop goes on from them
  else op->core.release();                               // nothing written
  return at_once_outcome::usual;
}

// A read declined beside others of its context, before registration: what
// submit and file_try_inline would do with it (its lease, then this
// thread's gathered reads), but unregistered and counted in reg.at_once
// instead (`counted`: already), as a read done at once is, until its
// handler begins. Registration took two lock pairs, the registry's
// reference count and its entry and exit around each post and executor
// comparison; a gathered read's flush runs in the handler's context (it
// joins only a flush of that context), so the context is alive whenever
// the read is posted from there, and a flush its shutdown destroys unrun
// reads and posts (frees) its reads as it goes. The ones the flush hands
// to the loop register then (to_loop).
// A read that asks for a deadline takes it from here, as submit would
// have. Returns gathered (the caller connects the cancellation slot, then
// gathers it) or usual (uncounted, no lease).
at_once_outcome reactor::gather_early(file_op_base* f, completion_registry& reg, bool counted) noexcept {
  auto back = [&] {
    f->at_once_registry = nullptr;
    if (counted) reg.at_once.fetch_sub(1, std::memory_order_relaxed);
    return at_once_outcome::usual;
  };
  // As file_try_inline gathers: small reads, a reactor thread, and a
  // handler whose executor runs on this thread, whose list is empty or
  // holds this context's reads (run_op::gather, asked without pushing; it
  // knows the read's context by at_once_registry, set first).
  f->at_once_registry = &reg;
  if (f->length > batch_read_limit || driven() || !f->vt().gather(f, false)) return back();
  if (!counted) reg.at_once.fetch_add(1, std::memory_order_relaxed);
  counted = true;
  if (f->core.acquire(nullptr, nullptr) != acquire_status::acquired) return back();
  if (f->options.timeout.count() > 0) f->deadline = saturating_deadline(clock::now(), f->options.timeout);
  counters_.inline_declined.fetch_add(1, std::memory_order_relaxed);
  return at_once_outcome::gathered;
}

void reactor::ungather(run_op_base* op) noexcept {
  counters_.inline_declined.fetch_sub(1, std::memory_order_relaxed);  // counted again if the usual path declines it
  op->core.release();
  if (auto* r = std::exchange(op->at_once_registry, nullptr)) r->at_once.fetch_sub(1, std::memory_order_relaxed);
  op->deadline = clock::time_point::max();
}

// Whether a candidate read, with `candidates` such reads in flight in its
// handler's context (itself included), goes to the ring rather than being
// done at once (file_try_inline says why).
bool reactor::declined(const file_op_base& f, std::size_t candidates) const noexcept {
  if (candidates <= 1 || !file_engine_is_ring()) return false;
  if (f.length <= batch_read_limit) return true;
  const auto& o = f.file->options;
  return o.worker_read_min != 0 && f.length >= o.worker_read_min && candidates * f.length >= o.worker_in_flight_min;
}

// A non-blocking read on a caller's thread (at once, or gathered) that
// came back short, 0 < got < length: either the page cache does not hold
// the rest, or the file ends at offset + got (a small file read into a
// larger buffer, the common case). One more non-blocking read from there
// tells which: 0 is the end (f->end set), and the read can be done on the
// caller's thread with the bytes up to it, as the loop would complete it;
// bytes it copies are kept; EAGAIN (not cached) or an error leave the rest
// to the loop, which reports errors itself. Zero bytes at once (a read at
// or past the end: out_of_range) and whole reads are returned unchanged:
// the first stays the loop's. Returns the bytes read now.
std::size_t reactor::file_confirm_end(file_op_base* f, std::size_t got) noexcept {
  if (got == 0 || got >= f->length) return got;
  ssize_t m = read_nowait(f->file->fd, f->memory + got, f->length - got, f->offset + got);
  if (m == 0) f->end = got;
  else if (m > 0) got += std::size_t(m);
  return got;
}

// A read done on a caller's thread (at once, or gathered): `got` bytes,
// the whole range or (f->end set) up to the end of the file, synced to the
// device, finished, its lease released, counted in `reads` and `bytes`.
// False when the sync failed: the loop then completes it, past the bytes
// read, syncing again and reporting the error.
bool reactor::file_done_on_caller(file_op_base* f, std::size_t got, reactor_counters::counter& reads,
                                  reactor_counters::counter& bytes) noexcept {
  try {
    f->native->sync(backend::sync_direction::to_device, got, 0);
  } catch (...) {
    f->issued = f->done = got;
    return false;
  }
  f->bytes = got;
  f->ec = {};
  f->result = {};
  reads.fetch_add(1, std::memory_order_relaxed);
  bytes.fetch_add(got, std::memory_order_relaxed);
  f->core.release();  // invariant 2: the copy is done, nothing else writes the range
  f->ph = run_op_base::phase::finished;
  // The first read finished here asks the loop to make its engine now
  // (file_prepare), not when a later read the page cache does not hold
  // reaches it: that read would then wait for the ring's set-up, and its
  // allocations would fall in the steady state (seen in the bench, the
  // engine made in a measured window at rand4k QD 1). Two loads per read;
  // raise() once per runtime, or a few times if reads race to it.
  if (!file_prepared_.load(std::memory_order_relaxed) && !file_prepare_.load(std::memory_order_relaxed))
    raise(file_prepare_);
  return true;
}

file_piece* reactor::take_piece() {
  if (!free_pieces_) {
    auto block = std::make_unique<file_piece[]>(piece_block);
    // Kept before its pieces are linked: a push_back that throws then
    // frees a block nothing points into.
    piece_blocks_.push_back(std::move(block));
    auto& kept = piece_blocks_.back();
    for (unsigned i = 0; i < piece_block; ++i) {
      kept[i].next = free_pieces_;
      free_pieces_ = &kept[i];
    }
  }
  file_piece* p = free_pieces_;
  free_pieces_ = p->next;
  return p;
}

void reactor::give_piece(file_piece* p) noexcept {
  p->op = nullptr;
  p->next = free_pieces_;
  free_pieces_ = p;
}

// The loop's side of file_prepare_: a block of pieces for its first
// transfers, then the engine. Not while shutting down (nothing more will
// start). The engine comes last because making it publishes stats().file_path
// (release): a caller on another thread that sees the path set then knows the
// whole preparation is done, its allocations included. With the engine first,
// the block's allocations could follow that store, and a measured read begun
// on seeing it counted them (the CI failure of stop 50). A block made when the
// engine then fails stays for a later attempt.
void reactor::file_prepare() noexcept {
  if (!shutting_down_) {
    if (!free_pieces_) {
      try {
        give_piece(take_piece());
      } catch (...) {
      }
    }
    file_engine_ready();
  }
  file_prepared_.store(true, std::memory_order_relaxed);
}

bool reactor::file_engine_ready() noexcept {
  if (file_engine_) return true;
  try {
    if (opts_.file_io_uring) file_engine_ = file_engine::make_ring(waiter_.wake_fd(), !driven());
    if (!file_engine_)
      file_engine_ = file_engine::make_pool(opts_.file_threads, [this] { raise(file_ready_); });
  } catch (...) {
    return false;
  }
  file_path_.store(static_cast<std::uint8_t>(file_engine_->uses_io_uring() ? file_io_path::io_uring
                                                                            : file_io_path::thread_pool),
                   std::memory_order_release);
  file_ring_made_ = file_engine_->uses_io_uring();
  return true;
}

bool reactor::file_engine_is_ring() const noexcept {
  auto path = static_cast<file_io_path>(file_path_.load(std::memory_order_relaxed));
  return path == file_io_path::none ? opts_.file_io_uring : path == file_io_path::io_uring;
}

// A transfer whose leases are held joins files_ and gets its first pieces
// (the submission counters were bumped by intake or the lease wait).
void reactor::file_intake(run_op_base* op) noexcept {
  auto* f = static_cast<file_op_base*>(op);
  if (shutting_down_ || stopped_.load(std::memory_order_relaxed) || !file_engine_ready()) {
    f->io_error = shutting_down_ || stopped_.load(std::memory_order_relaxed) ? make_error_code(errc::shut_down)
                                                                             : make_error_code(errc::backend_failure);
    f->stopping = true;
    file_complete(f);
    return;
  }
  files_.push_back(op);
  file_dirty_ = true;
  if (f->deadline < file_deadline_) file_deadline_ = f->deadline;
  if (f->file->options.register_with_ring && file_engine_->uses_io_uring()) file_register(f);
  // Cancelled before its first piece: while gathered on a caller's thread,
  // or between its submission and this pass (whose cancellation scan ran
  // first). If nothing was read on the caller's thread either, any
  // cancellation type is honoured: it ends with operation_aborted and its
  // lease released, unread. If part was (issued > 0: at once or gathered,
  // the rest not cached), the buffer has changed: total cancellation is
  // not honoured, as once pieces are in flight (invariant 4).
  unsigned bits = f->cancel_bits.exchange(0, std::memory_order_acq_rel);
  using ct = asio::cancellation_type;
  if (f->issued > 0) bits &= static_cast<unsigned>(ct::terminal | ct::partial);
  if (bits != 0) file_stop(f, run_op_base::abort_reason::cancel);
  file_pump(f);
}

// The transfer's file slot and fixed buffer on the ring, registering either
// on its first transfer on this ring (the table's lock and one system call
// each, once); afterwards a compare per transfer. The buffer's memory is
// registered whole (its root allocation), lazily: most buffers never see a
// file, pinning is charged to RLIMIT_MEMLOCK, and only the loop knows its ring.
// What it remembers of that (buffer_state::rings) was made with the buffer.
void reactor::file_register(file_op_base* f) noexcept {
  using ev_t = ring_registrations::event;
  auto count = [this](ev_t ev, reactor_counters::counter& registered) {
    if (ev == ev_t::registered) rc::bump(registered);
    else if (ev == ev_t::refused) rc::bump(counters_.registrations_refused);
  };
  ev_t ev;
  auto& fs = *f->file;
  f->ring_file = file_engine_->register_file(fs.rings, fs.fd, ev);
  count(ev, counters_.files_registered);
  buffer_state* owner = f->memory_owner;
  if (!owner || !owner->native || !owner->native->pinnable_host_memory()) return;
  ring_registrations* regs = owner->rings.load(std::memory_order_acquire);
  if (!regs) return;
  std::size_t size = owner->native->size();
  std::byte* base = nullptr;
  try {
    base = owner->native->map();
  } catch (...) {
  }
  if (!base || size == 0) return;
  f->ring_buffer = file_engine_->register_buffer(*regs, base, size, ev);
  count(ev, counters_.buffers_registered);
}

// Issues pieces while the transfer has some left and room to have them in flight.
void reactor::file_pump(file_op_base* f) noexcept {
  f->starved = false;
  const auto& fs = *f->file;
  std::size_t limit = std::min(f->length, f->end);
  while (!f->stopping && f->pieces < f->depth && f->issued < limit) {
    if (pieces_live_ >= file_engine_->capacity()) {
      f->starved = true;
      return;
    }
    std::size_t rel = f->issued;
    std::uint64_t pos = f->offset + rel;
    std::size_t len = std::min(f->chunk, f->length - rel);
    int fd = fs.fd;
    int slot = f->ring_file;
    if (fs.direct) {
      // Pieces end on aligned file offsets, so that after a misaligned head
      // the rest can go direct.
      len = std::min<std::size_t>(len, f->chunk - std::size_t(pos % file::direct_alignment));
      if (!(aligned(pos) && aligned(len) && aligned(reinterpret_cast<std::uintptr_t>(f->memory + rel)))) {
        fd = fs.buffered_fd;  // bounce through the page cache (a plain descriptor, never registered)
        slot = -1;
        if (fd < 0) {
          f->io_error = errc::misaligned;
          f->stopping = true;
          file_dirty_ = true;
          return;
        }
      }
    }
    file_piece* p;
    try {
      p = take_piece();
    } catch (...) {
      // Out of memory. With pieces in flight, retried when one comes back
      // (file_scan pumps starved transfers). With none, nothing would come
      // back to retry it, and the transfer would wait for good (its
      // deadline or a cancellation aside: a helper's probe, two failures in
      // a row, the second in the scan's own retry): it ends with the error.
      if (pieces_live_ > 0) {
        f->starved = true;
      } else {
        f->io_error = std::make_error_code(std::errc::not_enough_memory);
        f->stopping = true;
        file_dirty_ = true;
      }
      return;
    }
    p->op = f;
    p->offset = pos;
    p->memory = f->memory + rel;
    p->length = len;
    p->rel = rel;
    p->fd = fd;
    p->file_slot = slot;
    p->buf_index = f->ring_buffer;
    if (slot >= 0) rc::bump(counters_.pieces_fixed_file);
    if (f->ring_buffer >= 0) rc::bump(counters_.pieces_fixed_buffer);
    p->stream = fs.stream;
    p->write = f->dir == file_op_base::direction::write;
    // Handed to the kernel's workers: a large buffered read while other
    // pieces are in flight (alone, it is copied at submission as before:
    // no worker hand-off for a lone read), and while the buffered reads in
    // flight, this one included, hold enough bytes that their destinations
    // no longer stay in the CPU's caches (below that, one copying thread is
    // as fast as two: file_options::worker_in_flight_min).
    p->copied = !p->write && !p->stream && (!fs.direct || fd == fs.buffered_fd);
    std::size_t workers_min = fs.options.worker_read_min;
    std::size_t in_flight_min = fs.options.worker_in_flight_min;
    p->to_workers = p->copied && workers_min != 0 && len >= workers_min && pieces_live_ > 0 &&
                    copy_bytes_live_ + len >= in_flight_min && file_engine_->uses_io_uring();
    if (p->to_workers) rc::bump(counters_.pieces_to_workers);
    if (p->copied) copy_bytes_live_ += len;
    p->result = 0;
    p->op_next = f->live;
    f->live = p;
    ++f->pieces;
    ++pieces_live_;
    f->issued += len;
    rc::bump(counters_.file_pieces);
    file_engine_->submit(p);
  }
}

// Asks for every piece of `f` in flight to be cancelled; the transfer
// completes when the last of them has been reported.
void reactor::file_stop(file_op_base* f, run_op_base::abort_reason why) noexcept {
  if (f->reason != run_op_base::abort_reason::none) return;
  f->reason = why;
  f->stopping = true;
  file_dirty_ = true;
  for (file_piece* p = f->live; p; p = p->op_next) {
    file_engine_->cancel(p);
    rc::bump(counters_.file_cancels);
  }
}

void reactor::file_piece_done(file_piece* p) noexcept {
  auto* f = p->op;
  for (file_piece** q = &f->live; *q; q = &(*q)->op_next)
    if (*q == p) {
      *q = p->op_next;
      break;
    }
  --f->pieces;
  --pieces_live_;
  if (p->copied) copy_bytes_live_ -= p->length;
  int res = p->result;
  bool again = false;  // the rest of this piece goes in again
  if (res < 0) {
    if ((res == -ECANCELED || res == -EINTR) && f->stopping) f->incomplete = true;
    else if (res == -EINTR || res == -EAGAIN) again = true;
    else {
      if (!f->io_error) f->io_error = sys(-res);
      f->stopping = true;
      f->incomplete = true;
    }
    res = 0;
  } else {
    f->done += std::size_t(res);
    if (std::size_t(res) < p->length) {
      if (f->dir == file_op_base::direction::read && (res == 0 || !p->stream)) {
        f->end = std::min(f->end, p->rel + std::size_t(res));  // end of file
      } else if (f->dir == file_op_base::direction::write && res == 0) {
        if (!f->io_error) f->io_error = sys(EIO);
        f->stopping = true;
        f->incomplete = true;
      } else {
        again = true;  // a stream's partial transfer, or a short write
      }
    }
  }
  if (again) {
    if (f->stopping) {
      f->incomplete = true;
    } else {
      p->offset += std::size_t(res);
      p->memory += res;
      p->rel += std::size_t(res);
      p->length -= std::size_t(res);
      p->op_next = f->live;
      f->live = p;
      ++f->pieces;
      ++pieces_live_;
      if (p->copied) copy_bytes_live_ += p->length;
      rc::bump(counters_.file_pieces);
      if (p->file_slot >= 0) rc::bump(counters_.pieces_fixed_file);
      if (p->buf_index >= 0) rc::bump(counters_.pieces_fixed_buffer);
      // The hand-off decided at first issue stands (rests are rare: EINTR,
      // EAGAIN, a stream's partial transfer).
      if (p->to_workers) rc::bump(counters_.pieces_to_workers);
      file_engine_->submit(p);
      return;
    }
  }
  give_piece(p);
}

// Reaps the engine, completes settled transfers, enforces their deadlines,
// feeds starved ones, submits. Returns whether a transfer finished.
bool reactor::file_scan(clock::time_point now, clock::time_point& next_deadline) noexcept {
  if (!file_engine_) return false;
  file_ready_.store(false, std::memory_order_relaxed);
  for (file_piece* p = file_engine_->reap(); p;) {
    file_piece* n = p->next;
    file_piece_done(p);
    file_dirty_ = true;
    p = n;
  }
  bool finished = false;
  if (file_dirty_ || now >= file_deadline_) {
    file_dirty_ = false;
    file_deadline_ = clock::time_point::max();
    files_.erase_if([&](run_op_base* op) {
      auto* f = static_cast<file_op_base*>(op);
      if (!f->stopping && f->deadline <= now) file_stop(f, run_op_base::abort_reason::timeout);
      if (!f->stopping && (f->starved || f->pieces < f->depth)) file_pump(f);
      if (f->pieces == 0 && (f->stopping || f->issued >= std::min(f->length, f->end))) {
        file_complete(f);
        finished = true;
        return true;
      }
      if (!f->stopping && f->deadline < file_deadline_) file_deadline_ = f->deadline;
      return false;
    });
  }
  next_deadline = std::min(next_deadline, file_deadline_);
  if (file_engine_->flush()) rc::bump(counters_.file_submissions);
  return finished;
}

// Every piece has been reported: the outcome, the device sync of what was
// read, the lease released (invariant 2), the completion queued.
void reactor::file_complete(file_op_base* f) noexcept {
  using reason = run_op_base::abort_reason;
  bool reading = f->dir == file_op_base::direction::read;
  std::size_t limit = std::min(f->length, f->end);
  std::error_code ec = f->io_error;
  std::size_t bytes = reading ? std::min(f->done, limit) : f->done;
  if (!ec && (f->incomplete || f->issued < limit)) {
    if (f->reason == reason::timeout) ec = errc::timed_out;
    else if (f->reason == reason::cancel) ec = asio::error::operation_aborted;
    else ec = errc::shut_down;
  }
  if (!ec && reading && limit == 0) ec = errc::out_of_range;  // started at or past the end of the file
  if (!ec && reading) {
    try {
      f->native->sync(backend::sync_direction::to_device, bytes, 0);
    } catch (const xrtio::error& e) {
      ec = e.code();
    } catch (...) {
      ec = errc::backend_failure;
    }
  }
  f->ec = ec;
  f->bytes = bytes;
  f->result = {};
  if (!ec) rc::bump(counters_.completed);
  else if (ec == errc::timed_out) rc::bump(counters_.timed_out);
  else if (ec == asio::error::operation_aborted) rc::bump(counters_.cancelled);
  else rc::bump(counters_.failed);
  rc::bump(reading ? counters_.file_reads : counters_.file_writes);
  if (!ec) rc::bump(reading ? counters_.file_bytes_read : counters_.file_bytes_written, bytes);
  rc::drop(counters_.in_flight);
  f->core.release();
  f->ph = run_op_base::phase::finished;
  file_posted_ = true;
  done_.push_back(f);
}

void reactor::file_cancel(clock::time_point) noexcept {
  using ct = asio::cancellation_type;
  for (auto* op = files_.front(); op; op = op->next) {
    unsigned bits = op->cancel_bits.exchange(0, std::memory_order_acq_rel);
    if (bits & static_cast<unsigned>(ct::terminal | ct::partial))
      file_stop(static_cast<file_op_base*>(op), run_op_base::abort_reason::cancel);
  }
}

void reactor::file_shutdown() noexcept {
  for (auto* op = files_.front(); op; op = op->next)
    file_stop(static_cast<file_op_base*>(op), run_op_base::abort_reason::shutdown);
}

// shutdown_grace is over and the kernel still holds pieces: the buffers and
// leases are kept for good (invariant 5), and so are the engine and its
// pieces, which the kernel may still complete.
void reactor::file_retain_all() noexcept {
  while (auto* op = files_.pop_front()) {
    op->core.retain(nullptr);
    op->ec = errc::abort_failed;
    static_cast<file_op_base*>(op)->bytes = 0;
    rc::bump(counters_.retained);
    rc::drop(counters_.in_flight);
    op->ph = run_op_base::phase::finished;
    done_.push_back(op);
    file_engine_kept_ = true;
  }
}

}  // namespace xrtio::detail
