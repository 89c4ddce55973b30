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

#include <array>
#include <vector>

#include "detectors/hash_history.h"
#include "detectors/gated_ranks.h"
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
constexpr uint32_t kBloomBits = 4096;  // a rank's filter over its anchors (512 bytes; 2 MB at 4096 ranks)

class DataReplay final : public BlockDetector {
 public:
  explicit DataReplay(const DetectorConfig& c)
      : gate_(c.world_size, /*exact_positions=*/true),
        per_rank_(std::max(kMinPerRank, kHashBudget / static_cast<size_t>(c.world_size > 0 ? c.world_size : 64))) {}
  const char* cause() const override { return "data_replay"; }
  bool expensive() const override { return true; }  // a hash table per rank

  void observe_event(const Record& r) override {
    if (r.kind != RecordKind::event || r.name != event::resume || r.rank < 0) return;
    Rank& s = rank(r.rank);
    s.first_seen.forget_after(r.step);
    s.origin.forget_after(r.step);
    s.epochs.forget_after(r.step);
    s.hashed_n = 0;  // the window starts over
    s.n_reps = 0;
  }

  // One pass over the block's step rows in stream order. A rank's position on the gate is the ordinal of
  // its step records (RankGate::next counts them).
  void observe_block(const StepBlock& b) override {
    const size_t n = b.rows();
    if (n == 0) return;
    any_steps_ = true;
    if (b.lockstep) {
      lockstep_rows(b);
    } else {
      for (size_t i = 0; i < n; ++i) {
        const int r = b.rank[i];
        if (r < 0) continue;
        Rank& s = rank(r);
        const double ord = gate_.next(r);
        const uint64_t f = b.flags[i];
        if (f & StepBlock::kBatchHash) on_hash(b, i, HashHistory::tag_of(b.batch_hash[i]), r, ord, s);
        else if ((f & StepBlock::kSamplesSeen) && !s.hashed) on_position(b, i, r, ord, s);
      }
    }
    gate_.poll();
  }
  void finish(double) override { gate_.flush(); }
  std::optional<Finding> finding() const override { return gate_.finding(); }

  CheckResult check() const override {
    if (auto settled = gated_check(cause(), gate_, any_steps_)) return *settled;
    if (!hashed_) return {cause(), CheckState::cannot_run, "missing batch_hash: log a hash of each batch's sample ids"};
    int64_t batches = 0, repeats = 0;
    for (const Rank& s : ranks_) {
      batches += s.distinct;
      repeats += s.repeats;
    }
    return {cause(), CheckState::pass,
            fmt::format("{} distinct batches hashed, {} isolated repeat(s), no replay", batches, repeats)};
  }

 private:
  struct Repeat {  // a repeat in the window: the rank's hashed record it was (hashed_n), its step, the first
    int64_t at, step, first_step;
  };
  struct Rank {
    explicit Rank(size_t per_rank = 1) : first_seen(per_rank), origin(kOriginAnchors), epochs(kEpochAnchors * kAnchoredEpochs) {}
    // what a new batch reads and writes (lockstep_rows), first
    HashHistory first_seen;                          // hash -> step it was first seen at (the latest per_rank_)
    int64_t distinct = 0;
    int64_t hashed_n = 0;                            // hashed records since the start or the last resume
    int64_t epoch = 0;                               // the `epoch` of the last new hashed record, if any
    bool has_epoch = false;
    bool settled = false;  // its anchors of the run's start and of `epoch` are complete (no new one to add)
    bool hashed = false;                             // this rank logs batch hashes
    int64_t repeats = 0;
    std::optional<int64_t> position, position_step;  // the last samples_seen and its step
    HashHistory origin, epochs;                      // the anchors (see Window)
    int64_t origin_n = 0, epoch_n = 0;
    // the last kWindow repeats (a ring, the newest at reps[(n_reps - 1) % kWindow]); the window is the last
    // min(hashed_n, kWindow) hashed records, so a repeat is in it while hashed_n - at < kWindow
    Repeat reps[kWindow];
    size_t n_reps = 0;
  // A Bloom filter over the anchors' tags (two bits of kBloomBits each): most new hashes are no anchor,
    // and one test says so without looking in the two tables. It may hold anchors the tables forgot (a
    // filter only ever needs to be a superset); it is rebuilt from the tables once kBloomBits / 16
    // anchors were added since it was last.
    std::array<uint64_t, kBloomBits / 64> bloom{};
    int64_t bloom_adds = 0;
    bool maybe_anchor(uint32_t t) const {
      const uint32_t a = t % kBloomBits, c = (t >> 12) % kBloomBits;
      return (bloom[a / 64] >> (a % 64) & 1) & (bloom[c / 64] >> (c % 64) & 1);
    }
    void set_bits(uint32_t t) {
      const uint32_t a = t % kBloomBits, c = (t >> 12) % kBloomBits;
      bloom[a / 64] |= uint64_t{1} << (a % 64);
      bloom[c / 64] |= uint64_t{1} << (c % 64);
    }
    void add_anchor(uint32_t t) {
      if (++bloom_adds > static_cast<int64_t>(kBloomBits / 16)) {  // the tables turned over: start afresh
        bloom.fill(0);
        bloom_adds = 0;
        origin.for_each_tag([this](uint32_t x) { set_bits(x); });
        epochs.for_each_tag([this](uint32_t x) { set_bits(x); });
      }
      set_bits(t);
    }
  };

  Rank& rank(int r) {
    if (static_cast<size_t>(r) >= ranks_.size()) ranks_.resize(static_cast<size_t>(r) + 1, Rank(per_rank_));
    return ranks_[static_cast<size_t>(r)];
  }

  // The rows of a block in lockstep (row i is rank i): the ranks made known to the gate at once, each
  // row's tag mixed in a first pass, the bucket it will look in asked of memory kAhead rows before (at
  // fleet scale the tables miss the cache). A new batch of a rank whose anchors are complete, that the
  // anchors' filter does not know and that fits its home bucket (HashHistory::try_insert_new) takes the
  // short way: remembered, counted, no repeat; any other row goes through on_hash(), with the same result
  // (docs/DESIGN.md §2 "Passes over blocks").
  void lockstep_rows(const StepBlock& b) {
    const size_t n = b.rows();
    if (ranks_.size() < n) ranks_.resize(n, Rank(per_rank_));
    gate_.next_all(static_cast<int>(n));
    tags_.resize(n);
    uint32_t* const tags = tags_.data();
    const uint64_t* const hashes = b.batch_hash.data();
    for (size_t i = 0; i < n; ++i) tags[i] = HashHistory::tag_of(hashes[i]);
    constexpr size_t kAhead = 8;  // a power of two
    size_t home[kAhead];
    Rank* const ranks = ranks_.data();
    for (size_t i = 0; i < kAhead && i < n; ++i) home[i] = ranks[i].first_seen.prefetch_home(tags[i]);
    const uint64_t* const flags = b.flags.data();
    const int64_t *const epoch = b.epoch.data(), *const step = b.step.data();
    for (size_t i = 0; i < n; ++i) {
      const size_t bucket = home[i % kAhead];
      if (i + kAhead < n) home[(i + kAhead) % kAhead] = ranks[i + kAhead].first_seen.prefetch_home(tags[i + kAhead]);
      Rank& s = ranks[i];
      const uint64_t f = flags[i];
      if (f & StepBlock::kBatchHash) {
        const uint32_t t = tags[i];
        const bool has_epoch = f & StepBlock::kEpoch;
        if (s.settled & (s.has_epoch == has_epoch) & (s.epoch == epoch[i]) &&
            !(s.first_seen.evicted() && s.maybe_anchor(t)) && s.first_seen.try_insert_new(bucket, t, step[i])) {
          ++s.distinct;
          ++s.hashed_n;
          continue;
        }
        on_hash(b, i, t, static_cast<int>(i), gate_.position(static_cast<int>(i)), s);
      } else if ((f & StepBlock::kSamplesSeen) && !s.hashed) {
        on_position(b, i, static_cast<int>(i), gate_.position(static_cast<int>(i)), s);
      }
    }
  }

  // Row i of rank r, its hash's tag t (HashHistory::tag_of).
  void on_hash(const StepBlock& b, size_t i, uint32_t t, int r, double ord, Rank& s) {
    hashed_ = true;
    s.hashed = true;
    const int64_t step = b.step[i];
    auto [seen_step, inserted] = s.first_seen.find_or_insert_tag(t, step);
    if (inserted) {
      // New to the history: an anchor (a batch too old for the history) when it is one; else, at the
      // start of the run or of an epoch, it becomes one.
      const bool has_epoch = b.flags[i] & StepBlock::kEpoch;
      const int64_t epoch = b.epoch[i];
      if (has_epoch != s.has_epoch || (has_epoch && epoch != s.epoch)) s.epoch_n = 0;
      s.has_epoch = has_epoch;
      s.epoch = epoch;
      // (while the history has forgotten nothing, it holds every anchor: nothing to look up)
      std::optional<int64_t> old;
      if (s.first_seen.evicted() && s.maybe_anchor(t)) {
        old = s.origin.find_tag(t, step);
        if (!old) old = s.epochs.find_tag(t, step);
      }
      if (old && *old != step) {
        seen_step = *old;
        inserted = false;
      } else if (!old) {
        if (s.origin_n < kOriginAnchors) {
          ++s.origin_n;
          s.origin.find_or_insert_tag(t, step);
          s.add_anchor(t);
        }
        if (has_epoch && s.epoch_n < kEpochAnchors) {
          ++s.epoch_n;
          s.epochs.find_or_insert_tag(t, step);
          s.add_anchor(t);
        }
      }
      s.settled = s.origin_n >= kOriginAnchors && (!has_epoch || s.epoch_n >= kEpochAnchors);
    }
    const bool repeat = !inserted && seen_step != step;  // same step again = a restart re-running it
    if (inserted) ++s.distinct;
    ++s.hashed_n;
    if (!repeat) return;
    ++s.repeats;
    s.reps[s.n_reps++ % kWindow] = {s.hashed_n, step, seen_step};
    // the repeats in the window (the last min(hashed_n, kWindow) hashed records), the first of them oldest
    int n = 0;
    const Repeat* first = nullptr;
    for (size_t k = std::min(s.n_reps, kWindow); k > 0; --k) {
      const Repeat& e = s.reps[(s.n_reps - k) % kWindow];
      if (s.hashed_n - e.at >= static_cast<int64_t>(kWindow)) continue;
      if (n++ == 0) first = &e;
    }
    if (n < kRepeats || !gate_.would_take(r, ord)) return;  // (the evidence is formatted only for a candidate)
    gate_.offer(r, ord,
                Finding{cause(), -1, first->step, step, b.t[i], 0.9,
                        {fmt::format("batch of step {} identical to step {} (hash {}); {} of the last {} batches replayed",
                                     step, seen_step, hex(b.batch_hash[i]), n, s.hashed_n - first->at + 1),
                         fmt::format("rank {}: first replayed batch at step {} (seen at step {})", r, first->step,
                                     first->first_step)}});
  }

  void on_position(const StepBlock& b, size_t i, int r, double ord, Rank& s) {
    const int64_t pos = b.samples_seen[i], step = b.step[i];
    if (s.position && step > *s.position_step && pos < *s.position)
      gate_.offer(r, ord,
                  Finding{cause(), -1, step, step, b.t[i], 0.8,
                          {fmt::format("samples seen went back from {} to {} at step {} while the step advanced from {}: "
                                       "the data loader started over (a resume without the sampler's position)",
                                       *s.position, pos, step, *s.position_step)}});
    s.position = pos;
    s.position_step = step;
  }

  std::vector<Rank> ranks_;
  std::vector<uint32_t> tags_;  // lockstep_rows' scratch: each row's tag
  RankGate gate_;
  size_t per_rank_;
  bool any_steps_ = false, hashed_ = false;
};

}  // namespace

FLATLINE_REGISTER_DETECTOR("data_replay", DataReplay);

}  // namespace flatline
