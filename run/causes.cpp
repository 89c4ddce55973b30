// The cause table (causes.h). One row per cause; the order of the checklist rows is the checklist.
#include "run/causes.h"

#include <fmt/format.h>

namespace flatline {

const std::vector<Cause>& cause_table() {
  static const std::vector<Cause> t = {
      {"run_not_alive", CauseKind::checklist, false, "alive",
       "the step counter stopped: a hang in a collective, a stuck rank, or a stale logged step and loss",
       "step vs wall clock, heartbeats"},
      {"lr_zero", CauseKind::checklist, false, "lr",
       "the learning rate decayed to (near) zero: a schedule sized wrong, a finished scheduler restored on "
       "resume, a warmup that never advances",
       "lr series, update/param ratio"},
      {"data_replay", CauseKind::checklist, false, "data",
       "the data repeats: a resumed loader replays its epoch, sampler state lost, a small cycle",
       "batch fingerprints, loss periodicity"},
      {"loss_scale_collapse", CauseKind::checklist, false, "scale",
       "the fp16 dynamic loss scale collapsed: repeated overflow halves it, gradients underflow to 0, steps "
       "are skipped",
       "loss scale, skipped steps, zero-gradient fraction"},
      {"zero_grad_rank", CauseKind::checklist, true, "ranks",
       "one data-parallel rank sends zeros into the gradient all-reduce",
       "per-rank local grad norm before the all-reduce"},
      {"straggler", CauseKind::fleet, true, "",
       "one rank computes slower and every step waits for it in the all-reduce",
       "per-rank step time and time inside the all-reduce"},
      {"unexplained_plateau", CauseKind::verdict, false, "",
       "the loss is flat, or never descended, and none of the five causes explains it: the optimizer not "
       "updating the model it trains, labels that do not match the inputs (a loss at ln K), a bug past the "
       "checklist",
       "the loss from its first value, the update norm, the checks that could not run"},
      {"healthy", CauseKind::verdict, false, "",
       "no fault: a converged or capacity-limited model, a cosine tail, warmup from lr 0, the fp16 initial "
       "scale search, checkpoint and eval pauses",
       "every check passes"},
  };
  return t;
}

const Cause* find_cause(std::string_view id) {
  for (const auto& c : cause_table())
    if (id == c.id) return &c;
  return nullptr;
}

const std::vector<std::string>& checklist_causes() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> out;
    for (const auto& c : cause_table())
      if (c.kind == CauseKind::checklist) out.push_back(c.id);
    return out;
  }();
  return v;
}

const std::vector<std::string>& cause_ids() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> out;
    for (const auto& c : cause_table()) out.push_back(c.id);
    return out;
  }();
  return v;
}

bool is_healthy(std::string_view cause) { return cause.empty() || cause == "healthy"; }

bool names_rank(std::string_view cause) {
  const Cause* c = find_cause(cause);
  return c && c->names_rank;
}

std::string cause_with_rank(const std::string& cause, int rank, std::string_view sep) {
  return rank >= 0 && names_rank(cause) ? fmt::format("{}{}{}", cause, sep, rank) : cause;
}

std::string join_ids(const std::vector<std::string>& ids, std::string_view sep) {
  std::string s;
  for (const auto& id : ids) s += (s.empty() ? "" : std::string(sep)) + id;
  return s;
}

}  // namespace flatline
