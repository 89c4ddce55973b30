#include "telemetry/async_writer.h"

#include <utility>

namespace flatline {

AsyncRecordWriter::AsyncRecordWriter(JsonlWriter& out, std::chrono::milliseconds poll,
                                     std::function<void(const Record&)> also)
    : out_(out), also_(std::move(also)), poll_(poll), thread_([this] { loop(); }) {}

AsyncRecordWriter::~AsyncRecordWriter() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;  // the writer empties the queue before it stops
  }
  wake_.notify_all();
  thread_.join();
}

void AsyncRecordWriter::rethrow_locked() {
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void AsyncRecordWriter::post(Record r) {
  std::lock_guard<std::mutex> l(mu_);
  if (sealed_) return;
  rethrow_locked();
  queue_.push_back(std::move(r));  // no notify: the writer polls (see the header)
}

void AsyncRecordWriter::drain() {
  std::unique_lock<std::mutex> l(mu_);
  if (!queue_.empty() || writing_) {
    flush_ = true;
    wake_.notify_all();
    done_.wait(l, [this] { return queue_.empty() && !writing_; });
  }
  rethrow_locked();
}

void AsyncRecordWriter::post_last(Record r) {
  std::unique_lock<std::mutex> l(mu_);
  if (sealed_) return;
  sealed_ = true;  // under the lock that post() takes: nothing posted after `r` is written
  queue_.push_back(std::move(r));
  flush_ = true;
  wake_.notify_all();
  done_.wait(l, [this] { return queue_.empty() && !writing_; });
  rethrow_locked();
}

void AsyncRecordWriter::loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    if (queue_.empty()) {
      if (stop_) return;
      wake_.wait_for(l, poll_, [this] { return stop_ || flush_; });
      continue;
    }
    Record r = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    l.unlock();
    std::exception_ptr err;
    try {
      out_.write(r);
    } catch (...) {
      err = std::current_exception();
    }
    if (also_) try {
        also_(r);
      } catch (...) {
      }
    l.lock();
    writing_ = false;
    if (err && !error_) error_ = err;
    if (queue_.empty()) {
      flush_ = false;
      done_.notify_all();
    }
  }
}

}  // namespace flatline
