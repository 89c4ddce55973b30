// data_replay (docs/DESIGN.md §2, cause 3): the data repeats (a resumed loader replays its epoch from the
// start, sampler state lost, a small cycle of batches).
//
// Signal: `batch_hash` of each step record (a hash of the batch's sample ids), per rank.
// Window: per rank, the hashes seen with the step each was first seen at (the latest per_rank_ of
//   them, see kHashBudget); the last 3 step records that carried a hash; and anchors that are kept
//   however long the run: the rank's first kOriginAnchors batches, and the first kEpochAnchors of each
//   of its last kAnchoredEpochs epochs (`epoch` of the records). A loader that starts over (a resume
//   that lost the sampler's position: epoch 0 from its first batch, or the current epoch from its
//   start) replays exactly those batches first, so the replay is recognised at any length of run,
//   when the history of every batch no longer fits in memory.
// Warm-up: none needed: a repeat needs an earlier sighting, so the first batches can never fire.
// Thresholds:
//   a record is a repeat when its hash was first seen at a DIFFERENT step number.
//   fire on the 2nd repeat within 3 consecutive hashed records of one rank: one repeat alone can be
//   a coincidence (a hash collision, a deliberately re-used batch); two in three is a replaying
//   loader. onset_step = the step of the first repeat in that window.
// Without batch hashes (the logs of other tools; a rank that logs hashes is judged on them alone): the data position. A step record whose
//   samples_seen is lower than the previous one of its rank while its step is higher means the loader
//   started over without the step counter doing so: a resume that restored the model and optimizer
//   but not the sampler (HF Trainer's ignore_data_skip, a lost dataloader state, Megatron's consumed
//   samples reset). onset_step = detected_step = that step. The check still says what batch_hash
//   would add (a cycle that keeps counting samples is invisible to the position).
// False-positive guard: a restart that re-runs steps from the last checkpoint re-trains the batches of
//   the steps it rolled back: at a rank's `resume` event (step = the checkpoint's), the batches it first
//   saw after that step are forgotten, and its last-3 window starts over. At the same world size they
//   come again at the same step numbers; at another one the sampler re-shards them (other hashes, other
//   steps), which is no replay either. What the resumed loader replays from BEFORE the checkpoint (an
//   epoch started over) is still a repeat. (Logs without resume events: the SAME hash at the SAME step
//   number is not a repeat, as before.) A new epoch
//   reshuffles, so its batches hash differently. (An unshuffled loader that starts a new epoch
//   does repeat its data, and this detector says so.)
// Cross-rank: candidates per rank, committed by RankGate on the ordinal of step records.
#include "detectors/data_replay.h"

#include <vector>

#include "detectors/hash_history.h"
#include "detectors/rank_gate.h"
#include "detectors/registry.h"
#include "detectors/util.h"

namespace flatline {
namespace {
using namespace detail;

using namespace data_replay;  // its thresholds (detectors/data_replay.h)
// Batches remembered per rank: 1M over all ranks (16 MB of 8-byte slots at half load: the tables
// of 1024 ranks stay in a 32 MB L3, which decides the suite's speed at fleet scale), at least 1024
// per rank: 1024 steps of history at 1024 ranks, 16384 at 64. A replay of batches older than that
// is not recognised.
constexpr size_t kHashBudget = size_t{1} << 20, kMinPerRank = 1024;
// Anchors per rank (see Window): 32 + 16 x 16 = 288 hashes, 4.6 KiB of slots; 75 MB at 16,384 ranks.
constexpr int64_t kOriginAnchors = 32, kEpochAnchors = 16, kAnchoredEpochs = 16;

class DataReplay final : public BlockDetector<DataReplay> {
 public:
  explicit DataReplay(const DetectorConfig& c)
      : gate_(c.world_size, /*exact_positions=*/true),
        per_rank_(std::max(kMinPerRank, kHashBudget / static_cast<size_t>(c.world_size > 0 ? c.world_size : 64))) {}
  const char* cause() const override { return "data_replay"; }
  bool expensive() const override { return true; }  // a hash table per rank

  void observe(const Record& r) override {
    if (r.kind == RecordKind::event && r.name == "resume" && r.rank >= 0) {
      Rank& s = ranks_[r.rank];
      if (s.first_seen) s.first_seen->forget_after(r.step);
      if (s.origin) s.origin->forget_after(r.step);
      if (s.epochs) s.epochs->forget_after(r.step);
      s.n_last = 0;
      return;
    }
    if (r.kind != RecordKind::step || r.rank < 0) return;
    any_steps_ = true;
    Rank& s = ranks_[r.rank];
    if (!s.first_seen) s.first_seen.emplace(per_rank_);
    ++s.ordinal;
    if (r.batch_hash) on_hash(r, s);
    if (r.samples_seen && !r.batch_hash && !s.hashed) on_position(r, s);
    gate_.advance(r.rank, static_cast<double>(s.ordinal));
    gate_.poll();
  }
  void finish(double) override { gate_.flush(); }
  std::optional<Finding> finding() const override { return gate_.finding(); }

  CheckResult check() const override {
    if (auto f = gate_.finding()) return {cause(), CheckState::fail, f->evidence.empty() ? "" : f->evidence.front()};
    if (!any_steps_) return {cause(), CheckState::pending, "no step records yet"};
    if (!hashed_) return {cause(), CheckState::cannot_run, "missing batch_hash: log a hash of each batch's sample ids"};
    int64_t batches = 0, repeats = 0;
    for (const auto& [rank, s] : ranks_) {
      batches += s.distinct;
      repeats += s.repeats;
    }
    return {cause(), CheckState::pass,
            fmt::format("{} distinct batches hashed, {} isolated repeat(s), no replay", batches, repeats)};
  }

 private:
  struct Seen {
    bool repeat;
    int64_t step, first_step;
    uint64_t hash;
  };
  struct Rank {
    int64_t ordinal = 0, repeats = 0, distinct = 0;
    std::optional<int64_t> position, position_step;  // the last samples_seen and its step
    bool hashed = false;                             // this rank logs batch hashes
    std::optional<HashHistory> first_seen;  // hash -> step it was first seen at (the latest per_rank_)
    std::optional<HashHistory> origin, epochs;  // the anchors (see Window)
    int64_t origin_n = 0, epoch_n = 0;
    std::optional<int64_t> epoch;               // of the last hashed record
    Seen last[kWindow];                     // the last kWindow hashed records, oldest first
    size_t n_last = 0;
  };

  void on_hash(const Record& r, Rank& s) {
    hashed_ = true;
    s.hashed = true;
    const uint64_t h = *r.batch_hash;
    auto [seen_step, inserted] = s.first_seen->find_or_insert(h, r.step);
    if (inserted) {
      // New to the history: an anchor (a batch too old for the history) when it is one; else, at the
      // start of the run or of an epoch, it becomes one.
      if (!s.origin) {
        s.origin.emplace(kOriginAnchors);
        s.epochs.emplace(kEpochAnchors * kAnchoredEpochs);
      }
      if (r.epoch != s.epoch) s.epoch_n = 0;
      s.epoch = r.epoch;
      // (while the history has forgotten nothing, it holds every anchor: nothing to look up)
      std::optional<int64_t> old;
      if (s.first_seen->evicted()) {
        old = s.origin->find(h, r.step);
        if (!old) old = s.epochs->find(h, r.step);
      }
      if (old && *old != r.step) {
        seen_step = *old;
        inserted = false;
      } else if (!old) {
        if (s.origin_n < kOriginAnchors) {
          ++s.origin_n;
          s.origin->find_or_insert(h, r.step);
        }
        if (r.epoch && s.epoch_n < kEpochAnchors) {
          ++s.epoch_n;
          s.epochs->find_or_insert(h, r.step);
        }
      }
    }
    const bool repeat = !inserted && seen_step != r.step;  // same step again = a restart re-running it
    if (repeat) ++s.repeats;
    if (inserted) ++s.distinct;
    if (s.n_last == kWindow) {
      for (size_t i = 1; i < kWindow; ++i) s.last[i - 1] = s.last[i];
      --s.n_last;
    }
    s.last[s.n_last++] = {repeat, r.step, seen_step, h};
    if (!repeat) return;
    int n = 0;
    const Seen* first = nullptr;
    size_t first_i = 0;
    for (size_t i = 0; i < s.n_last; ++i)
      if (s.last[i].repeat && n++ == 0) {
        first = &s.last[i];
        first_i = i;
      }
    if (n < kRepeats) return;
    gate_.offer(r.rank, static_cast<double>(s.ordinal),
                Finding{cause(), -1, first->step, r.step, r.t, 0.9,
                        {fmt::format("batch of step {} identical to step {} (hash {}); {} of the last {} batches replayed",
                                     r.step, seen_step, hex(h), n, s.n_last - first_i),
                         fmt::format("rank {}: first replayed batch at step {} (seen at step {})", r.rank,
                                     first->step, first->first_step)}});
  }

  void on_position(const Record& r, Rank& s) {
    const int64_t pos = *r.samples_seen;
    if (s.position && r.step > *s.position_step && pos < *s.position)
      gate_.offer(r.rank, static_cast<double>(s.ordinal),
                  Finding{cause(), -1, r.step, r.step, r.t, 0.8,
                          {fmt::format("samples seen went back from {} to {} at step {} while the step advanced from {}: "
                                       "the data loader started over (a resume without the sampler's position)",
                                       *s.position, pos, r.step, *s.position_step)}});
    s.position = pos;
    s.position_step = r.step;
  }

  PerRank<Rank> ranks_;
  RankGate gate_;
  size_t per_rank_;
  bool any_steps_ = false, hashed_ = false;
};

}  // namespace

FLATLINE_REGISTER_DETECTOR("data_replay", DataReplay);

}  // namespace flatline
