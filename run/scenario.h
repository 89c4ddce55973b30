// Scenario: what a run is (docs/DESIGN.md §4): workload, placement, faults and expectation, as plain
// structs with the defaults of §4's table. The ground floor (run/) that faults/, sim/ and every reader
// of a run stand on; faults/scenario_file.h loads, checks and writes one.
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace flatline {

class ScenarioError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ModelSpec {
  std::string kind = "gpt";  // gpt | cnn
  // gpt: byte-level decoder-only transformer (vocab 256)
  int n_layer = 2, n_head = 4, n_embd = 64, block_size = 64;
  bool tied_head = true;     // lm head shares the token embedding (GPT-2)
  // cnn: two conv blocks + MLP classifier on 28x28 images
  int channels = 16, hidden = 64;
};

struct DataSpec {
  std::string kind = "text";  // text | fashion_mnist
  std::string path;           // empty: the Debian default (fortunes / fashion-mnist)
  double eval_fraction = 0.05;
};

struct OptimizerSpec {
  std::string kind = "adamw";  // adamw | sgd
  double lr = 3.0e-3;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;     // adamw; sgd's default is 0 (torch.optim.SGD's), set by the loader
  double grad_clip = 1.0;      // max global L2 norm; 0 = off
  double momentum = 0.0;       // sgd only
};

struct ScheduleSpec {
  std::string kind = "cosine";  // constant | cosine | linear
  int64_t warmup = 0;           // steps of linear warmup from 0
  int64_t total = 0;            // steps to reach min_lr; 0 = the scenario's `steps`
  double min_lr = 0.0;
};

// An external trainer (docs/DESIGN.md §16): the user's own training script, started per rank by the
// launcher instead of `flatline worker`, with the Python probe (python/flatline_probe) writing the
// telemetry and carrying out the faults' actions (`flatline plan`).
struct TrainerSpec {
  std::string command;  // run by /bin/sh -c in `cwd`; empty: flatline's own trainer
  std::string cwd;      // absolute; the scenario file's directory unless `cwd:` says (relative to it)
};

struct FaultSpec {
  std::string kind, mode;
  int64_t at = -1;                              // onset step (1-based global step)
  int64_t range_start = -1, range_end = -1, range_every = 1;  // alternative to `at`
  double probability = 1.0;                     // with range: seeded chance per candidate step
  int64_t lifetime_steps = -1;                  // -1: until end
  int target_rank = -1;                         // -1: all ranks
  // params besides mode, as the kind's registration declares them for this mode (faults/fault.h): the
  // loader refuses an undeclared name, a non-integer where an integer is meant and a value below the
  // minimum; integers are held exactly (|v| < 2^53).
  std::map<std::string, double> params;
  int line = 0;                                 // where it was declared
  int index = 0;                                // position in the scenario's fault list (seeds `range` draws)
};

struct ExpectSpec {
  std::string cause = "healthy";
  int rank = -1;                 // -1: no rank expected
  int64_t within_steps = 5;      // max detected_step - onset_step
};

struct Scenario {
  std::string name;
  std::string source;            // file it came from (for messages)
  uint64_t seed = 0;
  ModelSpec model;
  DataSpec data;
  int world_size = 1;
  int64_t steps = 100;
  int batch_size = 16;           // per rank, per micro-batch
  int grad_accum = 1;            // micro-batches per optimizer step
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
  std::string precision = "fp32";  // fp32 | fp16 | bf16
  // fp16 dynamic loss scaler. Defaults: PyTorch GradScaler (init 2^16, growth every 2000 clean steps);
  // Megatron-LM starts at 2^32 (--initial-loss-scale), which makes a long, healthy initial search.
  double loss_scale_init = 65536.0;
  int64_t loss_scale_growth_interval = 2000;
  // Placement. device: where each rank trains (cuda: cuda:LOCAL_RANK, one GPU per rank).
  // process_group: auto = NCCL on cuda, Gloo on cpu, none at world_size 1; gloo on cuda stages CUDA
  // tensors through the host and lets ranks share GPUs; a named one is created even at world_size 1.
  // kernels: flatline = the harness's own CPU kernels (fused Eigen optimizer, one-pass gradient
  // statistics, binary16 emulation; cpu only); aten = the step as PyTorch runs it on the device
  // (autocast, GradScaler's kernels, fused AdamW/SGD, statistics read back a step later);
  // auto = aten on cuda, flatline on cpu.
  std::string device = "cpu";           // cpu | cuda
  std::string process_group = "auto";   // auto | gloo | nccl
  std::string kernels = "auto";         // auto | flatline | aten
  int64_t checkpoint_every = 0;  // 0 = never
  int64_t restart_at = -1;       // stop all ranks after this step and resume from the last checkpoint
  int64_t eval_every = 0;
  int eval_batches = 4;
  double heartbeat_s = 0.5;
  double collective_timeout_s = 30;  // all-reduce timeout: how long a hung rank can stall the others
  int log_every = 1;             // write a step record every N steps (real loggers are sparse)
  // For the fleet simulator only (`flatline simulate`, `flatline drill`): a shape no local launcher
  // should start (thousands of ranks, tens of thousands of steps). `flatline run` refuses it and
  // `flatline score` skips it with a line saying so (cli/launch.h, cli/cmd_score.cpp).
  bool fleet_only = false;
  // Foreign-format logs rank 0 also writes, live (telemetry/writers/writer.h): `formats: {write:
  // [tensorboard, hf, ...], every: N}` (every: the frameworks' logging interval, in steps).
  std::vector<std::string> formats;
  int formats_every = 1;
  TrainerSpec trainer;
  std::vector<FaultSpec> faults;
  ExpectSpec expect;
};

// The keys an external trainer's scenario may not set: they describe flatline's own model, data,
// optimizer and evaluation, which the user's script owns (a workload's unread option is an error).
// `checkpoint` and `restart` it may set: the probe asks the job for its checkpoints and stops it for the
// restart (docs/DESIGN.md §16).
inline const std::vector<std::string>& keys_of_own_trainer() {
  static const std::vector<std::string> k = {"model",   "data",        "batch_size", "grad_accum", "optimizer",
                                             "kernels", "loss_scaler", "eval",       "formats",    "process_group"};
  return k;
}

}  // namespace flatline
