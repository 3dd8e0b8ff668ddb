// Effect codec: the byte form of a sundial::Effect inside a kEffect record (docs/wal-format.md,
// "Effect payload"). Each EffectType writes exactly the fields Engine::Apply needs (plus `cause`
// for tools); the message payload and packed metadata are logged verbatim for
// kMessageEnqueued only.
//
// DecodeEffect is safe on arbitrary bytes: every length is checked against the bytes left
// before anything is copied, every enum value is range-checked, and trailing bytes are an
// error. It never allocates more than the input's size.
//
// Thread safety: pure functions; a DecodedEffect is a value owned by one thread.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "engine/effect.h"
#include "engine/status.h"
#include "engine/types.h"

namespace sundial::wal {

// Where the members of a decoded kFlowEnqueued live (docs/wal-format.md, "Flows"): their
// effects, and the settings of the kQueueCreated among them. Their strings are views into the
// decoded bytes.
struct EffectGroupStorage {
  std::deque<std::vector<Effect>> members;
  std::deque<QueueSettings> settings;
  void clear() {
    members.clear();
    settings.clear();
  }
};

// Appends the encoding of `effect` to `out`.
// REQUIRES: for kQueueCreated / kQueueUpdated, effect.settings != nullptr.
void EncodeEffect(const Effect& effect, std::string* out);

// An effect decoded from bytes, owning its strings. effect()'s views point into this object:
// they stay valid until it is destroyed or decoded into again. Not copyable (the views would
// dangle); movable is not offered either, for the same reason.
class DecodedEffect {
 public:
  DecodedEffect() = default;
  DecodedEffect(const DecodedEffect&) = delete;
  DecodedEffect& operator=(const DecodedEffect&) = delete;

  const Effect& effect() const { return effect_; }

 private:
  friend Status DecodeEffect(std::string_view bytes, DecodedEffect* out);

  Effect effect_;
  QueueSettings settings_;
  std::string queue_;
  std::string id_;
  std::string payload_;
  std::string packed_metadata_;
  std::string error_;
  std::string dead_letter_queue_;
  std::string result_;
  std::string dependency_edges_;
  std::string batch_;
  std::string worker_id_;
  std::string note_;
  std::string history_;
  std::deque<std::vector<std::string>> dependencies_;  // depends_on (a flow's: one per member)
  ScheduleSpec schedule_;                              // kScheduleUpserted
  std::string group_bytes_;                            // kFlowEnqueued: the bytes its views see
  EffectGroupStorage group_;                           // kFlowEnqueued: its members
};

// Decodes one effect. On error returns kInternal with a detail naming what was malformed and
// leaves *out in an unspecified (but safe) state.
Status DecodeEffect(std::string_view bytes, DecodedEffect* out);

// The same without copying: the effect's strings are views into `bytes` (valid while they
// are), its settings (queue effects) are written to *settings, which may be null for the
// other effect types, and its depends_on keys (a message effect with a dependency extension)
// to a new element of *dependencies, which may be null when no effect has one (an effect
// that does is then malformed), a kScheduleUpserted's spec to *schedule (null: such an effect
// is malformed), and a kFlowEnqueued's members to *group (null: such an effect is malformed;
// the members' depends_on go to *dependencies). Recovery decodes a batch of records this way
// on one thread while another applies the previous batch.
Status DecodeEffectView(std::string_view bytes, Effect* out, QueueSettings* settings,
                        std::deque<std::vector<std::string>>* dependencies = nullptr,
                        ScheduleSpec* schedule = nullptr, EffectGroupStorage* group = nullptr);

}  // namespace sundial::wal
