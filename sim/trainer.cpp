// The training loop of one data-parallel rank, readable top to bottom (llm.c style): set-up, then for
// each step data -> step -> record, then eval, checkpoint and the restart, then the end. The step's
// phases (forward + backward, all-reduce, optimizer, consistency, record) are calls into its kernel
// path (sim/step.h: step_flatline.cpp, step_aten.cpp), with the fault hook points (faults/effects.h)
// as visible calls between them. Checkpoints: sim/checkpoint.cpp; heartbeats: sim/watchdog.cpp.
#include "sim/trainer.h"

#include <fmt/format.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "core/check.h"
#include "core/checkpoint_request.h"
#include "core/interrupt.h"
#include "faults/effects.h"
#include "sim/build_info.h"
#include "run/sampler.h"
#include "sim/checkpoint.h"
#include "sim/errors.h"
#include "sim/step.h"
#include "sim/watchdog.h"
#include "telemetry/async_writer.h"
#include "telemetry/jsonl.h"
#include "telemetry/writers/writer.h"

namespace flatline {
namespace fs = std::filesystem;

namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

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

int default_threads(int local_ranks) {
  unsigned hw = std::thread::hardware_concurrency();
  return std::max(1, static_cast<int>(hw == 0 ? 1 : hw) / std::max(1, local_ranks));
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

// What a rank writes: telemetry/rank-<r>.jsonl (rank 0 also the foreign-format logs the scenario asks
// for, on the writer thread: frameworks log on rank 0), every record through one background writer,
// stamped on the run's clock.
class RankTelemetry {
 public:
  explicit RankTelemetry(const RankOptions& o)
      : rank_(o.rank),
        file_(fmt::format("{}/telemetry/rank-{}.jsonl", o.run_dir, o.rank), /*append=*/o.resume),
        formats_(o.rank == 0 && o.telemetry && !o.scenario.formats.empty()
                     ? std::make_unique<FormatSink>(o.scenario.formats,
                                                    format_context(o.scenario, o.run_dir, o.run_t0, o.resume))
                     : nullptr),
        out_(file_, std::chrono::milliseconds(5),  // every record of this rank, written off the step
             formats_ ? std::function<void(const Record&)>([&f = *formats_](const Record& r) { f.write(r); }) : nullptr) {}
  AsyncRecordWriter& out() { return out_; }
  void event(const std::string& name, int64_t step, const std::string& detail = "") {
    Record r;
    r.kind = RecordKind::event;
    r.rank = rank_;
    r.t = clock.t();
    r.step = step;
    r.name = name;
    r.detail = detail;
    out_.post(std::move(r));
  }
  // A signal or the launcher's death (core/interrupt.h): an `interrupted` event at the step the watchdog
  // shows, the last line on disk, though the training thread runs on until the exit.
  InterruptFlushGuard last_word_on_interrupt(const Watchdog& watchdog) {
    return InterruptFlushGuard([this, &watchdog](int, const std::string& why) {
      Record r;
      r.kind = RecordKind::event;
      r.rank = rank_;
      r.t = clock.t();
      r.step = watchdog.step();
      r.name = event::interrupted;
      r.detail = why;
      out_.post_last(std::move(r));
    });
  }
  // The `error` event of a failure; a writer that failed itself (a full disk) must not hide the failure.
  void note_error(int64_t step, const std::string& msg) noexcept {
    try {
      event("error", step, msg);
    } catch (...) {
    }
  }
  Clock clock{0};

 private:
  int rank_;
  JsonlWriter file_;
  std::unique_ptr<FormatSink> formats_;
  AsyncRecordWriter out_;
};

// Joins the process group; the run's clock then counts from the run's origin: given (the launcher's),
// else the one the first start recorded (a resume under another launcher continues the run's clock),
// else rank 0's start, shared. A join that fails still leaves the rank's `error` event on disk.
std::unique_ptr<Comm> join(const RankOptions& o, const Placement& place, RankTelemetry& tel) {
  const double my_start = wall_now();
  if (o.run_t0 > 0) tel.clock.set_offset(my_start - o.run_t0);
  std::unique_ptr<Comm> comm;
  try {
    comm = std::make_unique<Comm>(
        o.rank, o.world_size, o.master_addr, o.master_port,
        std::chrono::milliseconds(static_cast<int64_t>(o.scenario.collective_timeout_s * 1000)), place.process_group,
        place.device);
  } catch (const std::exception& e) {  // the peers never met: the telemetry still says why this rank ended
    try {
      tel.event(event::error, 0, message_of(e));
      tel.out().drain();
    } catch (...) {
    }
    throw;
  }
  const std::string origin_file = o.run_dir + "/checkpoints/run_t0";
  double t0 = o.run_t0;
  if (t0 <= 0 && o.resume) std::ifstream(origin_file) >> t0;
  if (!(t0 > 0)) t0 = comm->shared_start_time(my_start);
  tel.clock.set_offset(my_start - t0);
  if (o.rank == 0 && !o.resume) {
    fs::create_directories(o.run_dir + "/checkpoints");
    std::ofstream(origin_file) << fmt::format("{:.6f}\n", t0);
  }
  return comm;
}

// The step records of a rank (sim/step.h StepRecorder): what the logger shows (a frozen one repeats its
// last step and loss), the rank's loss series and its count of steps after which parameters differed.
class StepLog final : public StepRecorder {
 public:
  StepLog(LoggedStep& logged, RankResult& result, AsyncRecordWriter& out) : logged_(logged), result_(result), out_(out) {}
  void complete(PendingRecord& p, const double* v) override {
    requests_ = std::max(requests_, static_cast<int64_t>(v[kCheckpointRequests]));
    RunPlan::log(logged_, p.act, p.act.step, v[kLoss]);
    result_.losses.push_back(v[kLoss]);
    if (v[kMismatch] != 0) ++result_.param_mismatches;
    if (!p.log) return;
    Record& r = p.r;
    r.step = logged_.step;
    r.loss = logged_.loss;
    r.loss_avg = RunPlan::logged_loss_avg(logged_, p.act, v[kLossAvg]);
    r.param_mismatches = result_.param_mismatches;
    r.grad_norm = v[kGradNorm];
    r.local_grad_norm = v[kLocalGradNorm];
    r.grad_zero_frac = p.numel ? v[kZeros] / static_cast<double>(p.numel) : 0.0;
    r.param_norm = std::sqrt(v[kParamSq]);
    r.update_norm = std::sqrt(v[kUpdateSq]);
    r.loss_scale = v[kScaleUsed];
    r.overflow = v[kFoundInf] != 0;
    out_.post(std::move(r));
  }
  void uncounted() override { result_.losses.push_back(0); }
  // The launcher's checkpoint requests, agreed across ranks, as far as the completed records say.
  int64_t checkpoint_requests() const { return requests_; }

 private:
  int64_t requests_ = 0;
  LoggedStep& logged_;
  RankResult& result_;
  AsyncRecordWriter& out_;
};

// The scenario's data; a file that cannot be read is this rank's I/O failure.
TrainData load_data(const Scenario& sc, int rank) {
  try {
    return load_train_data(sc);
  } catch (const std::runtime_error& e) {
    throw IoError(fmt::format("rank {}: cannot load the training data: {}", rank, e.what()));
  }
}

// The scenario's model on the rank's device, the same on every rank: initialised from the seed on the
// CPU (the same parameters on every device), then rank 0's broadcast.
std::shared_ptr<TrainModel> init_model(const Scenario& sc, Comm& comm) {
  std::shared_ptr<TrainModel> model;
  {
    // The default generator is process-wide: ranks run as threads in tests must not interleave draws.
    static std::mutex init_mu;
    std::lock_guard<std::mutex> lock(init_mu);
    at::manual_seed(sc.seed);
    model = make_model(sc.model);
  }
  model->to(comm.device());
  at::NoGradGuard ng;
  for (auto& p : model->parameters()) comm.broadcast(p, 0);
  return model;
}

// A scenario that asks more of its data than the data holds is the scenario's error.
DistributedSampler make_sampler(const Scenario& sc, const TrainData& data, int rank, int world) {
  try {
    return DistributedSampler(data.train_size(), world, rank, sc.batch_size, sc.grad_accum, sc.seed);
  } catch (const std::invalid_argument& e) {
    throw ScenarioError(fmt::format("{}: {}", sc.source, e.what()));
  }
}

// The progress of step 0 (a `run_start` event), or of the newest complete checkpoint when resuming or
// carrying on (sim/checkpoint.h), with what the plan changes there (faults/effects.h RunPlan::resume,
// RunPlan::carry_on; `resume` and `checkpoint_load` events).
Progress start_or_restore(const RankOptions& o, RunPlan& plan, TrainModel& model, Optimizer& opt, int64_t train_size,
                          at::Device dev, RankTelemetry& tel) {
  const Scenario& sc = o.scenario;
  Progress pr;
  if (!o.resume && !o.carry_on) {
    pr.c = plan.start();
    tel.event(event::run_start, 0, fmt::format("world_size {}, scenario {}", o.world_size, sc.name));
    return pr;
  }
  const LoadedCheckpoint ck =
      load_latest_checkpoint(o.run_dir, o.resume ? "resume" : "carry_on", o.rank, o.world_size,
                             sc.batch_size * sc.grad_accum, train_size, sc.model, model, opt, dev);
  pr = ck.progress;
  if (o.resume) {
    if (!plan.resume(pr.c).restore_sampler) pr.sampler = SamplerState{};
    pr.resumed_from = ck.step;
  } else {
    plan.carry_on(pr.c, pr.resumed_from >= 0);
  }
  tel.event(event::resume, pr.c.step,
            !o.resume                    ? fmt::format("from checkpoint step {}, carrying on (a replay)", ck.step)
            : ck.written_by == o.world_size ? fmt::format("from checkpoint step {}", ck.step)
                                            : fmt::format("from checkpoint step {}, re-sharded from {} to {} ranks",
                                                          ck.step, ck.written_by, o.world_size));
  tel.event(event::checkpoint_load, pr.c.step, ck.dir);
  return pr;
}

// A step's record as far as the loop knows it after the optimizer (sim/step.h): the path adds the
// step's scalars. `log`: the record is written (telemetry on, log_every).
PendingRecord step_record(const StepActions& act, bool log, const Progress& pr, const UpdateDecision& upd,
                          const std::vector<int64_t>& ids, double t, double comm_ms,
                          std::chrono::steady_clock::time_point t_step) {
  PendingRecord p;
  p.act = act;
  p.log = log;
  p.t_step = t_step;
  p.r.rank = act.rank;
  p.r.t = t;
  p.r.opt_step = pr.c.opt_step;
  p.r.lr = upd.lr;
  p.r.skipped = upd.skip;
  p.r.batch_hash = batch_hash(ids);
  p.r.epoch = pr.sampler.epoch;
  p.r.samples_seen = pr.c.samples_seen;
  p.r.comm_ms = comm_ms;
  return p;
}

// The launcher's requests for a checkpoint near a finding (docs/DESIGN.md §8): how many this rank has
// seen (RankOptions::checkpoint_requests, else the signal's count since the rank began), and whether
// the count the ranks agreed on asks for one more (at most kMaxLiveCheckpoints a process).
class CheckpointRequests {
 public:
  explicit CheckpointRequests(const RankOptions& o) : o_(o), before_(checkpoint_requests()) {}
  int64_t seen(int64_t step) const {
    return o_.checkpoint_requests ? o_.checkpoint_requests(step) : checkpoint_requests() - before_;
  }
  bool ask(int64_t agreed) const { return agreed > met_ && written_ < kMaxLiveCheckpoints; }
  void met(int64_t agreed) {
    met_ = agreed;
    ++written_;
  }

 private:
  const RankOptions& o_;
  const int64_t before_;
  int64_t met_ = 0;
  int written_ = 0;
};

// A checkpoint of the rank's state into `dir` (sim/checkpoint.h), and its `checkpoint_save` event.
void save(const std::string& dir, const Progress& pr, TrainModel& model, StepPath& path, Comm& comm,
          const RankOptions& o, RankTelemetry& tel) {
  write_checkpoint(dir, o.rank, comm, o.scenario.model, model, path.optimizer(), pr);
  tel.event(event::checkpoint_save, pr.c.step, dir);
}

// ---- eval: every rank evaluates its share of the held-out batches; mean over ranks -----------------
void evaluate(int64_t step, const Scenario& sc, const TrainData& data, StepPath& path, Comm& comm,
              RankTelemetry& tel) {
  tel.event(event::eval_start, step);
  at::NoGradGuard ng;
  const auto f64 = at::TensorOptions().dtype(at::kDouble).device(comm.device());
  at::Tensor sum = at::zeros({}, f64);
  double n = 0;
  const int per_micro = sc.batch_size;
  const int64_t n_eval = data.eval_size();
  std::vector<int64_t> eids(static_cast<size_t>(per_micro));
  for (int b = comm.rank(); b < sc.eval_batches; b += comm.world_size()) {
    for (int i = 0; i < per_micro; ++i) eids[static_cast<size_t>(i)] = (int64_t{b} * per_micro + i) % n_eval;
    auto [x, y] = data.batch(eids.data(), per_micro, true);
    sum.add_(path.eval_loss(x, y).to(at::kDouble));
    n += 1;
  }
  at::Tensor s = at::stack({sum, at::full({}, n, f64)});
  comm.allreduce_sum(s);
  const at::Tensor h = comm.read(s, "the eval all-reduce");
  Record e;
  e.kind = RecordKind::eval;
  e.rank = comm.rank();
  e.t = tel.clock.t();
  e.step = step;
  e.eval_loss = h[0].item<double>() / std::max(1.0, h[1].item<double>());
  tel.out().post(std::move(e));
  tel.event(event::eval_end, step);
}

}  // namespace

static RankResult train_rank_unchecked(const RankOptions& o) {
  const Scenario& sc = o.scenario;
  const int rank = o.rank, world = o.world_size;
  keep_freed_memory();
  at::set_num_threads(o.threads > 0 ? o.threads : default_threads(o.local_world_size));

  // ---- set-up: faults, placement, telemetry, process group, watchdog -----------------------------
  // the faults (and a replay's repair), the schedule after their plan(), the rules of a step (faults/effects.h)
  RunPlan plan(sc, o.repair);
  const Placement place =
      placement(sc, rank, o.local_rank >= 0 ? o.local_rank : rank % std::max(1, o.local_world_size), o.local_world_size);
  if (place.device.is_cuda()) c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).setDevice(place.device);
  fs::create_directories(o.run_dir + "/telemetry");
  RankTelemetry tel(o);
  const std::unique_ptr<Comm> comm = join(o, place, tel);
  Watchdog watchdog(tel.out(), tel.clock, rank, sc.heartbeat_s, o.telemetry);
  const InterruptFlushGuard on_interrupt = tel.last_word_on_interrupt(watchdog);

  RankResult result;
  Progress pr;
  StepLog log(pr.logged, result, tel.out());
  std::unique_ptr<StepPath> path;  // kernels: aten: holds the last step's record, waiting for its scalars
  try {
    // ---- set-up: data, model, the step's kernel path and optimizer, sampler, start or checkpoint -----
    const TrainData data = load_data(sc, rank);
    const std::shared_ptr<TrainModel> model = init_model(sc, *comm);
    const StepContext ctx{sc, plan, *comm, *model, model->parameters(), pr.c, log, tel.clock, o.telemetry};
    path = place.aten ? make_aten_step(ctx) : make_flatline_step(ctx);
    DistributedSampler sampler = make_sampler(sc, data, rank, world);
    pr = start_or_restore(o, plan, *model, path->optimizer(), data.train_size(), place.device, tel);
    sampler.set_state(pr.sampler);
    path->start(pr.c.scaler);

    const bool resumed = pr.resumed_from >= 0;  // these processes continue a resume: no stop for the restart
    const int64_t last = o.stop_after > 0 ? std::min(sc.steps, o.stop_after) : sc.steps;
    CheckpointRequests requests(o);
    for (int64_t step = pr.c.step + 1; step <= last; ++step) {
      const auto t_step = std::chrono::steady_clock::now();
      StepActions act;
      act.step = step;
      act.rank = rank;
      act.world_size = world;

      // ---- data ---------------------------------------------------------------------------------
      watchdog.set(step, "data");
      plan.apply(Hook::before_forward, act);
      if (act.data_block_s > 0) sleep_s(act.data_block_s);  // a stalled loader
      const auto replaced = RunPlan::replaced_batch(act);
      const std::vector<int64_t> ids = replaced ? sampler.at(*replaced) : sampler.next();
      pr.sampler = sampler.state();
      pr.c.samples_seen += static_cast<int64_t>(ids.size());

      // ---- forward + backward over grad_accum micro-batches (loss scaled for fp16) ------------------
      watchdog.set_phase("compute");
      path->forward_backward(data, ids, act);
      if (act.slowdown > 0) {  // a straggler: this rank's forward + backward take (1 + slowdown) x as long
        path->wait_for_device();
        sleep_s(act.slowdown * ms_since(t_step) / 1000);
      }
      plan.apply(Hook::after_backward, act);
      path->finish_local(/*send_zeros=*/RunPlan::contributes_zeros(act));

      // ---- all-reduce: mean of gradients and of the loss over ranks --------------------------------
      plan.apply(Hook::at_allreduce, act);
      if (act.block_s > 0) sleep_s(act.block_s);  // a hang
      watchdog.set_phase("collective");
      const auto t_comm = std::chrono::steady_clock::now();
      path->all_reduce();
      const double comm_ms = ms_since(t_comm);

      // ---- optimizer: overflow check, unscale + clip, update (GradScaler + clip_grad_norm_ order) ----
      watchdog.set_phase("optimizer");
      plan.apply(Hook::before_optimizer, act);
      const UpdateDecision upd = path->optimizer_step(act);

      // ---- consistency (nccl-tests' #wrong): parameters must be identical on every rank -------------
      // (and the ranks agree on the launcher's checkpoint requests: the most any rank has seen)
      path->check_consistency(requests.seen(step));

      // ---- record ---------------------------------------------------------------------------------
      plan.apply(Hook::at_logging, act);
      path->record(step_record(act, o.telemetry && plan.logs(step), pr, upd, ids, tel.clock.t(), comm_ms, t_step));
      pr.c.step = step;
      result.last_step = step;
      result.step_ms.push_back(ms_since(t_step));

      // ---- eval ------------------------------------------------------------------------------------
      if ((sc.eval_every > 0 && step % sc.eval_every == 0) || (o.eval_from > 0 && step >= o.eval_from)) {
        path->flush();  // the step's record before the eval's
        watchdog.set_phase("eval");
        evaluate(step, sc, data, *path, *comm, tel);
      }

      // ---- checkpoint: every rank saves its state; rank 0 marks it complete after a barrier ----------
      // (the scenario's, a replay's branch point after its last step, and one the launcher asked for near
      // a finding, which every rank writes at the same step: the agreed count is the same on every rank)
      const bool scheduled =
          (sc.checkpoint_every > 0 && step % sc.checkpoint_every == 0) || (o.checkpoint_at_stop && step == last);
      const bool asked = requests.ask(log.checkpoint_requests());
      if (scheduled || asked) {
        path->flush();  // pr.logged of this step
        watchdog.set_phase("checkpoint");
        pr.c.scaler = path->scaler_state();
        if (scheduled) save(checkpoint_dir(o.run_dir, step), pr, *model, *path, *comm, o, tel);
        if (asked) save(live_checkpoint_dir(o.run_dir, step), pr, *model, *path, *comm, o, tel);
        if (asked) requests.met(log.checkpoint_requests());
      }

      // ---- restart: the scheduler stops every rank here; new processes resume from the checkpoint -----
      if (plan.stops_for_restart(step, resumed)) {
        path->flush();
        tel.event(event::stop_for_restart, step);
        result.stopped_for_restart = true;
        break;
      }
    }

    // ---- end ----------------------------------------------------------------------------------------
    path->flush();
    result.opt_steps = pr.c.opt_step;
    if (o.keep_params)
      for (auto& p : model->parameters()) {
        at::Tensor c = p.detach().contiguous().to(at::kFloat).cpu();
        result.params.insert(result.params.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
      }
    if (!result.stopped_for_restart)
      tel.event(event::run_end, result.last_step, fmt::format("param_mismatches {}", result.param_mismatches));
  } catch (const std::exception& e) {  // typed by train_rank() below
    // A completed step whose scalars arrived before the failure still gets its record.
    if (path) {
      try {
        path->flush(/*arrived_only=*/true);
      } catch (...) {
      }
    }
    const bool bug = !recoverable_kind(e) && !dynamic_cast<const InvariantError*>(&e) &&
                     !dynamic_cast<const ScenarioError*>(&e);
    tel.note_error(result.last_step, bug ? "internal error: " + message_of(e) : message_of(e));
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
