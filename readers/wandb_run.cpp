// A Weights & Biases run directory as the client leaves it on disk (wandb/offline-run-<date>-<id>/ or
// wandb/run-<date>-<id>/), read without the wandb package: its transaction log run-<id>.wandb.
// Framing (wandb/wandb wandb/sdk/internal/datastore.py; core/pkg/leveldb/record.go): a 7-byte
// header ":W&B", magic 0xBEE1 (little endian), version 0; then LevelDB's log format
// (google/leveldb doc/log_format.md) in 32 KiB blocks counted from the start of the file: chunks
// of  uint32 checksum | uint16 length | uint8 type (FULL 1, FIRST 2, MIDDLE 3, LAST 4) | data,
// checksum = CRC-32 (IEEE, zlib's crc32) of the type byte and the data (W&B's CRCAlgoIEEE, not
// LevelDB's masked CRC-32C); a block's last < 7 bytes are zero padding. Each record is a serialized
// wandb_internal.Record (readers/wandb_run.proto).
// Mapping: every HistoryRecord (one wandb.log call) is a row of key -> value_json, keys from
// HistoryItem.key or nested_key joined with '.', read like a W&B history export (readers/wandb_csv.cpp:
// step = train/global_step, trainer/global_step or global_step when logged, else _step; t = _runtime,
// else _timestamp made relative; names by readers/metric_names.h). ConfigRecord's max_steps (the HF
// Trainer integration logs TrainingArguments) is the planned end. Captured console lines
// (OutputRawRecord, OutputRecord) are read for PyTorch's distributed failures (readers/text_log.h);
// a RunExitRecord with a non-zero exit code is a run_end event. Bad input: a chunk whose checksum
// does not hold, or that does not fit its block, is skipped to the next block (LevelDB's recovery);
// a record that is not a Record proto is skipped; a file cut inside a record ends reading. Each is a
// warning naming the byte offset. Rank 0.
#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <map>

#include "readers/csv_table.h"
#include "readers/registry.h"
#include "readers/text_log.h"
#include "readers/text_util.h"
#include "readers/wandb_run.pb.h"

namespace flatline {
namespace {
using readers::at_byte;

constexpr size_t kHeader = 7, kBlock = 32768, kChunkHeader = 7;
constexpr unsigned char kMagic[kHeader] = {':', 'W', '&', 'B', 0xE1, 0xBE, 0x00};

struct Payload {
  uint64_t offset;  // of its first chunk
  std::string data;
};

uint32_t le32(const unsigned char* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24); }

std::vector<Payload> records_of(std::string_view data, const std::string& name, Warnings* w) {
  if (data.size() < kHeader || std::memcmp(data.data(), kMagic, 6) != 0)
    throw ReadError(at_byte(name, 0) + ": not a W&B transaction log (no \":W&B\" header)");
  if (static_cast<unsigned char>(data[6]) != 0 && w)
    w->push_back(fmt::format("{}: format version {} (read as version 0)", at_byte(name, 6),
                             static_cast<unsigned>(static_cast<unsigned char>(data[6]))));
  const auto* u = reinterpret_cast<const unsigned char*>(data.data());
  std::vector<Payload> out;
  std::string partial;
  uint64_t partial_at = 0;
  bool in_record = false;
  size_t pos = kHeader;
  while (pos < data.size()) {
    const size_t left_in_block = kBlock - pos % kBlock;
    if (left_in_block < kChunkHeader) {  // padding
      pos += left_in_block;
      continue;
    }
    if (pos + kChunkHeader > data.size()) {
      if (w) w->push_back(fmt::format("{}: file ends inside a chunk header (truncated?)", at_byte(name, pos)));
      break;
    }
    const uint32_t crc = le32(u + pos);
    const size_t len = u[pos + 4] | (u[pos + 5] << 8);
    const int type = u[pos + 6];
    if (crc == 0 && len == 0 && type == 0) {  // a zeroed block tail (preallocated space)
      pos += left_in_block;
      continue;
    }
    if (kChunkHeader + len > left_in_block || type < 1 || type > 4) {
      if (w) w->push_back(fmt::format("{}: bad chunk (type {}, {} bytes in a block with {} left); skipped to the next block",
                                      at_byte(name, pos), type, len, left_in_block - kChunkHeader));
      pos += left_in_block;
      in_record = false;
      continue;
    }
    if (pos + kChunkHeader + len > data.size()) {
      if (w) w->push_back(fmt::format("{}: record cut short ({} bytes announced, {} left); reading stops", at_byte(name, pos),
                                      len, data.size() - pos - kChunkHeader));
      break;
    }
    const unsigned char t8 = static_cast<unsigned char>(type);
    uLong c = ::crc32(0L, &t8, 1);
    c = ::crc32(c, u + pos + kChunkHeader, static_cast<uInt>(len));
    if (static_cast<uint32_t>(c) != crc) {
      if (w) w->push_back(fmt::format("{}: chunk checksum mismatch; skipped to the next block", at_byte(name, pos)));
      pos += left_in_block;
      in_record = false;
      continue;
    }
    std::string_view chunk(data.data() + pos + kChunkHeader, len);
    if (type == 1) {
      if (in_record && w) w->push_back(fmt::format("{}: a record with no LAST chunk, dropped", at_byte(name, partial_at)));
      out.push_back({pos, std::string(chunk)});
      in_record = false;
    } else if (type == 2) {
      partial.assign(chunk);
      partial_at = pos;
      in_record = true;
    } else if (!in_record) {
      if (w) w->push_back(fmt::format("{}: a MIDDLE/LAST chunk without its FIRST, skipped", at_byte(name, pos)));
    } else {
      partial.append(chunk);
      if (type == 4) {
        out.push_back({partial_at, std::move(partial)});
        partial.clear();
        in_record = false;
      }
    }
    pos += kChunkHeader + len;
  }
  if (in_record && w) w->push_back(fmt::format("{}: file ends inside a record (truncated?)", at_byte(name, partial_at)));
  return out;
}

std::string key_of(const std::string& key, const google::protobuf::RepeatedPtrField<std::string>& nested) {
  if (!key.empty()) return key;
  std::string k;
  for (const auto& p : nested) k += (k.empty() ? "" : ".") + p;
  return k;
}

std::vector<Record> parse(std::string_view data, const std::string& name, Warnings* w) {
  auto payloads = records_of(data, name, w);
  readers::CsvTable table;
  std::map<std::string, size_t> column;
  std::vector<Record> events;
  double start = std::nan("");
  for (const auto& p : payloads) {
    wb::Record rec;
    if (!rec.ParseFromString(p.data)) {
      if (w) w->push_back(at_byte(name, p.offset) + ": record is not a W&B Record proto, skipped");
      continue;
    }
    switch (rec.record_type_case()) {
      case wb::Record::kHistory: {
        readers::CsvRow row;
        row.line = p.offset;
        row.fields.assign(table.header.size(), "");
        for (const auto& it : rec.history().item()) {
          const std::string k = key_of(it.key(), it.nested_key());
          auto [c, fresh] = column.try_emplace(k, table.header.size());
          if (fresh) {
            table.header.push_back(k);
            for (auto& r : table.rows) r.fields.emplace_back();
            row.fields.emplace_back();
          }
          row.fields[c->second] = it.value_json();
        }
        table.rows.push_back(std::move(row));
        break;
      }
      case wb::Record::kRun:
        if (rec.run().has_start_time()) start = static_cast<double>(rec.run().start_time().seconds());
        break;
      case wb::Record::kOutput:
      case wb::Record::kOutputRaw: {
        const auto& o = rec.record_type_case() == wb::Record::kOutput ? rec.output() : rec.output_raw();
        if (auto e = readers::failure_event(o.line())) {
          if (o.has_timestamp() && std::isfinite(start)) e->t = static_cast<double>(o.timestamp().seconds()) - start;
          events.push_back(std::move(*e));
        }
        break;
      }
      case wb::Record::kExit:
        if (rec.exit().exit_code() != 0) {
          Record e;
          e.kind = RecordKind::event;
          e.name = event::run_end;
          e.detail = fmt::format("W&B run exited with code {} after {} s", rec.exit().exit_code(), rec.exit().runtime());
          events.push_back(std::move(e));
        }
        break;
      default: break;
    }
  }
  readers::TableSpec spec;
  spec.step_columns = {"train/global_step", "trainer/global_step", "global_step", "_step"};
  spec.t_column = "_runtime";
  spec.t_epoch_column = "_timestamp";
  spec.where = [&name](size_t off) { return at_byte(name, off); };
  std::vector<Record> out = readers::table_to_records(table, spec, name, w);
  // Failure events after the step records before them in time (they carry no step: the last one's).
  for (auto& e : events) {
    int64_t step = 0;
    for (const auto& r : out)
      if (r.kind == RecordKind::step && (!std::isfinite(e.t) || !std::isfinite(r.t) || r.t <= e.t)) step = r.step;
    e.step = step;
    auto at = std::find_if(out.begin(), out.end(), [&](const Record& r) {
      return std::isfinite(e.t) && std::isfinite(r.t) && r.t > e.t;
    });
    out.insert(at, std::move(e));
  }
  return out;
}

// The HF Trainer integration logs TrainingArguments as the run's config: max_steps is the plan.
LogFacts facts(std::string_view data) {
  LogFacts f;
  for (const auto& p : records_of(data, "", nullptr)) {
    wb::Record rec;
    if (!rec.ParseFromString(p.data) || rec.record_type_case() != wb::Record::kConfig) continue;
    for (const auto& it : rec.config().update())
      if (key_of(it.key(), it.nested_key()) == "max_steps")
        if (auto v = readers::parse_integer(it.value_json()); v && *v > 0) f.planned_steps = *v;
  }
  return f;
}

Sniff sniff(std::string_view head) {
  return head.size() >= kHeader && std::memcmp(head.data(), kMagic, 6) == 0 ? Sniff::sure : Sniff::no;
}

// A run directory (its run-*.wandb), a wandb/ directory or the directory that holds one: the newest
// run (run directories are named <offline-run|run>-<YYYYMMDD_HHMMSS>-<id>: by that time).
std::vector<std::string> locate(const std::string& dir) {
  namespace fs = std::filesystem;
  auto logs_in = [](const fs::path& d) { return files_matching(d.string(), {"*.wandb"}); };
  if (auto here = logs_in(dir); !here.empty()) return here;
  std::error_code ec;
  for (const fs::path& base : {fs::path(dir) / "wandb", fs::path(dir)}) {
    std::string best_key;
    fs::path best;
    for (const auto& e : fs::directory_iterator(base, ec)) {
      const std::string n = e.path().filename().string();
      if (!e.is_directory(ec) || n == "latest-run") continue;
      const auto dash = n.find("run-");
      if (dash == std::string::npos || (dash != 0 && n.rfind("offline-run-", 0) != 0)) continue;
      const std::string key = n.substr(dash + 4);  // YYYYMMDD_HHMMSS-<id>
      if (key > best_key && !logs_in(e.path()).empty()) best_key = key, best = e.path();
    }
    if (!best.empty()) return logs_in(best);
  }
  return {};
}

ReaderDef def() {
  ReaderDef d;
  d.name = "wandb-run";
  d.summary = "Weights & Biases run directory (wandb/offline-run-*/run-*.wandb), without the wandb package";
  d.name_hints = {"*.wandb"};
  d.sniff = sniff;
  d.parse = parse;
  d.facts = facts;
  d.locate = locate;
  d.priority = 65;
  return d;
}

}  // namespace

FLATLINE_REGISTER_READER(def());

}  // namespace flatline
