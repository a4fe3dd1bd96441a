#include "core/worker.h"

namespace poseidon::core {

Worker::Worker(ActorId id, const Model& model, const Placement& placement,
               const JobLayout& layout, const ProtocolConfig& config, Host* host,
               WorkerStore* store)
    : id_(id),
      model_(model),
      placement_(placement),
      layout_(layout),
      config_(config),
      host_(host),
      store_(store) {
  POSEIDON_CHECK(layout_.IsWorker(id_)) << "actor " << id_ << " is not a worker";
  POSEIDON_CHECK(!model_.layers().empty()) << "model " << model_.name() << " has no layers";
  chunks_missing_.assign(model_.layers().size(), 0);
}

void Worker::OnStart(TimeNs now) {
  (void)now;
  Message m;
  m.type = MsgType::kRegister;
  m.from = id_;
  m.to = JobLayout::coordinator();
  host_->Send(m);
}

void Worker::OnMessage(TimeNs now, const Message& msg) {
  switch (msg.type) {
    case MsgType::kStart:
      POSEIDON_CHECK(!started_) << "worker " << id_ << " started twice";
      started_ = true;
      if (config_.iterations > 0) {
        BeginIteration(now);
      } else {
        finished_ = true;
      }
      return;
    case MsgType::kParams: {
      POSEIDON_CHECK(msg.clock == clock_)
          << "worker " << id_ << " at clock " << clock_ << " got " << Describe(msg);
      const Chunk& chunk = placement_.chunks().at(msg.chunk);
      store_->WriteParams(chunk, msg);
      int& missing = chunks_missing_[chunk.layer];
      POSEIDON_CHECK(missing > 0) << "unexpected " << Describe(msg);
      if (--missing == 0) {
        if (config_.device_copies) {
          host_->StartCompute({TaskKind::kCopyToDevice, chunk.layer, -1,
                               placement_.layer_bytes(chunk.layer), clock_});
        } else {
          LayerSynced(now, chunk.layer);
        }
      }
      return;
    }
    default:
      POSEIDON_CHECK(false) << "worker " << id_ << " cannot handle " << Describe(msg);
  }
}

void Worker::BeginIteration(TimeNs now) {
  backward_done_ = false;
  layers_unsynced_ = static_cast<int>(model_.param_layers().size());
  for (int l : model_.param_layers()) {
    chunks_missing_[l] = static_cast<int>(placement_.chunks_of_layer(l).size());
  }
  TraceEvent e;
  e.kind = TraceKind::kIterationBegin;
  e.ts = now;
  e.actor = id_;
  e.clock = clock_;
  host_->Trace(e);
  host_->StartCompute({TaskKind::kForward, 0, -1, 0, clock_});
}

void Worker::OnComputeDone(TimeNs now, const ComputeTask& task) {
  const int n = static_cast<int>(model_.layers().size());
  switch (task.kind) {
    case TaskKind::kForward:
      if (task.layer + 1 < n) {
        host_->StartCompute({TaskKind::kForward, task.layer + 1, -1, 0, clock_});
      } else {
        host_->StartCompute({TaskKind::kBackward, n - 1, -1, 0, clock_});
      }
      return;
    case TaskKind::kBackward: {
      const int l = task.layer;
      if (!model_.layers()[l].blobs.empty()) {
        if (config_.dwbp) {
          StartSync(now, l);
        } else {
          deferred_syncs_.push_back(l);
        }
      }
      if (l > 0) {
        host_->StartCompute({TaskKind::kBackward, l - 1, -1, 0, clock_});
        return;
      }
      backward_done_ = true;
      for (int d : deferred_syncs_) StartSync(now, d);
      deferred_syncs_.clear();
      MaybeEndIteration(now);
      return;
    }
    case TaskKind::kCopyToHost:
      PushLayer(now, task.layer);
      return;
    case TaskKind::kCopyToDevice:
      LayerSynced(now, task.layer);
      return;
    default:
      POSEIDON_CHECK(false) << "worker " << id_ << " got a " << TaskKindName(task.kind) << " task";
  }
}

void Worker::StartSync(TimeNs now, int layer) {
  if (config_.device_copies) {
    host_->StartCompute(
        {TaskKind::kCopyToHost, layer, -1, placement_.layer_bytes(layer), clock_});
  } else {
    PushLayer(now, layer);
  }
}

void Worker::PushLayer(TimeNs now, int layer) {
  (void)now;
  for (int32_t cid : placement_.chunks_of_layer(layer)) {
    const Chunk& c = placement_.chunks()[cid];
    Message m;
    m.type = MsgType::kPushGrad;
    m.from = id_;
    m.to = layout_.server(c.shard);
    m.clock = clock_;
    m.chunk = c.id;
    m.layer = c.layer;
    m.payload_bytes = c.bytes();
    m.data = store_->GradientChunk(c);
    host_->Send(std::move(m));
  }
}

void Worker::LayerSynced(TimeNs now, int layer) {
  TraceEvent e;
  e.kind = TraceKind::kLayerSynced;
  e.ts = now;
  e.actor = id_;
  e.layer = layer;
  e.clock = clock_;
  host_->Trace(e);
  --layers_unsynced_;
  MaybeEndIteration(now);
}

void Worker::MaybeEndIteration(TimeNs now) {
  if (!backward_done_ || layers_unsynced_ > 0) return;
  TraceEvent e;
  e.kind = TraceKind::kIterationEnd;
  e.ts = now;
  e.actor = id_;
  e.clock = clock_;
  host_->Trace(e);
  ++clock_;
  if (clock_ < config_.iterations) {
    BeginIteration(now);
    return;
  }
  finished_ = true;
  Message m;
  m.type = MsgType::kDone;
  m.from = id_;
  m.to = JobLayout::coordinator();
  m.clock = clock_;
  host_->Send(m);
}

std::string Worker::WaitingFor() const {
  std::string who = layout_.ActorName(id_);
  if (finished_) return who + ": finished";
  if (!started_) return who + ": waiting for the coordinator's start";
  if (!backward_done_) return who + ": computing clock " + std::to_string(clock_);
  std::string s = who + ": at clock " + std::to_string(clock_) + ", waiting for parameters of";
  int listed = 0;
  for (int l : model_.param_layers()) {
    if (chunks_missing_[l] > 0 && listed++ < 4) {
      s += " " + model_.layers()[l].name + " (" + std::to_string(chunks_missing_[l]) + " chunks)";
    }
  }
  if (listed > 4) s += " and " + std::to_string(listed - 4) + " more layers";
  return s;
}

}  // namespace poseidon::core
