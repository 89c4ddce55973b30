#include "cli/progress.h"

#include <fmt/format.h>

#include <cmath>

namespace flatline {

namespace {
std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) return fmt::format("{:.0f} s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  return fmt::format("{}h{:02d}m", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
}
}  // namespace

Progress::Progress(std::ostream& out, bool tty, int64_t total_steps) : out_(out), tty_(tty), total_(total_steps) {}

void Progress::observe(const Record& r, double now) {
  if (r.kind != RecordKind::step || r.rank < 0) return;
  if (rank_ < 0 || r.rank < rank_) rank_ = r.rank, window_.clear();
  if (r.rank != rank_) return;
  if (!window_.empty() && r.step < window_.back().second) window_.clear();  // a restart re-runs steps
  step_ = r.step;
  if (r.loss_avg && std::isfinite(*r.loss_avg)) loss_ = *r.loss_avg;
  else if (r.loss && std::isfinite(*r.loss)) loss_ = *r.loss;
  window_.emplace_back(now, r.step);
  while (window_.size() > 2 && window_.front().first < now - kRateWindowS) window_.pop_front();
  const double dt = window_.back().first - window_.front().first;
  if (dt > 0) rate_ = static_cast<double>(window_.back().second - window_.front().second) / dt;
  dirty_ = true;
  if (!tty_) {
    const int tenths = total_ > 0 ? static_cast<int>(10 * step_ / total_) : 0;
    if (tenths > tenths_) {
      tenths_ = tenths;
      out_ << "  " << text() << "\n" << std::flush;
    }
  }
}

std::string Progress::text() const {
  std::string s = fmt::format("step {}/{}", step_, total_);
  if (loss_ >= 0) s += fmt::format("  loss {:.3f}", loss_);
  if (rate_ > 0) {
    s += fmt::format("  {:.1f} steps/s", rate_);
    if (step_ < total_) s += "  ETA " + duration(static_cast<double>(total_ - step_) / rate_);
  }
  return s;
}

void Progress::draw() {
  out_ << "\r\x1b[K  " << text() << std::flush;
  shown_ = true;
  dirty_ = false;
}

void Progress::tick(double now) {
  if (!tty_ || !dirty_ || now - drawn_at_ < kRedrawS) return;
  drawn_at_ = now;
  draw();
}

void Progress::print_line(const std::string& line) {
  if (tty_ && shown_) out_ << "\r\x1b[K";
  out_ << line;
  if (line.empty() || line.back() != '\n') out_ << "\n";
  if (tty_ && shown_) draw();
  out_ << std::flush;
}

void Progress::done() {
  if (tty_ && shown_) {
    draw();
    out_ << "\n" << std::flush;
    shown_ = false;
  }
}

}  // namespace flatline
