// core/message_rules.h: the shape every message of a job must have, written once.
//
// Which actor may send which message type to which, the ranges of chunk, layer, step and clock,
// and how many values a message carries (a chunk's count, a layer's sufficient factors, a ring
// segment) follow from the job's layout, placement, model and protocol. Every actor checks each
// incoming message here first (Worker, ServerShard and Coordinator's OnMessage), so no host
// repeats these formulas: the live runtime closes the connection of a peer whose message fails,
// the simulator stops.
#pragma once

#include <string>

#include "core/collectives.h"
#include "core/job.h"
#include "core/messages.h"
#include "core/model.h"
#include "core/placement.h"
#include "core/protocol_error.h"

namespace poseidon::core {

// What an actor knows of its job. `placement` and `model` may be null for actors that take no
// message needing them (the coordinator); `config` may be null only for the coordinator too,
// which then knows `fault` alone.
struct JobShape {
  const JobLayout* layout = nullptr;
  const ProtocolConfig* config = nullptr;
  const Placement* placement = nullptr;
  const Model* model = nullptr;
  FaultConfig fault;  // the coordinator's (equal to config->fault when config is set)
  // Workers of a job with a baseline (ProtocolConfig::baseline): its collectives.
  const CollectivePlan* collectives = nullptr;
};

// Ok, or why `m` cannot be for actor `me` of this job (whatever the actor's state).
ProtocolError CheckMessageShape(const JobShape& job, ActorId me, const Message& m);

// Ok, or why `m` (a kBucket step for worker `me`, already checked by CheckMessageShape) does not
// fit collective `c` of its clock: the layer, the piece, the sender and step for the collective's
// algorithm (under allreduce_algorithm auto), and the values or bytes its segment carries. Under
// DDP CheckMessageShape runs this itself (the buckets are known in advance); under Horovod the
// worker does once the coordinator's answer has told it the collective.
ProtocolError CheckCollectiveStep(const JobShape& job, ActorId me, const Collective& c,
                                  const Message& m);
// Ok, or why worker `me` takes no bucket step `m` of a collective run by `algorithm` (kRing or
// kTree): a ring step only from the previous worker of the ring, a tree step only from a child
// (up) or the parent (down) of its half's tree, and no step beyond the algorithm's.
ProtocolError CheckBucketSender(const JobShape& job, AllreduceAlgorithm algorithm, ActorId me,
                                const Message& m);

// The first layer with parameters that does not go by the parameter server, or -1. A restarted
// worker can rejoin, and a dead one be evicted, only when there is none: the state of SFB and
// ring all-reduce layers lives in the workers.
int FirstLayerOffPs(const Model& model, const ProtocolConfig& config);
// "layer 'fc6' goes by sfb, whose state lives in the workers", for that layer.
std::string OffPsReason(const Model& model, const ProtocolConfig& config, int layer);

}  // namespace poseidon::core
