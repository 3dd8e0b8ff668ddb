// The replication port (--replication-port; docs/replication.md, "The replication protocol"): the
// primary's end of each standby's connection. It is the connection core's third kind of session
// (server/framed_session.h: the same framing, TLS, limits and accounting as the client port);
// what a frame means is replication/primary_stream.h's. A node that is not the primary refuses
// every Hello (NOT_PRIMARY): a standby dials the primary it learned from etcd.
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>

#include "replication/primary_stream.h"
#include "replication/wire.h"
#include "server/acceptor.h"
#include "server/framed_session.h"
#include "server/internal.h"
#include "server/replication_port.h"

namespace sundial::server {
namespace {

using tcp = asio::ip::tcp;

constexpr size_t kShipBudget = 4u << 20;  // frames queued per fill
constexpr auto kHeartbeatEvery = std::chrono::milliseconds(500);

template <class Stream>
class ReplicationSession final : public FramedSession<Stream> {
  using Base = FramedSession<Stream>;

 public:
  ReplicationSession(Stream stream, std::shared_ptr<asio::ssl::context> tls_context, Loop* loop,
                     Core* core, ReplicationPort* port)
      : Base(std::move(stream), std::move(tls_context), loop, core, Transport::kReplication,
             "replication", OnBadInput::kClose, 64u << 20),
        port_(port) {}

 protected:
  void OnStarted() override {
    this->SetDeadline(SteadyClock::now() + port_->timeout());
    this->Read();
  }

  void OnFrame(std::string_view frame) override {
    this->SetDeadline(SteadyClock::now() + port_->timeout());
    if (!stream_) {
      auto env = port_->StreamEnv();
      if (!env) {
        // Not the primary: say who is (the standby learns it from etcd too).
        return Refuse(replication::EncodeRefusal(Code::kNotPrimary,
                                                 "replication: this node is not the primary",
                                                 this->core_->role()->epoch()));
      }
      epoch_ = env->epoch;
      auto self = std::static_pointer_cast<ReplicationSession>(this->shared_from_this());
      std::weak_ptr<ReplicationSession> weak = self;
      env->on_ack = [this, weak](const std::string& node, uint64_t end) {
        if (auto s = weak.lock()) port_->hub()->Acked(node, session_, end);
      };
      stream_ = std::make_unique<replication::PrimaryStream>(std::move(*env));
    }
    using Next = replication::PrimaryStream::Next;
    const Next next = stream_->OnFrame(frame);
    if (!registered_ && stream_->streaming()) {
      // Registered once its Hello is accepted: from now on the log's writes wake it.
      registered_ = true;
      std::weak_ptr<ReplicationSession> weak =
          std::static_pointer_cast<ReplicationSession>(this->shared_from_this());
      Loop* loop = this->loop();
      session_ = port_->hub()->Connected(stream_->node(), [weak, loop] {
        if (auto s = weak.lock()) s->WakeFromAnyThread(loop);
      });
    }
    if (next == Next::kClose) {
      std::fprintf(stderr, "sundiald: replication: %s: %s\n", stream_->node().c_str(),
                   stream_->why().c_str());
      SendOutput();
      this->CloseAfterWrite();
      return;
    }
    Ship();
  }

  bool OnDeadline() override {
    std::fprintf(stderr, "sundiald: replication: %s: silent for the replication timeout\n",
                 stream_ ? stream_->node().c_str() : "a standby");
    return true;
  }

  void OnWritten() override { Ship(); }

 private:
  void Refuse(const std::string& refusal) {
    this->QueueReply(refusal);
    this->CloseAfterWrite();
    this->loop()->MarkDirty(this);
  }

  // Any thread: the log wrote more; ship it on the session's loop (one post until it ran).
  void WakeFromAnyThread(Loop* loop) {
    if (wake_posted_.exchange(true, std::memory_order_acq_rel)) return;
    auto self = std::static_pointer_cast<ReplicationSession>(this->shared_from_this());
    loop->Post([self] {
      self->wake_posted_.store(false, std::memory_order_release);
      self->Ship();
    });
  }

  // Fills the output while the standby reads it: the stream's next frames (or a heartbeat
  // when there has been nothing to send for a while).
  void Ship() {
    if (this->closed() || !stream_) return;
    if (!this->output_.high()) stream_->Produce(kShipBudget);
    const auto now = SteadyClock::now();
    if (now - last_sent_ >= kHeartbeatEvery) stream_->Heartbeat();
    SendOutput();
    ArmHeartbeat();
  }

  void SendOutput() {
    std::vector<std::string> out = stream_->TakeOutput();
    if (out.empty()) return;
    for (const std::string& frame : out) this->QueueReply(frame);
    last_sent_ = SteadyClock::now();
    this->loop()->MarkDirty(this);
  }

  void ArmHeartbeat() {
    if (heartbeat_armed_ || this->closed()) return;
    heartbeat_armed_ = true;
    if (!heartbeat_) heartbeat_ = std::make_unique<asio::steady_timer>(this->loop()->io());
    heartbeat_->expires_after(kHeartbeatEvery);
    auto self = std::static_pointer_cast<ReplicationSession>(this->shared_from_this());
    heartbeat_->async_wait([self](boost::system::error_code ec) {
      self->heartbeat_armed_ = false;
      if (!ec) self->Ship();
    });
  }

  void Detach() {
    if (registered_) port_->hub()->Disconnected(stream_->node(), session_);
    registered_ = false;
  }

  void DoClose() override {
    Base::DoClose();
    if (heartbeat_) heartbeat_->cancel();
    Detach();
  }

  ReplicationPort* const port_;
  std::unique_ptr<replication::PrimaryStream> stream_;
  uint64_t epoch_ = 0;
  uint64_t session_ = 0;
  bool registered_ = false;
  std::atomic<bool> wake_posted_{false};
  std::unique_ptr<asio::steady_timer> heartbeat_;
  bool heartbeat_armed_ = false;
  SteadyClock::time_point last_sent_ = SteadyClock::now();
};

void StartSession(tcp::socket socket, Loop* loop, Core* core, ReplicationPort* port) {
  if (core->tls() == nullptr) {
    std::make_shared<ReplicationSession<tcp::socket>>(std::move(socket), nullptr, loop, core, port)
        ->Start();
    return;
  }
  std::shared_ptr<asio::ssl::context> context = core->tls()->Current();
  TlsSocket stream(std::move(socket), *context);
  std::make_shared<ReplicationSession<TlsSocket>>(std::move(stream), std::move(context), loop, core,
                                                  port)
      ->Start();
}

}  // namespace

std::unique_ptr<Listener> NewReplicationListener(Loop* loop, Core* core, ReplicationPort* port) {
  return std::make_unique<Acceptor>(loop, core, "--replication-port: cannot listen", std::string(),
                                    [core, port](tcp::socket socket, Loop* on) {
                                      boost::system::error_code ignored;
                                      socket.set_option(tcp::no_delay(true), ignored);
                                      StartSession(std::move(socket), on, core, port);
                                    });
}

}  // namespace sundial::server
