// The schedule operations of the operation table (server/dispatch.cc; the rules:
// docs/semantics.md, "Schedules"): each decodes its request, makes one engine call and encodes
// the reply. Upsert, delete, pause, resume and trigger are kMutation rows (their replies wait
// for the log); get and list are kRead rows.
#pragma once

#include "protocol/sundial_generated.h"
#include "server/dispatch.h"

namespace sundial::server {

// Wire helpers shared by the run functions (defined in dispatch.cc).
using PairVector = flatbuffers::Vector<flatbuffers::Offset<protocol::MetadataPair>>;
std::string_view Str(const flatbuffers::String* s);  // absent: empty
Metadata Pairs(const PairVector* v);
flatbuffers::Offset<PairVector> EncodePairs(flatbuffers::FlatBufferBuilder& b,
                                            const Metadata& metadata);

void RunUpsertSchedule(const protocol::Request& request, OpContext& ctx, Reply& r);
void RunGetSchedule(const protocol::Request& request, OpContext& ctx, Reply& r);
void RunListSchedules(const protocol::Request& request, OpContext& ctx, Reply& r);
void RunDeleteSchedule(const protocol::Request& request, OpContext& ctx, Reply& r);
void RunPauseSchedule(const protocol::Request& request, OpContext& ctx, Reply& r);
void RunResumeSchedule(const protocol::Request& request, OpContext& ctx, Reply& r);
void RunTriggerSchedule(const protocol::Request& request, OpContext& ctx, Reply& r);

}  // namespace sundial::server
