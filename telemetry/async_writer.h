// Writes a rank's records on a background thread, in the order they were posted, so that the training
// step does not wait for the file system. Why: a write(2) of one line after a 6 ms step costs ~26 us
// on this VM's ext4 (the mtime update goes through the journal; 14 us on tmpfs; 0.6 us back to back),
// and formatting the record with cold caches another ~15 us: together ~0.6% of a 6-7 ms GPT step, the
// largest part of telemetry's cost (bench/README.md). TensorBoard's SummaryWriter and W&B also write
// off the training thread.
// Why the writer polls instead of being notified: waking a sleeping thread costs the poster ~27 us
// here (the idle vCPU must be interrupted), as much as the write it saves. So post() only queues, and
// the writer looks every `poll` (default 5 ms, under one step of the scenarios' models); drain() and
// the destructor wake it at once.
// Durability: each record is written and flushed (one line, one write) within `poll` of being posted;
// a hung step thread does not stop the writer; drain() and the destructor return once every posted
// record is on disk, so an error path drains before it reports. A kill -9 can lose the records of the
// last `poll`. A write error (disk full) is kept and rethrown by the next post() or drain().
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "telemetry/jsonl.h"
#include "telemetry/record.h"

namespace flatline {

class AsyncRecordWriter {
 public:
  // `also`: called on the writer thread with each record after it is on disk (rank 0's foreign-format
  // logs, telemetry/writers/writer.h); what it throws is dropped, it must not stop the telemetry.
  explicit AsyncRecordWriter(JsonlWriter& out, std::chrono::milliseconds poll = std::chrono::milliseconds(5),
                             std::function<void(const Record&)> also = nullptr);
  ~AsyncRecordWriter();  // drains, then stops the thread; write errors at this point are dropped
  AsyncRecordWriter(const AsyncRecordWriter&) = delete;
  AsyncRecordWriter& operator=(const AsyncRecordWriter&) = delete;

  void post(Record r);  // queues r; throws the first failed background write, if any
  void drain();         // returns once every posted record is written; throws as post()
  // Queues `r` as the last record, drains, and drops every record posted later: `r` (an `interrupted`
  // event) stays the last line on disk while the training threads run on until the process exits.
  void post_last(Record r);

 private:
  void loop();
  void rethrow_locked();
  JsonlWriter& out_;
  std::function<void(const Record&)> also_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::deque<Record> queue_;
  std::chrono::milliseconds poll_;
  bool writing_ = false, stop_ = false, flush_ = false, sealed_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace flatline
