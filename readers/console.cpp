// Training console output that no framework reader claims (the stdout/stderr a job's scheduler
// keeps): Hugging Face Trainer's printed log dicts ({'loss': 2.31, 'grad_norm': 1.2,
// 'learning_rate': 5e-05, 'epoch': 0.1}; transformers trainer_callback.py ProgressCallback.on_log),
// with tqdm's "N/M" bar giving the step; the PyTorch tutorial's "[2, 12000] loss: 1.247"; and
// PyTorch's distributed failures (NCCL watchdog, Gloo, c10d store, torch.distributed.elastic
// summaries), which are run_not_alive evidence. The lines are those of readers/text_log.h; this
// reader is what such a log is detected as.
#include "readers/registry.h"
#include "readers/text_log.h"
#include "readers/text_util.h"

namespace flatline {
namespace {

bool has(std::string_view s, std::string_view x) { return readers::contains(s, x); }

Sniff sniff(std::string_view head) {
  if (has(head, "{'loss': ") || has(head, "{'eval_loss': ") || has(head, "] loss: ")) return Sniff::likely;
  for (const char* p : {"Watchdog caught collective operation timeout", "ChildFailedError", "ProcessGroupNCCL",
                        "ProcessGroupGloo", "torch.distributed", "Timed out waiting"})
    if (has(head, p)) return Sniff::likely;
  return Sniff::no;
}

ReaderDef def() {
  ReaderDef d;
  d.name = "console";
  d.summary = "training console output: HF Trainer log dicts, loss prints, torch.distributed failures";
  d.name_hints = {"*.log", "*.txt", "*.out", "*.err"};
  d.sniff = sniff;
  d.parse = readers::parse_text_log;
  d.lines = readers::text_lines;
  d.priority = 90;
  return d;
}

}  // namespace

FLATLINE_REGISTER_READER(def());

}  // namespace flatline
