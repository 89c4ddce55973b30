#include "sim/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/atomic_file.h"
#include "core/protocol.h"
#include "sim/errors.h"

namespace flatline {
namespace fs = std::filesystem;

namespace {

// How many ranks wrote a checkpoint: its rank-<r>.pt files (0..n-1 must all be there).
int checkpoint_world_size(const std::string& dir) {
  int n = 0;
  while (fs::exists(fmt::format("{}/rank-{}.pt", dir, n))) ++n;
  return n;
}

// The model's spec, then "name [d0, d1, ...]" per parameter, one per line: what a checkpoint's model
// must match on resume.
std::string model_layout(const ModelSpec& m, const TrainModel& model) {
  // the architecture first: some changes (n_head) keep every parameter's shape
  std::string s = fmt::format("model {} n_layer {} n_head {} n_embd {} block_size {} tied_head {} channels {} hidden {}\n",
                              m.kind, m.n_layer, m.n_head, m.n_embd, m.block_size, m.tied_head, m.channels, m.hidden);
  for (const auto& p : model.named_parameters())
    s += fmt::format("{} [{}]\n", p.key(), fmt::join(p.value().sizes(), ", "));
  return s;
}

// Refuses a checkpoint written by a different model (LibTorch's loader would replace each parameter by
// the saved tensor whatever its shape, or hand one layer's optimizer state to another of equal shape).
void check_model_layout(const std::string& file, const std::string& saved, const std::string& ours) {
  if (saved == ours) return;
  auto lines = [](const std::string& s) {
    std::vector<std::string> v;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
  };
  const auto a = lines(saved), b = lines(ours);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  throw std::runtime_error(fmt::format(
      "{}: the checkpoint was written by a different model ({} parameter tensors, this scenario's has {}); "
      "first difference: checkpoint '{}', scenario '{}'",
      file, a.size() - 1, b.size() - 1, i < a.size() ? a[i] : "(none)", i < b.size() ? b[i] : "(none)"));
}

void save_checkpoint(const std::string& dir, int rank, const ModelSpec& spec, TrainModel& model,
                     const Optimizer& opt, const Progress& p) {
  fs::create_directories(dir);
  torch::serialize::OutputArchive ar, opt_ar;
  ar.write("model_layout", c10::IValue(model_layout(spec, model)));
  model.save(ar);
  opt.save(opt_ar);
  ar.write("optimizer", opt_ar);
  ar.write("progress", at::tensor({p.c.step, p.c.sched_step, p.c.opt_step, p.c.samples_seen, p.sampler.epoch,
                                   p.sampler.position, p.c.scaler.growth_tracker, p.logged.step, p.resumed_from},
                                  at::kLong));
  ar.write("progress_f", at::tensor({p.c.scaler.scale, p.logged.loss}, at::kDouble));
  ar.write("rng", at::detail::getDefaultCPUGenerator().get_state());
  // Serialised in memory, then written and checked by us: LibTorch's file writer finishes the zip in
  // its destructor, so a full disk there aborted the process (a c10::Error thrown during unwinding).
  std::ostringstream bytes;
  ar.save_to(bytes);
  write_file_atomic(fmt::format("{}/rank-{}.pt", dir, rank), bytes.str(), "the checkpoint");
}

Progress load_checkpoint(const std::string& dir, int rank, const ModelSpec& spec, TrainModel& model, Optimizer& opt,
                         at::Device dev) {
  torch::serialize::InputArchive ar, opt_ar;
  const std::string file = fmt::format("{}/rank-{}.pt", dir, rank);
  try {
    ar.load_from(file, dev);  // tensors onto this rank's device, whichever device wrote them
  } catch (const c10::Error& e) {  // "failed finding central directory": name the file
    throw std::runtime_error(fmt::format("{}: not a readable checkpoint: {}", file, e.what_without_backtrace()));
  }
  c10::IValue layout;
  if (!ar.try_read("model_layout", layout) || !layout.isString())
    throw std::runtime_error(file + ": not a flatline checkpoint (no model_layout record)");
  check_model_layout(file, layout.toStringRef(), model_layout(spec, model));
  model.load(ar);
  ar.read("optimizer", opt_ar);
  try {
    opt.load(opt_ar);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(file + ": " + e.what());
  }
  at::Tensor pi, pf, rng;
  ar.read("progress", pi);
  ar.read("progress_f", pf);
  ar.read("rng", rng);
  pi = pi.cpu();
  pf = pf.cpu();
  rng = rng.cpu();
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(rng);
  // 8 integers before flatline confirm, 9 since (the step its processes resumed from)
  if (pi.dim() != 1 || (pi.numel() != 8 && pi.numel() != 9) || pi.scalar_type() != at::kLong || pf.dim() != 1 ||
      pf.numel() != 2 || pf.scalar_type() != at::kDouble)
    throw std::runtime_error(fmt::format("{}: the progress records hold {} and {} values, expected 8 or 9 integers and 2 "
                                         "doubles (a checkpoint of another flatline version?)",
                                         file, pi.numel(), pf.numel()));
  auto i = pi.accessor<int64_t, 1>();
  auto f = pf.accessor<double, 1>();
  Progress p;
  p.c.step = i[0];
  p.c.sched_step = i[1];
  p.c.opt_step = i[2];
  p.c.samples_seen = i[3];
  p.sampler = {i[4], i[5]};
  p.c.scaler.growth_tracker = i[6];
  p.logged.step = i[7];
  p.resumed_from = pi.numel() > 8 ? i[8] : -1;  // written since flatline confirm (a replay's history)
  p.c.scaler.scale = f[0];
  p.logged.loss = f[1];
  return p;
}

}  // namespace

std::string checkpoint_dir(const std::string& run_dir, int64_t step) {
  return fmt::format("{}/checkpoints/step-{:08d}", run_dir, step);
}

int64_t latest_checkpoint(const std::string& run_dir) {
  int64_t best = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints", ec)) {
    auto name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || name.size() == 5 || name.size() > 5 + 18 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos || !fs::exists(e.path() / "COMPLETE"))
      continue;
    best = std::max<int64_t>(best, std::stoll(name.substr(5)));
  }
  return best;
}

std::string live_checkpoint_dir(const std::string& run_dir, int64_t step) {
  return fmt::format("{}/checkpoints/{}{:08d}", run_dir, kLiveCheckpointPrefix, step);
}

void write_checkpoint(const std::string& dir, int rank, Comm& comm, const ModelSpec& spec, TrainModel& model,
                      const Optimizer& opt, const Progress& p) {
  try {
    save_checkpoint(dir, rank, spec, model, opt, p);
  } catch (const FileWriteError& e) {  // names the file and the OS's reason already
    throw RankError(RankError::Kind::checkpoint, e.what());
  } catch (const std::exception& e) {
    throw RankError(RankError::Kind::checkpoint,
                    fmt::format("{}/rank-{}.pt: cannot write the checkpoint: {}", dir, rank, message_of(e)));
  }
  comm.barrier();
  if (rank == 0) std::ofstream(dir + "/COMPLETE") << p.c.step << "\n";
}

LoadedCheckpoint load_latest_checkpoint(const std::string& run_dir, const char* asked_by, int rank, int world,
                                        int per_rank_batch, int64_t train_size, const ModelSpec& spec,
                                        TrainModel& model, Optimizer& opt, at::Device dev) {
  LoadedCheckpoint out;
  out.step = latest_checkpoint(run_dir);
  if (out.step < 0)
    throw RankError(RankError::Kind::checkpoint,
                    fmt::format("rank {}: {} asked but {}/checkpoints has no complete checkpoint", rank, asked_by, run_dir));
  out.dir = checkpoint_dir(run_dir, out.step);
  const std::string& dir = out.dir;
  out.written_by = checkpoint_world_size(dir);
  const int written_by = out.written_by, source = rank < written_by ? rank : 0;
  Progress& pr = out.progress;
  try {
    pr = load_checkpoint(dir, source, spec, model, opt, dev);
  } catch (const std::exception& e) {
    const std::string file = fmt::format("{}/rank-{}.pt", dir, source), m = message_of(e);
    throw RankError(RankError::Kind::checkpoint, m.find(file) == std::string::npos ? file + ": " + m : m);
  }
  if (written_by == world) return out;
  const auto moved = reshard(pr.sampler, train_size, written_by, world, per_rank_batch);
  if (!moved)
    throw RankError(RankError::Kind::checkpoint,
                    fmt::format("{}: written by {} rank{}; {} ranks cannot continue its sampler without "
                                "replaying or skipping data ({} global batches of {} samples into epoch {} "
                                "is not a whole number of global batches of {}): resume with {}={}",
                                dir, written_by, written_by == 1 ? "" : "s", world, pr.sampler.position,
                                int64_t{written_by} * per_rank_batch, pr.sampler.epoch, int64_t{world} * per_rank_batch,
                                kEnvWorldSize, written_by));
  pr.sampler = *moved;
  return out;
}

}  // namespace flatline
