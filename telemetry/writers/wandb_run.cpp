// A Weights & Biases offline run as the client writes it while the job runs, for a run logged by the
// Hugging Face integration (transformers/integrations/integration_utils.py, WandbCallback: keys as
// rewrite_logs() makes them): wandb/offline-run-<YYYYMMDD_HHMMSS>-<id>/run-<id>.wandb, its transaction
// log, appended record by record (what `wandb sync` uploads later, and what a watcher tails).
// Framing, as readers/wandb_run.cpp reads it (wandb/wandb wandb/sdk/internal/datastore.py): a 7-byte
// header ":W&B", 0xBEE1 little endian, version 0; then LevelDB's log format (google/leveldb
// doc/log_format.md) in 32 KiB blocks counted from the file's start: chunks of uint32 CRC-32 (IEEE,
// zlib's crc32 of the type byte and the data) | uint16 length | uint8 type (FULL 1, FIRST 2, MIDDLE 3,
// LAST 4) | data, a block's last < 7 bytes zero. Each record a wandb_internal.Record (wandb/proto/
// wandb_internal.proto; the subset in readers/wandb_run.proto), encoded here by hand (protobuf's wire
// format: varint keys, length-delimited strings and messages).
// Records: a RunRecord (run_id, start_time) and a ConfigRecord (max_steps, as the integration logs
// TrainingArguments) first; then a HistoryRecord every `every` steps (train/loss the interval's mean
// rounded to 4 places as HF's Trainer.log, train/learning_rate, train/grad_norm, train/epoch,
// train/global_step, and the client's _step, _runtime, _timestamp) and one per eval (eval/loss); at
// run_end a RunExitRecord (exit code 0). A resumed process appends to the same log (its _step counts
// from 0 again, as a wandb.init without resume= does; train/global_step carries the step).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "telemetry/writers/writer.h"

namespace flatline {
namespace {

constexpr size_t kBlock = 32768, kChunkHeader = 7;
constexpr unsigned char kMagic[7] = {':', 'W', '&', 'B', 0xE1, 0xBE, 0x00};

// protobuf wire format
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) out += static_cast<char>((v & 0x7f) | 0x80), v >>= 7;
  out += static_cast<char>(v);
}
void key(std::string& out, int field, int wire) { varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire)); }
void int_field(std::string& out, int field, int64_t v) {
  key(out, field, 0);
  varint(out, static_cast<uint64_t>(v));
}
void bytes_field(std::string& out, int field, const std::string& v) {
  key(out, field, 2);
  varint(out, v.size());
  out += v;
}

// A number as the client's JSON encoder writes it (json.dumps: NaN, Infinity, -Infinity; else repr).
std::string json_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return writers::python_float(v);
}

class WandbRunWriter : public FormatWriter {
 public:
  explicit WandbRunWriter(const FormatContext& c) : c_(c) {
    namespace fs = std::filesystem;
    const std::string id = fmt::format("{:08x}", static_cast<uint32_t>(std::hash<std::string>{}(c.run_dir)));
    std::string when = writers::utc_time(c.wall_t0, false);  // "YYYY-MM-DD HH:MM:SS"
    std::string stamp;
    for (char ch : when) stamp += ch == ' ' ? '_' : ch == '-' || ch == ':' ? '\0' : ch;
    stamp.erase(std::remove(stamp.begin(), stamp.end(), '\0'), stamp.end());
    const std::string rel = fmt::format("wandb/offline-run-{}-{}/run-{}.wandb", stamp, id, id);
    path_ = writers::log_file(c, "wandb-run", rel);
    fs::create_directories(fs::path(path_).parent_path());
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error(path_ + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw std::runtime_error(path_ + ": cannot stat: " + std::strerror(errno));
    pos_ = static_cast<uint64_t>(st.st_size);
    if (pos_ == 0) {  // a new log: the header, the run and its config
      append(std::string(reinterpret_cast<const char*>(kMagic), sizeof kMagic));
      std::string run, start;
      bytes_field(run, 1, id);                                          // RunRecord.run_id
      int_field(start, 1, static_cast<int64_t>(std::floor(c.wall_t0)));  // Timestamp.seconds
      bytes_field(run, 17, start);                                      // RunRecord.start_time
      record(17, run);
      std::string config, item;
      bytes_field(item, 1, "max_steps");
      bytes_field(item, 16, std::to_string(c.train_iters));
      bytes_field(config, 1, item);  // ConfigRecord.update
      record(5, config);
    }
  }
  ~WandbRunWriter() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void write(const Record& r) override {
    const double t = std::isfinite(r.t) ? r.t : 0;
    if (r.kind == RecordKind::eval && r.eval_loss) {
      history({{"eval/loss", json_float(*r.eval_loss)}, {"train/epoch", json_float(epoch_)},
               {"train/global_step", std::to_string(r.step)}},
              t);
    } else if (r.kind == RecordKind::step) {
      loss_.add(r);
      if (r.epoch) epoch_ = static_cast<double>(*r.epoch);
      if (r.step % c_.every != 0) return;
      std::vector<std::pair<std::string, std::string>> items;
      if (auto l = loss_.take()) items.emplace_back("train/loss", json_float(std::round(*l * 1e4) / 1e4));
      if (r.grad_norm) items.emplace_back("train/grad_norm", json_float(*r.grad_norm));
      if (r.lr) items.emplace_back("train/learning_rate", json_float(*r.lr));
      items.emplace_back("train/epoch", json_float(epoch_));
      items.emplace_back("train/global_step", std::to_string(r.step));
      history(items, t);
    } else if (r.kind == RecordKind::event && r.name == event::run_end) {
      std::string exit;
      int_field(exit, 1, 0);                                   // RunExitRecord.exit_code
      int_field(exit, 2, static_cast<int64_t>(std::round(t)));  // .runtime (s)
      record(18, exit);
    }
  }

 private:
  void history(const std::vector<std::pair<std::string, std::string>>& items, double t) {
    std::string h;
    auto item = [&h](const std::string& k, const std::string& v) {
      std::string i;
      bytes_field(i, 1, k);   // HistoryItem.key
      bytes_field(i, 16, v);  // .value_json
      bytes_field(h, 1, i);   // HistoryRecord.item
    };
    for (const auto& [k, v] : items) item(k, v);
    item("_step", std::to_string(row_));
    item("_runtime", json_float(t));
    item("_timestamp", json_float(c_.wall_t0 + t));
    std::string step;
    int_field(step, 1, row_);  // HistoryStep.num
    bytes_field(h, 2, step);
    record(2, h);
    ++row_;
  }

  // One Record {num, <field>: payload}, framed in chunks.
  void record(int field, const std::string& payload) {
    std::string rec;
    int_field(rec, 1, ++num_);
    bytes_field(rec, field, payload);
    std::string out;
    size_t at = 0;
    bool first = true;
    do {
      size_t left = kBlock - (pos_ + out.size()) % kBlock;
      if (left < kChunkHeader) {  // pad the block's tail
        out.append(left, '\0');
        left = kBlock;
      }
      const size_t n = std::min(rec.size() - at, left - kChunkHeader);
      const bool last = at + n == rec.size();
      const unsigned char type = first && last ? 1 : first ? 2 : last ? 4 : 3;
      uLong crc = ::crc32(0L, &type, 1);
      crc = ::crc32(crc, reinterpret_cast<const Bytef*>(rec.data() + at), static_cast<uInt>(n));
      for (int b = 0; b < 4; ++b) out += static_cast<char>((crc >> (8 * b)) & 0xff);
      out += static_cast<char>(n & 0xff);
      out += static_cast<char>((n >> 8) & 0xff);
      out += static_cast<char>(type);
      out.append(rec, at, n);
      at += n;
      first = false;
    } while (at < rec.size());
    append(out);
  }

  void append(const std::string& bytes) {  // one write: a watcher never sees half a chunk it can misread
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n != static_cast<ssize_t>(bytes.size()))
      throw std::runtime_error(path_ + ": write failed: " + std::strerror(n < 0 ? errno : ENOSPC));
    pos_ += bytes.size();
  }

  FormatContext c_;
  std::string path_;
  int fd_ = -1;
  uint64_t pos_ = 0;
  int64_t num_ = 0, row_ = 0;
  double epoch_ = 0;
  writers::IntervalLoss loss_;
};

}  // namespace

std::unique_ptr<FormatWriter> make_wandb_run_writer(const FormatContext& c) { return std::make_unique<WandbRunWriter>(c); }

}  // namespace flatline
