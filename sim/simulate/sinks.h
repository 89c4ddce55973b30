// Where the fleet simulator's records go (simulator.h RecordSink): straight into a Triage (streaming
// diagnosis, nothing retained), into JSONL files (telemetry/rank-<r>.jsonl, the harness's layout, so
// `flatline diagnose` reads them), or several at once. Plus the run's manifest from a SimResult.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "detectors/triage.h"
#include "sim/simulate/simulator.h"
#include "telemetry/manifest.h"

namespace flatline {

// Blocks go to the Triage whole (Triage::observe_block: every detector a pass over its columns), events
// and eval records one at a time; read the diagnosis after end().
class TriageSink : public RecordSink {
 public:
  explicit TriageSink(Triage& t) : t_(t) {}
  void write(const Record& r) override { t_.observe(r); }
  void write_block(const StepBlock& b) override { t_.observe_block(b); }
  void end(double t_end) override { t_.finish(t_end); }

 private:
  Triage& t_;
};

// One buffered file per rank, opened on the rank's first record (1024 ranks: 1024 open files).
class JsonlDirSink : public RecordSink {
 public:
  explicit JsonlDirSink(std::string telemetry_dir);
  ~JsonlDirSink() override;
  void write(const Record& r) override;
  void end(double) override;
  int64_t bytes() const { return bytes_; }

 private:
  std::string dir_;
  std::vector<std::FILE*> files_;
  int64_t bytes_ = 0;
};

class TeeSink : public RecordSink {
 public:
  TeeSink(RecordSink& a, RecordSink& b) : a_(a), b_(b) {}
  void write(const Record& r) override { a_.write(r), b_.write(r); }
  void write_block(const StepBlock& blk) override { a_.write_block(blk), b_.write_block(blk); }
  void end(double t) override { a_.end(t), b_.end(t); }

 private:
  RecordSink &a_, &b_;
};

// The manifest of a simulated run: the resolved scenario and each fault's truth() with its onset t.
Manifest simulation_manifest(const Scenario& s, const SimResult& r, double wall_s);

}  // namespace flatline
