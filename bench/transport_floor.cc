// sundial-transport-floor: what the transport alone costs a request, measured with the same
// client as sundiald (docs/BENCHMARKS.md, "The transport's floor"; bench/transport_floor.sh).
//
// A one-thread server on loopback that answers Sundial frames with nothing behind them: an
// Enqueue with an EnqueueResults naming each id, anything else (the bench's CreateQueue and
// DeleteQueue) with Done. Under `durable` every request frame is appended to a log file,
// preallocated with written zeroes as sundiald's segments are, and fdatasynced before its reply
// goes. Three shapes of the same work:
//
//   epoll         Redis's: level-triggered epoll_wait, one read per readable connection, then
//                 (durable) one write and one fdatasync for everything read, then one send per
//                 connection with replies. Two system calls per request and one per turn.
//   uring         io_uring: a multishot accept, a multishot recv per connection into a ring of
//                 provided buffers, every send of a turn submitted together; one io_uring_enter
//                 per turn. Durable: the log write and an fdatasync linked behind it are io_uring
//                 operations too (the kernel runs the fsync on an io-wq worker); replies wait
//                 for it while the next group gathers.
//   uring-inline  io_uring's sockets with epoll's log: the write and the fdatasync made on the
//                 thread, blocking it, between taking the completions and submitting the sends.
//
// It is a measuring device, not a server: no limits, no timeouts, connections never freed.
// Usage: sundial-transport-floor epoll|uring|uring-inline relaxed|durable PORT LOG_FILE
//        sundial-transport-floor --probe-uring   (exit 0: io_uring works here; 77: refused)
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/framing.h"
#include "protocol/sundial_generated.h"

namespace {

namespace p = sundial::protocol;

[[noreturn]] void Fail(const char* what, int error) {
  std::fprintf(stderr, "sundial-transport-floor: %s: %s\n", what, std::strerror(error));
  std::exit(1);
}

struct Connection {
  int fd = -1;
  uint32_t slot = 0;  // io_uring: its index, carried in the user data of its operations
  bool closed = false;
  bool send_busy = false;  // io_uring: a send of `sending` is in flight
  std::string in;          // received bytes not yet a whole frame
  std::string out;         // replies ready to send
  std::string held;        // durable: replies of the group that gathers
  std::string in_flight;   // durable (io_uring log): replies of the group being synced
  std::string sending;     // io_uring: the bytes a send in flight reads
};

// The work every shape does: frames in, replies out, and the log's bytes.
class Responder {
 public:
  Responder(bool durable, const char* log_path) : durable_(durable) {
    if (!durable) return;
    log_fd_ = ::open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log_fd_ < 0) Fail("open the log file", errno);
    // Written zeroes, not fallocate: an fdatasync then writes data and no extent conversion.
    const std::string zeroes(1 << 20, '\0');
    for (int i = 0; i < kPreallocatedMiB; ++i) {
      if (::write(log_fd_, zeroes.data(), zeroes.size()) < 0) Fail("preallocate the log", errno);
    }
    if (::fdatasync(log_fd_) < 0) Fail("fdatasync the log", errno);
  }

  bool durable() const { return durable_; }
  int log_fd() const { return log_fd_; }

  // Answers every whole frame in c->in into *replies (and the log); false on a malformed frame.
  bool Serve(Connection* c, std::string* replies) {
    size_t at = 0;
    for (;;) {
      std::string_view frame;
      size_t used = 0;
      const auto status =
          p::NextFrame(std::string_view(c->in).substr(at), p::kDefaultMaxFrameBytes, &frame, &used);
      if (status == p::FrameStatus::kIncomplete) break;
      if (status != p::FrameStatus::kComplete) return false;
      const auto* bytes = reinterpret_cast<const uint8_t*>(frame.data());
      flatbuffers::Verifier verifier(bytes, frame.size());
      if (!verifier.VerifyBuffer<p::Request>(nullptr)) return false;
      if (durable_) log_.append(c->in, at, used);
      at += used;
      Answer(*flatbuffers::GetRoot<p::Request>(bytes), replies);
    }
    c->in.erase(0, at);
    return true;
  }

  // The bytes logged since the last call (the caller writes them at log_offset()).
  std::string TakeLog() {
    std::string taken;
    taken.swap(log_);
    log_offset_ += taken.size();
    return taken;
  }
  bool log_empty() const { return log_.empty(); }
  uint64_t log_offset() const { return log_offset_; }

  // Epoll's and uring-inline's log: write what was logged and fdatasync it, on this thread.
  void SyncInline() {
    if (log_.empty()) return;
    const uint64_t at = log_offset_;
    const std::string bytes = TakeLog();
    if (::pwrite(log_fd_, bytes.data(), bytes.size(), static_cast<off_t>(at)) < 0) {
      Fail("write the log", errno);
    }
    if (::fdatasync(log_fd_) < 0) Fail("fdatasync the log", errno);
  }

 private:
  static constexpr int kPreallocatedMiB = 128;  // a 3 s run at c=64 logs ~30 MB

  void Answer(const p::Request& request, std::string* replies) {
    builder_.Clear();
    flatbuffers::Offset<void> result;
    p::Result type = p::Result::Done;
    if (const auto* enqueue = request.op_as_Enqueue()) {
      items_.clear();
      if (enqueue->items() != nullptr) {
        for (const p::EnqueueItem* item : *enqueue->items()) {
          const auto id = builder_.CreateString(item->id() ? item->id()->string_view() : "");
          items_.push_back(p::CreateEnqueueResult(builder_, id, ++version_));
        }
      }
      result = p::CreateEnqueueResults(builder_, builder_.CreateVector(items_)).Union();
      type = p::Result::EnqueueResults;
    } else {
      result = p::CreateDone(builder_).Union();
    }
    const auto response =
        p::CreateResponse(builder_, request.request_id(), 0, version_, type, result);
    builder_.Finish(p::CreateServerMessage(builder_, p::ServerBody::Response, response.Union()));
    p::AppendFrame(std::string_view(reinterpret_cast<const char*>(builder_.GetBufferPointer()),
                                    builder_.GetSize()),
                   replies);
  }

  const bool durable_;
  int log_fd_ = -1;
  uint64_t log_offset_ = 0;
  std::string log_;
  uint64_t version_ = 0;
  flatbuffers::FlatBufferBuilder builder_{4096};
  std::vector<flatbuffers::Offset<p::EnqueueResult>> items_;
};

int Listen(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) Fail("socket", errno);
  const int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) < 0) Fail("bind", errno);
  if (::listen(fd, 1024) < 0) Fail("listen", errno);
  return fd;
}

void NoDelay(int fd) {
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void Close(Connection* c) {
  if (c->closed) return;
  c->closed = true;
  (void)::close(c->fd);
}

// ---- epoll ------------------------------------------------------------------------------------

[[noreturn]] void RunEpoll(int listen_fd, Responder* responder) {
  const int ep = ::epoll_create1(0);
  if (ep < 0) Fail("epoll_create1", errno);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.ptr = nullptr;  // the listener
  if (::epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd, &event) < 0) Fail("epoll_ctl", errno);
  std::vector<epoll_event> ready(512);
  std::vector<Connection*> replying;
  std::vector<char> buffer(16 << 10);  // Redis's read size
  for (;;) {
    const int n = ::epoll_wait(ep, ready.data(), static_cast<int>(ready.size()), -1);
    if (n < 0 && errno != EINTR) Fail("epoll_wait", errno);
    for (int i = 0; i < n; ++i) {
      auto* c = static_cast<Connection*>(ready[i].data.ptr);
      if (c == nullptr) {
        for (int fd; (fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK)) >= 0;) {
          NoDelay(fd);
          auto* accepted = new Connection;
          accepted->fd = fd;
          epoll_event e{};
          e.events = EPOLLIN;
          e.data.ptr = accepted;
          if (::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) < 0) Fail("epoll_ctl", errno);
        }
        continue;
      }
      if (c->closed) continue;
      const ssize_t got = ::read(c->fd, buffer.data(), buffer.size());
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (got <= 0) {
        Close(c);  // closing removes it from the epoll set
        continue;
      }
      c->in.append(buffer.data(), static_cast<size_t>(got));
      const bool had_replies = !c->out.empty();
      if (!responder->Serve(c, &c->out)) {
        Close(c);
        continue;
      }
      if (!had_replies && !c->out.empty()) replying.push_back(c);
    }
    if (responder->durable()) responder->SyncInline();
    for (Connection* c : replying) {
      if (c->closed) continue;
      const ssize_t sent = ::send(c->fd, c->out.data(), c->out.size(), MSG_NOSIGNAL);
      if (sent < 0 && errno != EAGAIN) {
        Close(c);
        continue;
      }
      // The bench reads every reply before it sends again: a reply always fits the send buffer.
      if (static_cast<size_t>(std::max<ssize_t>(sent, 0)) != c->out.size()) {
        std::fprintf(stderr, "sundial-transport-floor: a short send (not handled)\n");
        std::exit(1);
      }
      c->out.clear();
    }
    replying.clear();
  }
}

// ---- io_uring ---------------------------------------------------------------------------------

enum Op : uint64_t { kAccept = 1, kRecv, kSend, kLogWrite, kLogSync };

class UringServer {
 public:
  UringServer(int listen_fd, Responder* responder, bool log_inline)
      : listen_fd_(listen_fd), responder_(responder), log_inline_(log_inline) {
    io_uring_params params{};
    // Completions run when this thread asks for them (in io_uring_enter), not as interrupts of
    // whatever it is doing: the mode io_uring's authors advise for a server's one thread.
    params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    int e = io_uring_queue_init_params(kEntries, &ring_, &params);
    if (e == -EINVAL) {  // a kernel before 6.1: completions as the kernel runs them
      params = io_uring_params{};
      e = io_uring_queue_init_params(kEntries, &ring_, &params);
    }
    if (e < 0) Fail("io_uring_queue_init", -e);
    buffers_ring_ = static_cast<io_uring_buf_ring*>(::mmap(nullptr, kBuffers * sizeof(io_uring_buf),
                                                           PROT_READ | PROT_WRITE,
                                                           MAP_ANONYMOUS | MAP_PRIVATE, -1, 0));
    if (buffers_ring_ == MAP_FAILED) Fail("mmap", errno);
    io_uring_buf_reg registration{};
    registration.ring_addr = reinterpret_cast<uint64_t>(buffers_ring_);
    registration.ring_entries = kBuffers;
    registration.bgid = kBufferGroup;
    if (int e = io_uring_register_buf_ring(&ring_, &registration, 0); e < 0) {
      Fail("io_uring_register_buf_ring", -e);
    }
    io_uring_buf_ring_init(buffers_ring_);
    buffers_.resize(size_t{kBuffers} * kBufferBytes);
    for (unsigned i = 0; i < kBuffers; ++i) {
      io_uring_buf_ring_add(buffers_ring_, Buffer(i), kBufferBytes, static_cast<uint16_t>(i),
                            io_uring_buf_ring_mask(kBuffers), static_cast<int>(i));
    }
    io_uring_buf_ring_advance(buffers_ring_, kBuffers);
  }

  [[noreturn]] void Run() {
    ArmAccept();
    for (;;) {
      if (int e = io_uring_submit_and_wait(&ring_, 1); e < 0 && e != -EINTR) Fail("submit", -e);
      io_uring_cqe* cqe = nullptr;
      unsigned head = 0, seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        Complete(*cqe);
      }
      io_uring_cq_advance(&ring_, seen);
      if (returned_ > 0) io_uring_buf_ring_advance(buffers_ring_, std::exchange(returned_, 0));
      if (responder_->durable()) log_inline_ ? SyncInline() : StartSync();
      for (Connection* c : replying_) Send(c);
      replying_.clear();
    }
  }

 private:
  static constexpr unsigned kEntries = 4096;
  static constexpr unsigned kBuffers = 1024;
  static constexpr unsigned kBufferBytes = 16 << 10;
  static constexpr uint16_t kBufferGroup = 0;

  char* Buffer(unsigned id) { return buffers_.data() + size_t{id} * kBufferBytes; }

  io_uring_sqe* NextSqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {  // the submission queue is full: hand it over and go on
      (void)io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    return sqe;
  }

  static uint64_t Tag(Op op, uint32_t slot = 0) { return (uint64_t{slot} << 8) | op; }

  void ArmAccept() {
    io_uring_sqe* sqe = NextSqe();
    io_uring_prep_multishot_accept(sqe, listen_fd_, nullptr, nullptr, 0);
    io_uring_sqe_set_data64(sqe, Tag(kAccept));
  }

  void ArmRecv(Connection* c) {
    io_uring_sqe* sqe = NextSqe();
    io_uring_prep_recv_multishot(sqe, c->fd, nullptr, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kBufferGroup;
    io_uring_sqe_set_data64(sqe, Tag(kRecv, c->slot));
  }

  void Send(Connection* c) {
    if (c->closed || c->send_busy || c->out.empty()) return;
    c->sending.swap(c->out);
    c->out.clear();
    io_uring_sqe* sqe = NextSqe();
    io_uring_prep_send(sqe, c->fd, c->sending.data(), c->sending.size(), MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, Tag(kSend, c->slot));
    c->send_busy = true;
  }

  void Complete(const io_uring_cqe& cqe) {
    const uint64_t tag = io_uring_cqe_get_data64(&cqe);
    const bool more = (cqe.flags & IORING_CQE_F_MORE) != 0;
    Connection* c = nullptr;
    if ((tag & 0xff) == kRecv || (tag & 0xff) == kSend) c = connections_[tag >> 8];
    switch (static_cast<Op>(tag & 0xff)) {
      case kAccept:
        if (cqe.res >= 0) {
          NoDelay(cqe.res);
          auto* accepted = new Connection;
          accepted->fd = cqe.res;
          accepted->slot = static_cast<uint32_t>(connections_.size());
          connections_.push_back(accepted);
          ArmRecv(accepted);
        }
        if (!more) ArmAccept();
        return;
      case kRecv:
        if (cqe.res > 0) Received(c, cqe);
        if (!more && !c->closed) {
          // Out of provided buffers (ENOBUFS) ends a multishot recv without ending the stream.
          if (cqe.res > 0 || cqe.res == -ENOBUFS) {
            ArmRecv(c);
          } else {
            Close(c);
          }
        }
        return;
      case kSend:
        c->send_busy = false;
        if (cqe.res < 0) {
          Close(c);
        } else {
          c->out.insert(0, c->sending, static_cast<size_t>(cqe.res));  // a short send's rest
          c->sending.clear();
          if (!c->out.empty()) replying_.push_back(c);
        }
        return;
      case kLogWrite:
        if (cqe.res < 0) Fail("write the log", -cqe.res);
        return;
      case kLogSync:
        if (cqe.res < 0) Fail("fdatasync the log", -cqe.res);
        sync_busy_ = false;
        for (Connection* synced : syncing_) {
          synced->out.append(synced->in_flight);
          synced->in_flight.clear();
          replying_.push_back(synced);
        }
        syncing_.clear();
        return;
    }
  }

  void Received(Connection* c, const io_uring_cqe& cqe) {
    const unsigned id = cqe.flags >> IORING_CQE_BUFFER_SHIFT;
    c->in.append(Buffer(id), static_cast<size_t>(cqe.res));
    io_uring_buf_ring_add(buffers_ring_, Buffer(id), kBufferBytes, static_cast<uint16_t>(id),
                          io_uring_buf_ring_mask(kBuffers), returned_++);
    if (c->closed) return;
    std::string* replies = responder_->durable() ? &c->held : &c->out;
    const bool had_replies = !replies->empty();
    if (!responder_->Serve(c, replies)) return Close(c);
    if (had_replies || replies->empty()) return;
    (responder_->durable() ? gathering_ : replying_).push_back(c);
  }

  // uring-inline: the log on this thread, then the group's replies are ready.
  void SyncInline() {
    responder_->SyncInline();
    for (Connection* c : gathering_) {
      c->out.append(c->held);
      c->held.clear();
      replying_.push_back(c);
    }
    gathering_.clear();
  }

  // uring: the gathered group's log bytes written and synced by two linked operations; the next
  // group gathers while they run.
  void StartSync() {
    if (sync_busy_ || responder_->log_empty()) return;
    const uint64_t at = responder_->log_offset();
    writing_ = responder_->TakeLog();
    io_uring_sqe* write = NextSqe();
    io_uring_prep_write(write, responder_->log_fd(), writing_.data(),
                        static_cast<unsigned>(writing_.size()), at);
    write->flags |= IOSQE_IO_LINK;
    io_uring_sqe_set_data64(write, Tag(kLogWrite));
    io_uring_sqe* sync = NextSqe();
    io_uring_prep_fsync(sync, responder_->log_fd(), IORING_FSYNC_DATASYNC);
    io_uring_sqe_set_data64(sync, Tag(kLogSync));
    sync_busy_ = true;
    syncing_.swap(gathering_);
    gathering_.clear();
    for (Connection* c : syncing_) {
      c->in_flight.append(c->held);
      c->held.clear();
    }
  }

  const int listen_fd_;
  Responder* const responder_;
  const bool log_inline_;
  io_uring ring_{};
  io_uring_buf_ring* buffers_ring_ = nullptr;
  std::vector<char> buffers_;
  int returned_ = 0;  // buffers given back to the ring since its tail last moved
  std::vector<Connection*> connections_;  // by slot
  std::vector<Connection*> replying_;     // with replies to send at the end of this turn
  std::vector<Connection*> gathering_;    // durable: with replies in the group that gathers
  std::vector<Connection*> syncing_;      // durable (uring): with replies in the group syncing
  std::string writing_;                   // the log bytes of the write in flight
  bool sync_busy_ = false;
};

}  // namespace

// Exit status 77 (a test's "skipped") where io_uring is refused: a kernel built without it, or
// a sandbox's seccomp filter (Docker's default profile) or io_uring_disabled that forbids it.
int ProbeUring() {
  io_uring ring{};
  const int e = io_uring_queue_init(8, &ring, 0);
  if (e == -ENOSYS || e == -EPERM) {
    std::fprintf(stderr, "sundial-transport-floor: io_uring is unavailable here: %s\n",
                 std::strerror(-e));
    return 77;
  }
  if (e < 0) Fail("io_uring_queue_init", -e);
  io_uring_queue_exit(&ring);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && std::string_view(argv[1]) == "--probe-uring") return ProbeUring();
  const std::string_view shape = argc == 5 ? argv[1] : "";
  const std::string_view durability = argc == 5 ? argv[2] : "";
  if ((shape != "epoll" && shape != "uring" && shape != "uring-inline") ||
      (durability != "relaxed" && durability != "durable") || std::atoi(argv[3]) <= 0) {
    std::fprintf(stderr,
                 "usage: sundial-transport-floor epoll|uring|uring-inline relaxed|durable PORT "
                 "LOG_FILE\n");
    return 2;
  }
  Responder responder(durability == "durable", argv[4]);
  const int listen_fd = Listen(std::atoi(argv[3]));
  if (shape == "epoll") RunEpoll(listen_fd, &responder);
  UringServer(listen_fd, &responder, shape == "uring-inline").Run();
}
