// Strict YAML loading of scenarios with yaml-cpp (faults/scenario_file.h); every error names
// source:line:column.
#include "faults/scenario_file.h"

#include "core/input_file.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "faults/fault.h"
#include "run/causes.h"
#include "telemetry/writers/writer.h"

namespace flatline {
namespace {

struct Ctx {
  std::string source;
  [[noreturn]] void fail(const YAML::Node& n, const std::string& what) const {
    auto m = n.Mark();
    if (m.is_null()) throw ScenarioError(fmt::format("{}: {}", source, what));
    throw ScenarioError(fmt::format("{}:{}:{}: {}", source, m.line + 1, m.column + 1, what));
  }
  void expect_map(const YAML::Node& n, const std::string& key) const {
    if (!n.IsMap()) fail(n, fmt::format("'{}' must be a mapping {{...}}", key));
  }
  void only_keys(const YAML::Node& n, const std::string& where, std::set<std::string> allowed) const {
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (!it->first.IsScalar()) fail(it->first, fmt::format("a key in {} must be a plain name", where));
      auto k = it->first.as<std::string>();
      // yaml-cpp keeps the first of two equal keys silently; a scenario saying a thing twice is a mistake
      if (!seen.insert(k).second) fail(it->first, fmt::format("duplicate key '{}' in {}", k, where));
      if (!allowed.count(k)) {
        std::string list;
        for (auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        fail(it->first, fmt::format("unknown key '{}' in {} (expected one of: {})", k, where, list));
      }
    }
  }
  template <class T>
  T get(const YAML::Node& n, const std::string& key) const {
    T v{};
    try {
      v = n.as<T>();
    } catch (const YAML::Exception&) {
      fail(n, fmt::format("'{}': expected {}, got '{}'", key, type_name<T>(), YAML::Dump(n)));
    }
    if constexpr (std::is_floating_point_v<T>)
      if (!std::isfinite(v)) fail(n, fmt::format("'{}': expected a finite number, got '{}'", key, YAML::Dump(n)));
    return v;
  }
  template <class T>
  static const char* type_name() {
    if constexpr (std::is_same_v<T, bool>) return "true/false";
    else if constexpr (std::is_integral_v<T>) return "an integer";
    else if constexpr (std::is_floating_point_v<T>) return "a number";
    else return "a string";
  }
  template <class T>
  void set(const YAML::Node& parent, const char* key, T& out) const {
    if (auto n = parent[key]) out = get<T>(n, key);
  }
  template <class T>
  void set_min(const YAML::Node& parent, const char* key, T& out, T lo) const {
    if (auto n = parent[key]) {
      out = get<T>(n, key);
      if (out < lo) fail(n, fmt::format("'{}' must be >= {}, got {}", key, lo, out));
    }
  }
  void set_one_of(const YAML::Node& parent, const char* key, std::string& out,
                  std::set<std::string> allowed) const {
    if (auto n = parent[key]) {
      out = get<std::string>(n, key);
      if (!allowed.count(out)) {
        std::string list;
        for (auto& a : allowed) list += (list.empty() ? "" : " | ") + a;
        fail(n, fmt::format("'{}': expected {}, got '{}'", key, list, out));
      }
    }
  }
};

FaultSpec parse_fault(const Ctx& c, const YAML::Node& n) {
  c.expect_map(n, "faults[]");
  c.only_keys(n, "a fault", {"kind", "at", "range", "probability", "lifetime", "target", "params"});
  FaultSpec f;
  f.line = n.Mark().line + 1;
  if (!n["kind"]) c.fail(n, "a fault needs 'kind'");
  f.kind = c.get<std::string>(n["kind"], "kind");
  const FaultKindDef* kind = find_fault_kind(f.kind);
  if (!kind)
    c.fail(n["kind"], fmt::format("unknown fault kind '{}' (expected {})", f.kind, join_ids(fault_kind_names(), " | ")));
  c.set_min<int64_t>(n, "at", f.at, 1);
  if (auto r = n["range"]) {
    c.expect_map(r, "range");
    c.only_keys(r, "range", {"start", "end", "every"});
    if (!r["start"] || !r["end"]) c.fail(r, "'range' needs 'start' and 'end'");
    c.set_min<int64_t>(r, "start", f.range_start, 1);
    c.set_min<int64_t>(r, "end", f.range_end, f.range_start);
    c.set_min<int64_t>(r, "every", f.range_every, 1);
    if (f.at >= 0) c.fail(r, "give either 'at' or 'range', not both");
  }
  if (f.at < 0 && f.range_start < 0) c.fail(n, "a fault needs 'at' (a step) or 'range: {start, end}'");
  if (auto p = n["probability"]) {
    f.probability = c.get<double>(p, "probability");
    if (!(f.probability > 0 && f.probability <= 1)) c.fail(p, "'probability' must be in (0, 1]");
  }
  if (auto l = n["lifetime"]) {
    c.expect_map(l, "lifetime");
    c.only_keys(l, "lifetime", {"until", "steps"});
    if (auto u = l["until"]) {
      if (c.get<std::string>(u, "until") != "end") c.fail(u, "'until': expected 'end'");
    } else if (l["steps"]) {
      c.set_min<int64_t>(l, "steps", f.lifetime_steps, 1);
    } else {
      c.fail(l, "'lifetime' needs 'until: end' or 'steps: N'");
    }
  }
  if (auto t = n["target"]) {
    c.expect_map(t, "target");
    c.only_keys(t, "target", {"rank"});
    if (auto r = t["rank"]) {
      if (r.IsScalar() && r.Scalar() == "all") f.target_rank = -1;
      else {
        f.target_rank = c.get<int>(r, "rank");
        if (f.target_rank < 0) c.fail(r, fmt::format("'rank': expected a rank >= 0 or 'all', got {}", f.target_rank));
      }
    }
  }
  // The mode first: it decides which parameters mean something.
  const YAML::Node p = n["params"];
  if (p) c.expect_map(p, "params");
  if (p && p["mode"]) f.mode = c.get<std::string>(p["mode"], "mode");
  std::vector<std::string> mode_names;
  for (const auto& m : kind->modes) mode_names.push_back(m.name);
  std::sort(mode_names.begin(), mode_names.end());
  if (f.mode.empty()) c.fail(n, fmt::format("fault '{}' needs params.mode ({})", f.kind, join_ids(mode_names, " | ")));
  const ModeDef* mode = kind->mode(f.mode);
  if (!mode) c.fail(p["mode"], fmt::format("fault '{}' has no mode '{}'", f.kind, f.mode));
  if (p) {
    std::set<std::string> seen;
    for (auto it = p.begin(); it != p.end(); ++it) {
      const auto k = it->first.as<std::string>();
      if (!seen.insert(k).second) c.fail(it->first, fmt::format("duplicate key '{}' in params", k));
      if (k == "mode") continue;
      const ParamDef* d = mode->param(k);
      if (!d) {
        std::vector<std::string> names = {"mode"};
        for (const auto& q : mode->params) names.push_back(q.name);
        c.fail(it->first, fmt::format("unknown fault param '{}' for {}/{} (expected {})", k, f.kind, f.mode,
                                      join_ids(names, ", ")));
      }
      const double v = d->type == ParamType::integer ? static_cast<double>(c.get<int64_t>(it->second, k))
                                                     : c.get<double>(it->second, k);
      if (d->above_min ? !(v > d->min) : !(v >= d->min))
        c.fail(it->second, fmt::format("'{}' must be {} {}, got {}", k, d->above_min ? ">" : ">=", d->min, v));
      f.params[k] = v;
    }
  }
  return f;
}

std::string placement_error(const Scenario& s) {
  if (s.device == "cpu" && s.process_group == "nccl") return "'process_group: nccl' needs 'device: cuda'";
  if (s.device == "cuda" && s.kernels == "flatline")
    return "'kernels: flatline' runs on cpu only (its kernels are Eigen loops over host memory); cuda takes aten";
  return "";
}

void parse_model(const Ctx& c, const YAML::Node& root, Scenario& s) {
  if (auto m = root["model"]) {
    c.expect_map(m, "model");
    c.only_keys(m, "model", {"kind", "n_layer", "n_head", "n_embd", "block_size", "tied_head", "channels", "hidden"});
    c.set_one_of(m, "kind", s.model.kind, {"gpt", "cnn"});
    c.set_min(m, "n_layer", s.model.n_layer, 1);
    c.set_min(m, "n_head", s.model.n_head, 1);
    c.set_min(m, "n_embd", s.model.n_embd, 1);
    c.set_min(m, "block_size", s.model.block_size, 2);
    c.set(m, "tied_head", s.model.tied_head);
    c.set_min(m, "channels", s.model.channels, 1);
    c.set_min(m, "hidden", s.model.hidden, 1);
    if (s.model.n_embd % s.model.n_head) c.fail(m, fmt::format("n_embd ({}) must be divisible by n_head ({})",
                                                                s.model.n_embd, s.model.n_head));
  }
}

void parse_data(const Ctx& c, const YAML::Node& root, Scenario& s) {
  if (auto d = root["data"]) {
    c.expect_map(d, "data");
    c.only_keys(d, "data", {"kind", "path", "eval_fraction"});
    c.set_one_of(d, "kind", s.data.kind, {"text", "fashion_mnist"});
    c.set(d, "path", s.data.path);
    if (!s.data.path.empty()) {
      std::error_code ec;
      const auto st = std::filesystem::status(s.data.path, ec);
      if (!std::filesystem::exists(st))
        c.fail(d["path"], fmt::format("'path': no such file or directory: {}", s.data.path));
      // a FIFO would block every rank forever, a device never end: data is a file or a directory of them
      if (!std::filesystem::is_regular_file(st) && !std::filesystem::is_directory(st))
        c.fail(d["path"], fmt::format("'path': {} is not a regular file or a directory", s.data.path));
    }
    c.set(d, "eval_fraction", s.data.eval_fraction);
    if (!(s.data.eval_fraction > 0 && s.data.eval_fraction < 0.5)) c.fail(d, "'eval_fraction' must be in (0, 0.5)");
  }
}

void parse_optimizer(const Ctx& c, const YAML::Node& root, Scenario& s) {
  if (auto o = root["optimizer"]) {
    c.expect_map(o, "optimizer");
    c.only_keys(o, "optimizer", {"kind", "lr", "betas", "eps", "weight_decay", "grad_clip", "momentum"});
    c.set_one_of(o, "kind", s.optimizer.kind, {"adamw", "sgd"});
    c.set_min(o, "lr", s.optimizer.lr, 0.0);
    if (auto b = o["betas"]) {
      if (!b.IsSequence() || b.size() != 2) c.fail(b, "'betas' must be a list of two numbers [beta1, beta2]");
      s.optimizer.beta1 = c.get<double>(b[0], "betas[0]");
      s.optimizer.beta2 = c.get<double>(b[1], "betas[1]");
      for (int i = 0; i < 2; ++i) {  // torch.optim.AdamW's own check: beta 1 never forgets, > 1 diverges
        const double beta = i == 0 ? s.optimizer.beta1 : s.optimizer.beta2;
        if (!(beta >= 0 && beta < 1))
          c.fail(b[i], fmt::format("'betas[{}]' must be in [0, 1), got {}", i, beta));
      }
    }
    c.set_min(o, "eps", s.optimizer.eps, 0.0);
    if (s.optimizer.kind == "sgd") s.optimizer.weight_decay = 0.0;  // torch.optim.SGD's default; AdamW's: 0.1 above
    c.set_min(o, "weight_decay", s.optimizer.weight_decay, 0.0);
    c.set_min(o, "grad_clip", s.optimizer.grad_clip, 0.0);
    c.set_min(o, "momentum", s.optimizer.momentum, 0.0);
  }
}

// The schedule; its total defaults to the run's steps.
void parse_schedule(const Ctx& c, const YAML::Node& root, Scenario& s) {
  if (auto sc = root["schedule"]) {
    c.expect_map(sc, "schedule");
    c.only_keys(sc, "schedule", {"kind", "warmup", "total", "min_lr"});
    c.set_one_of(sc, "kind", s.schedule.kind, {"constant", "cosine", "linear"});
    c.set_min<int64_t>(sc, "warmup", s.schedule.warmup, 0);
    c.set_min<int64_t>(sc, "total", s.schedule.total, 0);
    c.set_min(sc, "min_lr", s.schedule.min_lr, 0.0);
  }
  if (s.schedule.total == 0) s.schedule.total = s.steps;
}

// The loss scaler (fp16 only), checkpoints, the restart (which needs them) and evaluation.
void parse_checkpoints(const Ctx& c, const YAML::Node& root, Scenario& s) {
  if (auto ls = root["loss_scaler"]) {
    c.expect_map(ls, "loss_scaler");
    c.only_keys(ls, "loss_scaler", {"init_scale", "growth_interval"});
    c.set(ls, "init_scale", s.loss_scale_init);
    if (!(s.loss_scale_init > 0)) c.fail(ls["init_scale"], "'init_scale' must be > 0");
    c.set_min<int64_t>(ls, "growth_interval", s.loss_scale_growth_interval, 1);
    if (s.precision != "fp16") c.fail(ls, "'loss_scaler' only applies with 'precision: fp16'");
  }
  if (auto ck = root["checkpoint"]) {
    c.expect_map(ck, "checkpoint");
    c.only_keys(ck, "checkpoint", {"every"});
    c.set_min<int64_t>(ck, "every", s.checkpoint_every, 0);
  }
  if (auto r = root["restart"]) {
    c.expect_map(r, "restart");
    c.only_keys(r, "restart", {"at"});
    c.set_min<int64_t>(r, "at", s.restart_at, 1);
    if (s.checkpoint_every <= 0) c.fail(r, "'restart' needs 'checkpoint: {every: N}' to resume from");
  }
  if (auto e = root["eval"]) {
    c.expect_map(e, "eval");
    c.only_keys(e, "eval", {"every", "batches"});
    c.set_min<int64_t>(e, "every", s.eval_every, 0);
    c.set_min(e, "batches", s.eval_batches, 1);
  }
}

void parse_formats(const Ctx& c, const YAML::Node& root, Scenario& s) {
  if (auto f = root["formats"]) {
    c.expect_map(f, "formats");
    c.only_keys(f, "formats", {"write", "every"});
    if (auto w = f["write"]) {
      if (!w.IsSequence()) c.fail(w, "'write' must be a list of formats (" + format_names() + ")");
      for (const auto& x : w) {
        const auto name = c.get<std::string>(x, "write[]");
        if (!is_format_name(name)) c.fail(x, fmt::format("unknown format '{}' (expected {})", name, format_names()));
        s.formats.push_back(name);
      }
    }
    c.set_min(f, "every", s.formats_every, 1);
  }
}

// Each fault (parse_fault), inside the world and the run.
void parse_faults(const Ctx& c, const YAML::Node& root, Scenario& s) {
  if (auto fs = root["faults"]) {
    if (!fs.IsSequence()) c.fail(fs, "'faults' must be a list");
    for (const auto& f : fs) {
      s.faults.push_back(parse_fault(c, f));
      auto& fl = s.faults.back();
      fl.index = static_cast<int>(s.faults.size()) - 1;
      if (fl.target_rank >= s.world_size)
        c.fail(f["target"], fmt::format("target rank {} is outside world_size {}", fl.target_rank, s.world_size));
      const int64_t first = fl.at > 0 ? fl.at : fl.range_start;
      if (first > s.steps)
        c.fail(f, fmt::format("the fault starts at step {}, after the run's last step {}", first, s.steps));
    }
  }
}

// An external trainer: its command, and its cwd relative to the scenario file's directory.
void parse_trainer(const Ctx& c, const YAML::Node& root, Scenario& s) {
  if (auto t = root["trainer"]) {
    c.expect_map(t, "trainer");
    c.only_keys(t, "trainer", {"command", "cwd"});
    if (!t["command"]) c.fail(t, "'trainer' needs 'command' (the script each rank runs, e.g. \"python train.py\")");
    c.set(t, "command", s.trainer.command);
    if (s.trainer.command.find_first_not_of(" \t") == std::string::npos)
      c.fail(t["command"], "'trainer.command' is empty");
    std::string cwd;
    c.set(t, "cwd", cwd);
    // Relative to the scenario file's directory (the current one for an embedded scenario).
    namespace fs = std::filesystem;
    const fs::path base = s.source.rfind("<embedded", 0) == 0 ? fs::current_path()
                                                               : fs::absolute(fs::path(s.source)).parent_path();
    s.trainer.cwd = fs::weakly_canonical(cwd.empty() ? base : base / cwd).string();
  }
}

void parse_expect(const Ctx& c, const YAML::Node& root, Scenario& s) {
  if (auto e = root["expect"]) {
    c.expect_map(e, "expect");
    c.only_keys(e, "expect", {"cause", "rank", "within_steps"});
    c.set_one_of(e, "cause", s.expect.cause, {cause_ids().begin(), cause_ids().end()});
    c.set(e, "rank", s.expect.rank);
    if (s.expect.rank >= s.world_size)
      c.fail(e["rank"], fmt::format("expected rank {} is outside world_size {}", s.expect.rank, s.world_size));
    c.set_min<int64_t>(e, "within_steps", s.expect.within_steps, 0);
  } else {
    c.fail(root, "a scenario needs 'expect: {cause: ...}' (healthy for a clean twin)");
  }
}

Scenario parse(const YAML::Node& root, const std::string& source) {
  Ctx c{source};
  if (!root.IsMap()) c.fail(root, "a scenario must be a YAML mapping");
  c.only_keys(root, "the scenario", {scenario_keys().begin(), scenario_keys().end()});
  // Before any of them is read: what a key of flatline's own trainer would be checked against is moot.
  if (root["trainer"])
    for (const auto& k : keys_of_own_trainer())
      if (root[k])
        c.fail(root[k], fmt::format("'{}' describes flatline's own trainer: a scenario with an external 'trainer' "
                                    "cannot set it (the script owns its {}; docs/DESIGN.md §16)",
                                    k, k));
  Scenario s;
  s.source = source;
  if (!root["name"]) c.fail(root, "a scenario needs 'name'");
  c.set(root, "name", s.name);
  // The name is a directory under --out that a new run replaces: nothing that could climb out of it.
  if (s.name.empty() || s.name == "." || s.name == ".." ||
      s.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != std::string::npos)
    c.fail(root["name"], fmt::format("'name': expected letters, digits, '.', '_' or '-' (it names the run directory), "
                                     "got '{}'", s.name));
  c.set(root, "seed", s.seed);
  parse_model(c, root, s);
  parse_data(c, root, s);
  if ((s.model.kind == "cnn") != (s.data.kind == "fashion_mnist"))
    c.fail(root, fmt::format("model '{}' cannot train on data '{}' (gpt needs text, cnn needs fashion_mnist)",
                             s.model.kind, s.data.kind));
  c.set_min(root, "world_size", s.world_size, 1);
  c.set_min<int64_t>(root, "steps", s.steps, 1);
  c.set_min(root, "batch_size", s.batch_size, 1);
  c.set_min(root, "grad_accum", s.grad_accum, 1);
  parse_optimizer(c, root, s);
  parse_schedule(c, root, s);
  c.set_one_of(root, "precision", s.precision, {"fp32", "fp16", "bf16"});
  c.set_one_of(root, "device", s.device, {"cpu", "cuda"});
  c.set_one_of(root, "process_group", s.process_group, {"auto", "gloo", "nccl"});
  c.set_one_of(root, "kernels", s.kernels, {"auto", "flatline", "aten"});
  if (const std::string bad = placement_error(s); !bad.empty())
    c.fail(root["process_group"] ? root["process_group"] : root["kernels"] ? root["kernels"] : root, bad);
  parse_checkpoints(c, root, s);
  c.set(root, "heartbeat_s", s.heartbeat_s);
  if (!(s.heartbeat_s > 0)) c.fail(root["heartbeat_s"], "'heartbeat_s' must be > 0");
  c.set(root, "collective_timeout_s", s.collective_timeout_s);
  if (!(s.collective_timeout_s > 0)) c.fail(root["collective_timeout_s"], "'collective_timeout_s' must be > 0");
  c.set_min(root, "log_every", s.log_every, 1);
  c.set(root, "fleet_only", s.fleet_only);
  parse_formats(c, root, s);
  parse_faults(c, root, s);
  parse_trainer(c, root, s);
  parse_expect(c, root, s);
  return s;
}

}  // namespace

const std::vector<std::string>& scenario_keys() {
  static const std::vector<std::string> k = {
      "name",      "seed",     "model",       "data",       "world_size", "steps",      "batch_size",
      "grad_accum", "optimizer", "schedule",  "precision",  "loss_scaler", "checkpoint", "restart",
      "eval",      "heartbeat_s", "collective_timeout_s", "log_every", "device",   "process_group",
      "kernels",   "fleet_only", "formats",   "trainer",    "faults",     "expect"};
  return k;
}

void set_placement(Scenario& s, const std::string& device, const std::string& process_group,
                   const std::string& source) {
  if (device != "cpu" && device != "cuda")
    throw ScenarioError(fmt::format("{}: device '{}': expected cpu | cuda", source, device));
  if (!process_group.empty() && process_group != "auto" && process_group != "gloo" && process_group != "nccl")
    throw ScenarioError(fmt::format("{}: process group '{}': expected auto | gloo | nccl", source, process_group));
  s.device = device;
  if (!process_group.empty()) s.process_group = process_group;
  if (const std::string bad = placement_error(s); !bad.empty())
    throw ScenarioError(fmt::format("{}: scenario {}: {}", source, s.name, bad));
}

Scenario load_scenario_text(const std::string& yaml, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::ParserException& e) {
    throw ScenarioError(fmt::format("{}:{}:{}: invalid YAML: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  try {
    return parse(root, source);
  } catch (const YAML::Exception& e) {  // a conversion the checks above did not foresee
    throw ScenarioError(fmt::format("{}:{}:{}: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

std::string read_scenario_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (!fs::exists(st)) throw ScenarioError(path + ": no such file");
  if (fs::is_directory(st)) throw ScenarioError(path + ": is a directory, expected a scenario YAML file");
  if (!fs::is_regular_file(st))
    throw ScenarioError(path + ": not a regular file (a device, FIFO or socket), expected a scenario YAML file");
  const auto size = fs::file_size(path, ec);
  if (!ec && size > kMaxScenarioBytes)
    throw ScenarioError(fmt::format("{}: {} bytes, more than a scenario's {} KiB: not a scenario YAML file", path, size,
                                    kMaxScenarioBytes >> 10));
  try {
    // a file of /proc (regular, size 0) or one swapped for a FIFO since the checks above: refused, never
    // blocked on (core/input_file.h); a link the user named is followed
    return read_input_file(path, kMaxScenarioBytes, "a scenario YAML file", /*follow_link=*/true);
  } catch (const InputError& e) {
    throw ScenarioError(e.what());
  }
}

Scenario load_scenario_file(const std::string& path) { return load_scenario_text(read_scenario_file(path), path); }

namespace {
// Shortest round-trip form (0.003, not yaml-cpp's 0.0030000000000000001): the resolved scenario in a
// manifest is read by people, and re-loads to the same doubles.
std::string num(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  return fmt::format("{}", v);
}
}  // namespace

std::string to_yaml(const Scenario& s) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << s.name;
  e << YAML::Key << "seed" << YAML::Value << s.seed;
  const bool own = s.trainer.command.empty();  // an external trainer's scenario has none of its keys (§16)
  if (own) {
    e << YAML::Key << "model" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "kind" << YAML::Value
      << s.model.kind;
    if (s.model.kind == "gpt")
      e << YAML::Key << "n_layer" << YAML::Value << s.model.n_layer << YAML::Key << "n_head" << YAML::Value
        << s.model.n_head << YAML::Key << "n_embd" << YAML::Value << s.model.n_embd << YAML::Key << "block_size"
        << YAML::Value << s.model.block_size << YAML::Key << "tied_head" << YAML::Value << s.model.tied_head;
    else
      e << YAML::Key << "channels" << YAML::Value << s.model.channels << YAML::Key << "hidden" << YAML::Value
        << s.model.hidden;
    e << YAML::EndMap;
    e << YAML::Key << "data" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "kind" << YAML::Value
      << s.data.kind << YAML::Key << "path" << YAML::Value << s.data.path << YAML::Key << "eval_fraction"
      << YAML::Value << num(s.data.eval_fraction) << YAML::EndMap;
  }
  e << YAML::Key << "world_size" << YAML::Value << s.world_size;
  e << YAML::Key << "steps" << YAML::Value << s.steps;
  if (own) {
    e << YAML::Key << "batch_size" << YAML::Value << s.batch_size;
    e << YAML::Key << "grad_accum" << YAML::Value << s.grad_accum;
    e << YAML::Key << "optimizer" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "kind"
      << YAML::Value << s.optimizer.kind << YAML::Key << "lr" << YAML::Value << num(s.optimizer.lr) << YAML::Key
      << "betas" << YAML::Value << YAML::Flow << std::vector<std::string>{num(s.optimizer.beta1), num(s.optimizer.beta2)}
      << YAML::Key << "eps" << YAML::Value << num(s.optimizer.eps) << YAML::Key << "weight_decay" << YAML::Value
      << num(s.optimizer.weight_decay) << YAML::Key << "grad_clip" << YAML::Value << num(s.optimizer.grad_clip) << YAML::Key
      << "momentum" << YAML::Value << num(s.optimizer.momentum) << YAML::EndMap;
  }
  e << YAML::Key << "schedule" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "kind" << YAML::Value
    << s.schedule.kind << YAML::Key << "warmup" << YAML::Value << s.schedule.warmup << YAML::Key << "total"
    << YAML::Value << s.schedule.total << YAML::Key << "min_lr" << YAML::Value << num(s.schedule.min_lr) << YAML::EndMap;
  e << YAML::Key << "precision" << YAML::Value << s.precision;
  e << YAML::Key << "device" << YAML::Value << s.device;
  if (own) {
    e << YAML::Key << "process_group" << YAML::Value << s.process_group;
    e << YAML::Key << "kernels" << YAML::Value << s.kernels;
    if (s.precision == "fp16")
      e << YAML::Key << "loss_scaler" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "init_scale"
        << YAML::Value << s.loss_scale_init << YAML::Key << "growth_interval" << YAML::Value
        << s.loss_scale_growth_interval << YAML::EndMap;
  }
  if (own || s.checkpoint_every > 0)
    e << YAML::Key << "checkpoint" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "every"
      << YAML::Value << s.checkpoint_every << YAML::EndMap;
  if (s.restart_at > 0)
    e << YAML::Key << "restart" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "at" << YAML::Value
      << s.restart_at << YAML::EndMap;
  if (own) {
    e << YAML::Key << "eval" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "every" << YAML::Value
      << s.eval_every << YAML::Key << "batches" << YAML::Value << s.eval_batches << YAML::EndMap;
  }
  e << YAML::Key << "heartbeat_s" << YAML::Value << num(s.heartbeat_s);
  e << YAML::Key << "collective_timeout_s" << YAML::Value << num(s.collective_timeout_s);
  e << YAML::Key << "log_every" << YAML::Value << s.log_every;
  if (s.fleet_only) e << YAML::Key << "fleet_only" << YAML::Value << true;
  if (own && !s.formats.empty())
    e << YAML::Key << "formats" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "write" << YAML::Value
      << YAML::Flow << s.formats << YAML::Key << "every" << YAML::Value << s.formats_every << YAML::EndMap;
  if (!s.trainer.command.empty())
    e << YAML::Key << "trainer" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "command"
      << YAML::Value << s.trainer.command << YAML::Key << "cwd" << YAML::Value << s.trainer.cwd << YAML::EndMap;
  e << YAML::Key << "faults" << YAML::Value << YAML::BeginSeq;
  for (const auto& f : s.faults) {
    e << YAML::Flow << YAML::BeginMap << YAML::Key << "kind" << YAML::Value << f.kind;
    if (f.at > 0) e << YAML::Key << "at" << YAML::Value << f.at;
    else
      e << YAML::Key << "range" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "start"
        << YAML::Value << f.range_start << YAML::Key << "end" << YAML::Value << f.range_end << YAML::Key << "every"
        << YAML::Value << f.range_every << YAML::EndMap << YAML::Key << "probability" << YAML::Value
        << num(f.probability);
    if (f.lifetime_steps > 0)
      e << YAML::Key << "lifetime" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "steps"
        << YAML::Value << f.lifetime_steps << YAML::EndMap;
    e << YAML::Key << "target" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "rank" << YAML::Value;
    if (f.target_rank < 0) e << "all"; else e << f.target_rank;
    e << YAML::EndMap;
    e << YAML::Key << "params" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "mode" << YAML::Value
      << f.mode;
    for (const auto& [k, v] : f.params) e << YAML::Key << k << YAML::Value << num(v);
    e << YAML::EndMap << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::Key << "expect" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "cause" << YAML::Value
    << s.expect.cause;
  if (s.expect.rank >= 0) e << YAML::Key << "rank" << YAML::Value << s.expect.rank;
  e << YAML::Key << "within_steps" << YAML::Value << s.expect.within_steps << YAML::EndMap;
  e << YAML::EndMap;
  return e.c_str();
}

}  // namespace flatline
