#include "real_runtime/loopback_push.h"

#include <sys/resource.h>

namespace poseidon::rt {

LoopbackPush::LoopbackPush(const TransportOptions& options, size_t floats) {
  m_.type = core::MsgType::kPushGrad;
  m_.from = 1;
  m_.to = 0;
  m_.data = std::make_shared<std::vector<float>>(floats, 1.0f);
  m_.payload_bytes = static_cast<int64_t>(floats * sizeof(float));
  TransportCallbacks rcb;
  rcb.on_peer_up = [this](int) { up_.Add(); };
  rcb.on_message = [this](core::Message msg) {
    // Read the payload once, as a store would.
    volatile float first = msg.data && !msg.data->empty() ? (*msg.data)[0] : 0.0f;
    (void)first;
    received_.Add();
  };
  TransportCallbacks scb;
  scb.on_peer_up = [this](int) { up_.Add(); };
  scb.on_sent = [this](const core::Message&) { Pump(); };
  uint16_t port = 0;
  receiver_loop_.Run([&] {
    receiver_ = std::make_unique<Transport>(receiver_loop_.io, 0, options, rcb);
    port = receiver_->Listen("127.0.0.1", 0);
  });
  sender_loop_.Run([&] {
    sender_ = std::make_unique<Transport>(sender_loop_.io, 1, options, scb);
    sender_->Connect(0, "127.0.0.1", port);
  });
  up_.WaitFor(2);
}

LoopbackPush::~LoopbackPush() {
  sender_loop_.Run([&] { sender_.reset(); });
  receiver_loop_.Run([&] { receiver_.reset(); });
}

void LoopbackPush::Push(int n) {
  target_ += n;
  sender_loop_.Run([&] {
    remaining_ = n;
    Pump();
  });
  received_.WaitFor(target_);
}

void LoopbackPush::Pump() {
  while (remaining_ > 0 && sender_->Send(m_)) --remaining_;
}

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace poseidon::rt
