// The training step of one data-parallel rank, readable top to bottom (llm.c style): data, forward,
// backward, all-reduce, optimizer, logging, with the fault hook points as visible calls between them.
#include "sim/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/interrupt.h"
#include "faults/effects.h"
#include "sim/amp.h"
#include "sim/build_info.h"
#include "sim/data.h"
#include "sim/dist.h"
#include "sim/fp16.h"
#include "run/loss_scaler.h"
#include "sim/models.h"
#include "sim/optimizer.h"
#include "run/sampler.h"
#include "telemetry/async_writer.h"
#include "telemetry/jsonl.h"
#include "telemetry/writers/writer.h"

namespace flatline {
namespace fs = std::filesystem;

namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Run time: seconds since the run's start, steady within this process.
class Clock {
 public:
  explicit Clock(double offset) : offset_(offset), start_(std::chrono::steady_clock::now()) {}
  double t() const {
    return offset_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void set_offset(double o) { offset_ = o; }

 private:
  double offset_;
  std::chrono::steady_clock::time_point start_;
};

// The watchdog: a heartbeat at start and every heartbeat_s with the step and phase, independent of progress.
class Watchdog {
 public:
  Watchdog(AsyncRecordWriter& w, const Clock& clock, int rank, double every_s, bool enabled = true)
      : w_(w), clock_(clock), rank_(rank), every_(every_s) {
    if (enabled) thread_ = std::thread([this] { loop(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void set(int64_t step, const char* phase) {
    step_ = step;
    phase_ = phase;
  }
  void set_phase(const char* phase) { phase_ = phase; }
  int64_t step() const { return step_; }

 private:
  // The first heartbeat at once: a run shorter than one interval still shows its rank alive.
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    do {
      Record r;
      r.kind = RecordKind::heartbeat;
      r.rank = rank_;
      r.t = clock_.t();
      r.step = step_;
      r.phase = phase_.load();
      try {
        w_.post(std::move(r));  // through the step records' queue: the file keeps the order of t
      } catch (...) {  // a full disk must not kill training from a side thread
      }
    } while (!cv_.wait_for(l, std::chrono::duration<double>(every_), [this] { return stop_; }));
  }
  AsyncRecordWriter& w_;
  const Clock& clock_;
  int rank_;
  double every_;
  std::atomic<int64_t> step_{0};
  std::atomic<const char*> phase_{"data"};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// The data of either model, as batches of sample ids -> (x, y) tensors.
struct Data {
  TextCorpus text;
  ImageSet images;
  bool is_text = true;
  int block = 64;
  int64_t train_size() const {
    return is_text ? static_cast<int64_t>(text.train.size() - 1) / block : images.train_size();
  }
  int64_t eval_size() const { return is_text ? static_cast<int64_t>(text.eval.size() - 1) / block : images.eval_size(); }
  std::pair<at::Tensor, at::Tensor> batch(const int64_t* ids, int n, bool eval) const {
    if (is_text) {
      const auto& src = eval ? text.eval : text.train;
      at::Tensor x = at::empty({n, block}, at::kLong), y = at::empty({n, block}, at::kLong);
      auto* px = x.data_ptr<int64_t>();
      auto* py = y.data_ptr<int64_t>();
      for (int i = 0; i < n; ++i) {
        const uint8_t* p = src.data() + ids[i] * block;
        for (int j = 0; j < block; ++j) {
          px[i * block + j] = p[j];
          py[i * block + j] = p[j + 1];
        }
      }
      return {x, y};
    }
    const auto& img = eval ? images.eval_images : images.train_images;
    const auto& lab = eval ? images.eval_labels : images.train_labels;
    const int px_per = images.rows * images.cols;
    at::Tensor x = at::empty({n, 1, images.rows, images.cols}, at::kFloat), y = at::empty({n}, at::kLong);
    auto* pxf = x.data_ptr<float>();
    auto* py = y.data_ptr<int64_t>();
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < px_per; ++j)  // FashionMNIST mean/std normalisation (0.2860, 0.3530)
        pxf[i * px_per + j] = (img[ids[i] * px_per + j] / 255.0f - 0.2860f) / 0.3530f;
      py[i] = lab[ids[i]];
    }
    return {x, y};
  }
};

Data load_data(const Scenario& s) {
  Data d;
  d.is_text = s.data.kind == "text";
  d.block = s.model.block_size;
  if (d.is_text) d.text = load_text(s.data.path.empty() ? kDefaultTextPath : s.data.path, s.data.eval_fraction);
  else d.images = load_fashion_mnist(s.data.path.empty() ? kDefaultFashionMnistPath : s.data.path);
  return d;
}

std::string checkpoint_dir(const std::string& run_dir, int64_t step) {
  return fmt::format("{}/checkpoints/step-{:08d}", run_dir, step);
}

// The newest checkpoint whose every rank finished writing (rank 0 writes COMPLETE after a barrier).
// Only step-<digits> directories count: a `step-latest` link or a stray name is not a checkpoint.
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

// How many ranks wrote a checkpoint: its rank-<r>.pt files (0..n-1 must all be there).
int checkpoint_world_size(const std::string& dir) {
  int n = 0;
  while (fs::exists(fmt::format("{}/rank-{}.pt", dir, n))) ++n;
  return n;
}

struct Progress {  // everything besides model and optimizer that a checkpoint must restore
  TrainCounters c;
  SamplerState sampler;
  LoggedStep logged;
  int64_t resumed_from = -1;  // the checkpoint step these processes resumed from; -1: the run's first ones
};

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

// c10 errors carry a C++ backtrace after the message: the message alone is what a person reads.
std::string message_of(const std::exception& e) {
  const auto* c10e = dynamic_cast<const c10::Error*>(&e);
  return c10e ? c10e->what_without_backtrace() : e.what();
}

// The recoverable failures of a rank (trainer.h): a collective (CommError, sim/dist.h), the file system
// (IoError, telemetry/jsonl.h; std::filesystem), a checkpoint or a device (already a RankError).
// nullopt: a bug.
std::optional<RankError::Kind> recoverable_kind(const std::exception& e) {
  if (auto* r = dynamic_cast<const RankError*>(&e)) return r->kind();
  if (dynamic_cast<const CommError*>(&e)) return RankError::Kind::comm;
  if (dynamic_cast<const IoError*>(&e) || dynamic_cast<const fs::filesystem_error*>(&e)) return RankError::Kind::io;
  return std::nullopt;
}

// The gradient multiplier the optimizer applies: the loss-scale unscale (GradScaler.unscale_) and, when
// the unscaled global norm exceeds the clip, torch.nn.utils.clip_grad_norm_'s max_norm / (norm + 1e-6).
double grad_multiplier(double loss_scale, double grad_norm, double clip) {
  const double coef = clip > 0 && grad_norm > clip ? clip / (grad_norm + 1e-6) : 1.0;
  return coef / loss_scale;
}

// LibTorch's CPU allocator has no cache: each step frees and re-allocates the same large activation
// buffers, and glibc hands blocks above its mmap threshold back to the OS, so every step page-faults
// them in again (~10% of a GPT 4x128 step here). Keeping freed memory in the heap is what the CUDA
// caching allocator does on GPU; the heap then stays at the step's peak working set.
void keep_freed_memory() {
  static const bool once = [] {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)once;
}

// Where a rank trains and how: the scenario's device, process_group and kernels, resolved.
struct Placement {
  at::Device device{at::kCPU};
  ProcessGroupKind process_group = ProcessGroupKind::none;
  bool aten = false;  // kernels: aten
};

Placement placement(const Scenario& sc, int rank, int local_rank, int local_world) {
  Placement p;
  const ResolvedPlacement names = resolve_placement(sc);
  p.aten = names.kernels == "aten";
  p.process_group = names.process_group == "nccl"   ? ProcessGroupKind::nccl
                    : names.process_group == "gloo" ? ProcessGroupKind::gloo
                                                    : ProcessGroupKind::none;
  if (sc.device != "cuda") return p;
  const int gpus = cuda_device_count();
  if (gpus == 0) throw RankError(RankError::Kind::device, fmt::format("rank {}: device cuda, but this process sees no GPU ({})", rank, devices_info()));
  // NCCL takes one GPU per rank; Gloo stages CUDA tensors through the host, so ranks may share one
  if (local_world > gpus && p.process_group != ProcessGroupKind::gloo)
    throw RankError(RankError::Kind::device, fmt::format("rank {}: {} local ranks need {} GPUs (one per rank: cuda:LOCAL_RANK), this machine "
                                "has {}; 'process_group: gloo' lets ranks share GPUs", rank, local_world, local_world, gpus));
  p.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank % gpus));
  return p;
}

// A step's telemetry scalars, host values in this order (kernels: aten gathers them on the device
// into one float64 tensor of this layout, for one copy back).
enum Scalar { kLoss, kLossAvg, kLocalGradNorm, kGradNorm, kZeros, kFoundInf, kUpdateSq, kParamSq, kMismatch,
              kScaleUsed, kScalars };

struct StepDeviceScalars {
  at::Tensor loss, loss_avg, local_sq, zeros, found_inf, mismatch, scale_used;  // each float64, one value
  at::Tensor gather(const at::Tensor& grad_norm, const at::Tensor& norms_sq, at::Device dev) const {
    const at::Tensor zero = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(dev));
    std::vector<at::Tensor> v(kScalars, zero);
    auto set = [&](Scalar i, const at::Tensor& t) {
      if (t.defined()) v[i] = t.to(at::kDouble).reshape({});
    };
    set(kLoss, loss);
    set(kLossAvg, loss_avg);
    if (local_sq.defined() && scale_used.defined()) set(kLocalGradNorm, local_sq.sqrt() / scale_used);
    set(kGradNorm, grad_norm);
    set(kZeros, zeros);
    set(kFoundInf, found_inf);
    if (norms_sq.defined()) {
      set(kUpdateSq, norms_sq[0]);
      set(kParamSq, norms_sq[1]);
    }
    set(kMismatch, mismatch);
    set(kScaleUsed, scale_used);
    return at::stack(v);
  }
};

// A step's record, waiting for its scalars (kernels: aten) or completed at once (flatline).
struct Pending {
  Record r;
  Readback scalars;
  StepActions act;      // the step's fault actions (a frozen logger repeats its last step and loss)
  bool log = false;     // this step writes a record (log_every, telemetry on)
  int64_t numel = 0;    // gradient elements (the zero fraction's denominator)
};

int default_threads(int local_ranks) {
  unsigned hw = std::thread::hardware_concurrency();
  return std::max(1, static_cast<int>(hw == 0 ? 1 : hw) / std::max(1, local_ranks));
}

}  // namespace

static RankResult train_rank_unchecked(const RankOptions& o) {
  const Scenario& sc = o.scenario;
  const int rank = o.rank, world = o.world_size;
  keep_freed_memory();
  at::set_num_threads(o.threads > 0 ? o.threads : default_threads(o.local_world_size));

  // ---- set-up: faults, schedule, telemetry, placement, process group, data, model, optimizer ------
  // the faults (and a replay's repair), the schedule after their plan(), the rules of a step (faults/effects.h)
  RunPlan plan(sc, o.repair);
  const Placement place =
      placement(sc, rank, o.local_rank >= 0 ? o.local_rank : rank % std::max(1, o.local_world_size), o.local_world_size);
  const at::Device dev = place.device;
  const bool aten = place.aten;
  if (dev.is_cuda()) c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).setDevice(dev);

  fs::create_directories(o.run_dir + "/telemetry");
  const bool from_checkpoint = o.resume || o.carry_on;
  JsonlWriter tel(fmt::format("{}/telemetry/rank-{}.jsonl", o.run_dir, rank), /*append=*/o.resume);
  // Rank 0 also writes the foreign-format logs the scenario asks for, on the writer thread (frameworks log on rank 0).
  std::unique_ptr<FormatSink> formats;
  if (rank == 0 && o.telemetry && !sc.formats.empty())
    formats = std::make_unique<FormatSink>(sc.formats, format_context(sc, o.run_dir, o.run_t0, o.resume));
  AsyncRecordWriter out(tel, std::chrono::milliseconds(5),  // every record of this rank, written off the step
                        formats ? std::function<void(const Record&)>([&f = *formats](const Record& r) { f.write(r); })
                                : nullptr);
  Clock clock(0);
  auto event = [&](const std::string& name, int64_t step, const std::string& detail = "") {
    Record r;
    r.kind = RecordKind::event;
    r.rank = rank;
    r.t = clock.t();
    r.step = step;
    r.name = name;
    r.detail = detail;
    out.post(std::move(r));
  };

  const double my_start = wall_now();
  if (o.run_t0 > 0) clock.set_offset(my_start - o.run_t0);
  std::optional<Comm> comm_or;
  try {
    comm_or.emplace(rank, world, o.master_addr, o.master_port,
                    std::chrono::milliseconds(static_cast<int64_t>(sc.collective_timeout_s * 1000)), place.process_group,
                    dev);
  } catch (const std::exception& e) {  // the peers never met: the telemetry still says why this rank ended
    try {
      event("error", 0, message_of(e));
      out.drain();
    } catch (...) {
    }
    throw;
  }
  Comm& comm = *comm_or;
  // The run's origin: given (the launcher's), else the one the first start recorded (a resume under
  // another launcher continues the run's clock), else rank 0's start, shared.
  const std::string origin_file = o.run_dir + "/checkpoints/run_t0";
  double t0 = o.run_t0;
  if (t0 <= 0 && o.resume) std::ifstream(origin_file) >> t0;
  if (!(t0 > 0)) t0 = comm.shared_start_time(my_start);
  clock.set_offset(my_start - t0);
  if (rank == 0 && !o.resume) {
    fs::create_directories(o.run_dir + "/checkpoints");
    std::ofstream(origin_file) << fmt::format("{:.6f}\n", t0);
  }
  Watchdog watchdog(out, clock, rank, sc.heartbeat_s, o.telemetry);
  // A signal or the launcher's death (core/interrupt.h): the last record says so, and is on disk.
  InterruptFlushGuard on_interrupt([&](int, const std::string& why) {
    Record r;
    r.kind = RecordKind::event;
    r.rank = rank;
    r.t = clock.t();
    r.step = watchdog.step();
    r.name = "interrupted";
    r.detail = why;
    out.post_last(std::move(r));  // the last line on disk, though the training thread runs on until the exit
  });

  RankResult result;
  Pending pending;  // kernels: aten: the last step's record, waiting for its scalars
  Progress pr;
  // Completes a step's record from its scalars (host values), then writes it.
  auto complete = [&](Pending& p, const double* v) {
    RunPlan::log(pr.logged, p.act, p.act.step, v[kLoss]);
    result.losses.push_back(v[kLoss]);
    if (v[kMismatch] != 0) ++result.param_mismatches;
    if (!p.log) return;
    Record& r = p.r;
    r.step = pr.logged.step;
    r.loss = pr.logged.loss;
    r.loss_avg = RunPlan::logged_loss_avg(pr.logged, p.act, v[kLossAvg]);
    r.param_mismatches = result.param_mismatches;
    r.grad_norm = v[kGradNorm];
    r.local_grad_norm = v[kLocalGradNorm];
    r.grad_zero_frac = p.numel ? v[kZeros] / static_cast<double>(p.numel) : 0.0;
    r.param_norm = std::sqrt(v[kParamSq]);
    r.update_norm = std::sqrt(v[kUpdateSq]);
    r.loss_scale = v[kScaleUsed];
    r.overflow = v[kFoundInf] != 0;
    out.post(std::move(r));
  };
  auto resolve = [&] {  // the pending record, once its scalars are on the host
    if (!pending.scalars) return;
    const at::Tensor h = comm.finish_read(pending.scalars, "reading back a step's telemetry scalars");
    pending.scalars = Readback{};
    pending.r.t = clock.t();  // when it is written: the file keeps the order of t (heartbeats came between)
    complete(pending, h.data_ptr<double>());
  };
  // The `error` event of a failure; a writer that failed itself (a full disk) must not hide the failure.
  auto note_error = [&](const std::string& msg) {
    try {
      event("error", result.last_step, msg);
    } catch (...) {
    }
  };
  try {
    Data data;
    try {
      data = load_data(sc);
    } catch (const std::runtime_error& e) {
      throw IoError(fmt::format("rank {}: cannot load the training data: {}", rank, e.what()));
    }
    std::shared_ptr<TrainModel> model;
    {
      // The default generator is process-wide: ranks run as threads in tests must not interleave draws.
      static std::mutex init_mu;
      std::lock_guard<std::mutex> lock(init_mu);
      at::manual_seed(sc.seed);  // identical init on every rank; rank 0's is broadcast below anyway
      model = make_model(sc.model);
    }
    model->to(dev);  // initialised on the CPU: the same parameters on every device
    // aten: real autocast instead of the binary16 emulation
    model->set_precision(aten ? "fp32" : sc.precision);
    model->set_aten_kernels(aten);
    const bool autocast = aten && sc.precision != "fp32";
    const at::ScalarType amp_dtype = sc.precision == "bf16" ? at::kBFloat16 : at::kHalf;
    std::vector<at::Tensor> params = model->parameters();
    {
      at::NoGradGuard ng;
      for (auto& p : params) comm.broadcast(p, 0);
    }
    // aten: every gradient a view into one flat buffer (DDP's gradient_as_bucket_view): backward
    // accumulates into it, and the all-reduce and the statistics each take it in one op; its last
    // element carries the loss through the all-reduce.
    int64_t numel = 0;
    for (auto& p : params) numel += p.numel();
    at::Tensor flat_grad;
    if (aten) {
      flat_grad = at::zeros({numel + 1}, at::TensorOptions().dtype(at::kFloat).device(dev));
      int64_t off = 0;
      for (auto& p : params) {
        p.mutable_grad() = flat_grad.slice(0, off, off + p.numel()).view_as(p);
        off += p.numel();
      }
    }
    Optimizer opt(sc.optimizer, params, aten);
    std::optional<DistributedSampler> sampler_or;
    try {
      sampler_or.emplace(data.train_size(), world, rank, sc.batch_size, sc.grad_accum, sc.seed);
    } catch (const std::invalid_argument& e) {  // the scenario asks more of its data than it holds
      throw ScenarioError(fmt::format("{}: {}", sc.source, e.what()));
    }
    DistributedSampler& sampler = *sampler_or;

    pr.c = plan.start();
    if (from_checkpoint) {
      const int64_t ck = latest_checkpoint(o.run_dir);
      if (ck < 0)
        throw RankError(RankError::Kind::checkpoint,
                        fmt::format("rank {}: {} asked but {}/checkpoints has no complete checkpoint", rank,
                                    o.resume ? "resume" : "carry_on", o.run_dir));
      const std::string dir = checkpoint_dir(o.run_dir, ck);
      // Written by another world size: every rank holds the same model and optimizer state, so a rank
      // beyond the old ones reads rank 0's; the sampler must re-shard exactly (sim/sampler.h).
      const int written_by = checkpoint_world_size(dir);
      const int source = rank < written_by ? rank : 0;
      try {
        pr = load_checkpoint(dir, source, sc.model, *model, opt, dev);
      } catch (const std::exception& e) {
        const std::string file = fmt::format("{}/rank-{}.pt", dir, source), m = message_of(e);
        throw RankError(RankError::Kind::checkpoint, m.find(file) == std::string::npos ? file + ": " + m : m);
      }
      if (written_by != world) {
        const auto moved = reshard(pr.sampler, data.train_size(), written_by, world, sc.batch_size * sc.grad_accum);
        if (!moved)
          throw RankError(RankError::Kind::checkpoint,
                          fmt::format("{}: written by {} rank{}; {} ranks cannot continue its sampler without "
                                      "replaying or skipping data ({} global batches of {} samples into epoch {} "
                                      "is not a whole number of global batches of {}): resume with {}={}",
                                      dir, written_by, written_by == 1 ? "" : "s", world, pr.sampler.position,
                                      int64_t{written_by} * sc.batch_size * sc.grad_accum, pr.sampler.epoch,
                                      int64_t{world} * sc.batch_size * sc.grad_accum, kEnvWorldSize, written_by));
        pr.sampler = *moved;
      }
      if (o.resume) {
        if (!plan.resume(pr.c).restore_sampler) pr.sampler = SamplerState{};
        pr.resumed_from = ck;
      } else {
        plan.carry_on(pr.c, pr.resumed_from >= 0);
      }
      event("resume", pr.c.step,
            !o.resume             ? fmt::format("from checkpoint step {}, carrying on (a replay)", ck)
            : written_by == world ? fmt::format("from checkpoint step {}", ck)
                                  : fmt::format("from checkpoint step {}, re-sharded from {} to {} ranks", ck, written_by, world));
      event("checkpoint_load", pr.c.step, checkpoint_dir(o.run_dir, ck));
    } else {
      event("run_start", 0, fmt::format("world_size {}, scenario {}", world, sc.name));
    }
    sampler.set_state(pr.sampler);
    GradScaler grad_scaler(pr.c.scaler, dev);  // aten: the scaler on the device (pr.c.scaler: checkpoints)

    const int per_micro = sc.batch_size;
    const bool resumed = pr.resumed_from >= 0;  // these processes continue a resume: no stop for the restart
    const int64_t last = o.stop_after > 0 ? std::min(sc.steps, o.stop_after) : sc.steps;
    for (int64_t step = pr.c.step + 1; step <= last; ++step) {
      const auto t_step = std::chrono::steady_clock::now();
      StepActions act;
      act.step = step;
      act.rank = rank;
      act.world_size = world;

      // ---- data ---------------------------------------------------------------------------------
      watchdog.set(step, "data");
      plan.apply(Hook::before_forward, act);
      if (act.data_block_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(act.data_block_s));  // a stalled loader
      const auto replaced = RunPlan::replaced_batch(act);
      std::vector<int64_t> ids = replaced ? sampler.at(*replaced) : sampler.next();
      pr.sampler = sampler.state();
      pr.c.samples_seen += static_cast<int64_t>(ids.size());

      // ---- forward + backward over grad_accum micro-batches (loss scaled for fp16) ------------------
      watchdog.set_phase("compute");
      if (aten) flat_grad.zero_();
      else
        for (auto& p : params) p.mutable_grad().reset();  // set_to_none: backward assigns instead of adding
      double loss_sum = 0;
      at::Tensor loss_acc;  // aten: the same sum, on the device
      for (int m = 0; m < sc.grad_accum; ++m) {
        auto [x, y] = data.batch(ids.data() + m * per_micro, per_micro, false);
        model->set_inject_inf(act.inject_inf && m == 0);
        if (aten) {
          at::Tensor loss;
          {
            AutocastGuard amp(dev.type(), amp_dtype, autocast);
            loss = model->loss(x.to(dev, /*non_blocking=*/true), y.to(dev, /*non_blocking=*/true));
          }
          loss_acc = m == 0 ? loss.detach().clone() : loss_acc.add_(loss.detach());
          // GradScaler.scale(loss), and the mean over micro-batches
          if (!act.skip_backward)
            (pr.c.scaler.enabled || sc.grad_accum > 1 ? loss * (grad_scaler.scale() / sc.grad_accum) : loss).backward();
          continue;
        }
        at::Tensor loss = model->loss(x, y);
        if (o.telemetry || world > 1) loss_sum += loss.item<double>();  // logged; all-reduced with the grads
        const double factor = pr.c.scaler.scale / sc.grad_accum;  // fp16 loss scale; mean over micro-batches
        if (!act.skip_backward) (factor == 1.0 ? loss : loss * factor).backward();
      }
      if (!aten)
        for (auto& p : params)
          if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      if (act.slowdown > 0) {  // a straggler: this rank's forward + backward take (1 + slowdown) x as long
        if (aten) comm.read(flat_grad.slice(0, 0, 1), "the straggler's backward");  // the device's time, not the launches'
        std::this_thread::sleep_for(std::chrono::duration<double>(
            act.slowdown * std::chrono::duration<double>(std::chrono::steady_clock::now() - t_step).count()));
      }
      plan.apply(Hook::after_backward, act);
      if (RunPlan::contributes_zeros(act)) {
        if (aten) flat_grad.zero_();
        else
          for (auto& p : params) p.mutable_grad().zero_();
      }
      std::vector<at::Tensor> grads;
      for (auto& p : params) grads.push_back(p.grad());
      // This rank's own gradient, before the all-reduce (zero_grad_rank's signal); grads stay scaled.
      // Zero count and overflow check: telemetry, and the fp16 scaler's skip decision.
      const bool full_stats = o.telemetry || pr.c.scaler.enabled;
      const at::Tensor flat_g = aten ? flat_grad.slice(0, 0, numel) : at::Tensor();
      StepDeviceScalars dv;  // aten: this step's telemetry scalars, on the device
      TensorStats local;
      if (aten) {
        if (o.telemetry) dv.local_sq = at::linalg_vector_norm(flat_g).to(at::kDouble).square();
      } else {
        local = tensor_stats(grads, /*full=*/world == 1 && full_stats);
      }
      const double local_grad_norm = std::sqrt(local.sum_sq) / pr.c.scaler.scale;
      const double loss = loss_sum / sc.grad_accum;

      // ---- all-reduce: mean of gradients and of the loss over ranks --------------------------------
      plan.apply(Hook::at_allreduce, act);
      if (act.block_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(act.block_s));
      watchdog.set_phase("collective");
      const auto t_comm = std::chrono::steady_clock::now();
      double loss_avg = loss;
      if (aten) {
        flat_grad.slice(0, numel).copy_(loss_acc.div_(sc.grad_accum).reshape({1}));
        if (o.telemetry) dv.loss = loss_acc.to(at::kDouble);
        if (world > 1) {
          comm.allreduce_sum(flat_grad);
          flat_grad.div_(world);
        }
        if (o.telemetry) dv.loss_avg = flat_grad.slice(0, numel).to(at::kDouble).reshape({});
      } else if (world > 1) {  // one flat buffer, one collective (as DDP's gradient buckets), the loss riding along
        std::vector<at::Tensor> flat_parts;
        for (auto& g : grads) flat_parts.push_back(g.reshape({-1}));
        flat_parts.push_back(at::full({1}, loss, at::kFloat));
        at::Tensor flat = at::cat(flat_parts);
        comm.allreduce_sum(flat);
        flat.div_(world);
        int64_t off = 0;
        for (auto& g : grads) {
          g.copy_(flat.slice(0, off, off + g.numel()).view_as(g));
          off += g.numel();
        }
        loss_avg = flat[flat.numel() - 1].item<double>();
      }
      const double comm_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_comm).count();

      // ---- optimizer: overflow check, unscale + clip, update (GradScaler + clip_grad_norm_ order) ----
      // flatline: one pass over the (still scaled) gradients gives the norm, the zero count and the
      // overflow check; the unscale and the clip coefficient are applied inside the optimizer's own pass.
      // aten: GradScaler.unscale_ (its kernel: unscale + check), clip_grad_norm_, then step() only when
      // the check found nothing, which is the one wait for the device a GradScaler step has (fp16).
      watchdog.set_phase("optimizer");
      plan.apply(Hook::before_optimizer, act);
      const double scale_used = pr.c.scaler.scale;
      TensorStats global;
      bool found_inf = false;
      UpdateDecision upd;
      double grad_norm = 0;
      at::Tensor grad_norm_t;
      if (aten) {
        if (o.telemetry) {
          dv.zeros = (numel - at::count_nonzero(flat_g)).to(at::kDouble);
          dv.scale_used = grad_scaler.scale().to(at::kDouble).reshape({});  // a copy: update() changes it in place
        }
        const at::Tensor found = grad_scaler.unscale_({flat_g});
        grad_norm_t = at::linalg_vector_norm(flat_g);
        grad_scaler.update(found, act.max_loss_scale, act.min_loss_scale);
        if (o.telemetry) dv.found_inf = found.to(at::kDouble).reshape({});
        if (pr.c.scaler.enabled)
          found_inf = comm.read(found, "the all-reduce and overflow check").item<float>() != 0;
        upd = plan.count(pr.c, act, /*skip=*/found_inf);  // the device's scaler decided; pr.c.scaler at checkpoints
      } else {
        global = world == 1 ? local : tensor_stats(grads, full_stats);
        found_inf = !global.finite;
        grad_norm = std::sqrt(global.sum_sq) / scale_used;
        upd = plan.update(pr.c, act, found_inf);
      }
      const bool skipped = upd.skip;
      const double lr = upd.lr;
      UpdateNorms norms;
      const bool want_norms = o.telemetry || world > 1;  // logged; the cross-rank checksum below
      if (!skipped) {
        if (aten) {
          if (sc.optimizer.grad_clip > 0)  // torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), at most 1
            flat_g.mul_((sc.optimizer.grad_clip / (grad_norm_t + 1e-6)).clamp_max(1.0));
          norms = opt.step(lr, 1.0, want_norms);
        } else {
          norms = opt.step(lr, grad_multiplier(scale_used, grad_norm, sc.optimizer.grad_clip), want_norms);
        }
      } else if (want_norms) {
        if (aten) norms.sq = at::stack({at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(dev)),
                                        sum_sq_on_device(params)});
        else norms.param_sq = tensor_stats(params, /*full=*/false).sum_sq;
      }

      // ---- consistency (nccl-tests' #wrong): parameters must be identical on every rank -------------
      // The checksum is the squared parameter norm the optimizer summed in a fixed order: bit-identical
      // parameters give bit-identical sums (necessary, not sufficient; a diverged rank differs at once).
      bool mismatch = false;
      if (world > 1 && aten) {
        at::Tensor c = at::stack({norms.sq[1], -norms.sq[1]});
        comm.allreduce_max(c);
        dv.mismatch = (c[0] != -c[1]).to(at::kDouble);
      } else if (world > 1) {
        const double checksum = norms.param_sq;
        at::Tensor c = at::tensor({checksum, -checksum}, at::kDouble);
        comm.allreduce_max(c);
        mismatch = c[0].item<double>() != -c[1].item<double>();
      }

      // ---- logging --------------------------------------------------------------------------------
      plan.apply(Hook::at_logging, act);
      Pending p;
      p.act = act;
      p.log = o.telemetry && plan.logs(step);
      p.numel = aten ? numel : global.numel;
      Record& r = p.r;
      r.rank = rank;
      r.t = clock.t();
      r.opt_step = pr.c.opt_step;
      r.lr = lr;
      r.skipped = skipped;
      r.batch_hash = batch_hash(ids);
      r.epoch = pr.sampler.epoch;
      r.samples_seen = pr.c.samples_seen;
      r.comm_ms = comm_ms;
      if (aten) {
        resolve();  // the step before: long done on the device by now
        r.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_step).count();
        pending = std::move(p);
        if (o.telemetry || world > 1) {
          pending.scalars = comm.start_read(dv.gather(grad_norm_t, norms.sq, dev));
        } else {  // bare (one rank, no telemetry): wait, so that step_ms is the device's time, not the launches'
          comm.read(flat_grad.slice(0, 0, 1), "the step");
          result.losses.push_back(0);
        }
      } else {
        double v[kScalars] = {};
        v[kLoss] = loss;
        v[kLossAvg] = loss_avg;
        v[kLocalGradNorm] = local_grad_norm;
        v[kGradNorm] = grad_norm;
        v[kZeros] = static_cast<double>(global.zeros);
        v[kFoundInf] = found_inf;
        v[kUpdateSq] = norms.update_sq;
        v[kParamSq] = norms.param_sq;
        v[kMismatch] = mismatch;
        v[kScaleUsed] = scale_used;
        r.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_step).count();
        complete(p, v);
      }
      pr.c.step = step;
      result.last_step = step;
      result.step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_step).count());

      // ---- eval: every rank evaluates its share of the held-out batches; mean over ranks --------------
      if ((sc.eval_every > 0 && step % sc.eval_every == 0) || (o.eval_from > 0 && step >= o.eval_from)) {
        resolve();  // the step's record before the eval's
        watchdog.set_phase("eval");
        event("eval_start", step);
        at::NoGradGuard ng;
        const auto f64 = at::TensorOptions().dtype(at::kDouble).device(dev);
        at::Tensor sum = at::zeros({}, f64);
        double n = 0;
        const int64_t n_eval = data.eval_size();
        std::vector<int64_t> eids(static_cast<size_t>(per_micro));
        for (int b = rank; b < sc.eval_batches; b += world) {
          for (int i = 0; i < per_micro; ++i) eids[static_cast<size_t>(i)] = (int64_t{b} * per_micro + i) % n_eval;
          auto [x, y] = data.batch(eids.data(), per_micro, true);
          AutocastGuard amp(dev.type(), amp_dtype, autocast);
          sum.add_(model->loss(x.to(dev, /*non_blocking=*/true), y.to(dev, /*non_blocking=*/true)).to(at::kDouble));
          n += 1;
        }
        at::Tensor s = at::stack({sum, at::full({}, n, f64)});
        comm.allreduce_sum(s);
        const at::Tensor h = comm.read(s, "the eval all-reduce");
        Record e;
        e.kind = RecordKind::eval;
        e.rank = rank;
        e.t = clock.t();
        e.step = step;
        e.eval_loss = h[0].item<double>() / std::max(1.0, h[1].item<double>());
        out.post(std::move(e));
        event("eval_end", step);
      }

      // ---- checkpoint: every rank saves its state; rank 0 marks it complete after a barrier ----------
      // (the scenario's, and a replay's branch point after its last step)
      if ((sc.checkpoint_every > 0 && step % sc.checkpoint_every == 0) || (o.checkpoint_at_stop && step == last)) {
        resolve();  // pr.logged of this step
        watchdog.set_phase("checkpoint");
        if (aten) pr.c.scaler = grad_scaler.state();
        const std::string dir = checkpoint_dir(o.run_dir, step);
        try {
          save_checkpoint(dir, rank, sc.model, *model, opt, pr);
        } catch (const FileWriteError& e) {  // names the file and the OS's reason already
          throw RankError(RankError::Kind::checkpoint, e.what());
        } catch (const std::exception& e) {
          throw RankError(RankError::Kind::checkpoint,
                          fmt::format("{}/rank-{}.pt: cannot write the checkpoint: {}", dir, rank, message_of(e)));
        }
        comm.barrier();
        if (rank == 0) std::ofstream(dir + "/COMPLETE") << step << "\n";
        event("checkpoint_save", step, dir);
      }

      // ---- restart: the scheduler stops every rank here; new processes resume from the checkpoint -----
      if (plan.stops_for_restart(step, resumed)) {
        resolve();
        event("stop_for_restart", step);
        result.stopped_for_restart = true;
        break;
      }
    }
    resolve();
    result.opt_steps = pr.c.opt_step;
    if (o.keep_params)
      for (auto& p : params) {
        at::Tensor c = p.detach().contiguous().to(at::kFloat).cpu();
        result.params.insert(result.params.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
      }
    if (!result.stopped_for_restart)
      event("run_end", result.last_step, fmt::format("param_mismatches {}", result.param_mismatches));
  } catch (const std::exception& e) {  // typed by train_rank() below
    // A completed step whose scalars arrived before the failure still gets its record.
    if (pending.scalars && (!pending.scalars.done || pending.scalars.done->query())) {
      try {
        resolve();
      } catch (...) {
      }
    }
    const bool bug = !recoverable_kind(e) && !dynamic_cast<const InvariantError*>(&e) &&
                     !dynamic_cast<const ScenarioError*>(&e);
    note_error(bug ? "internal error: " + message_of(e) : message_of(e));
    throw;
  }
  return result;
}

// The error tiers (trainer.h): the recoverable failures become RankError of their kind, wherever in the
// set-up or the step they happen; a bug leaves as itself.
RankResult train_rank(const RankOptions& o) {
  try {
    return train_rank_unchecked(o);
  } catch (const RankError&) {
    throw;
  } catch (const std::exception& e) {
    if (auto k = recoverable_kind(e)) throw RankError(*k, message_of(e));
    throw;
  }
}

double measure_step_ms(const Scenario& sc, int steps, int threads) {
  // The harness's own step (train_rank, telemetry off) on one rank, in a scratch run directory.
  RankOptions o;
  o.scenario = sc;
  o.scenario.world_size = 1;
  o.scenario.steps = steps + 1;  // the first step warms up
  o.scenario.faults.clear();
  o.scenario.restart_at = -1;
  o.scenario.checkpoint_every = 0;
  o.scenario.eval_every = 0;
  o.run_dir = (fs::temp_directory_path() / fmt::format("flatline-step-time-{}", ::getpid())).string();
  o.threads = threads;
  o.run_t0 = 1;
  o.telemetry = false;
  RankResult r;
  try {
    r = train_rank(o);
  } catch (...) {
    fs::remove_all(o.run_dir);
    throw;
  }
  fs::remove_all(o.run_dir);
  std::vector<double> ms(r.step_ms.begin() + 1, r.step_ms.end());
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace flatline
