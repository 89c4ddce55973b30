// TFRecord framing (tensorflow/core/lib/io/record_writer.cc, RecordWriter::WriteRecord), the container
// of TensorBoard event files, which the TensorBoard writer (telemetry/writers/tensorboard.cpp) and
// reader (readers/tensorboard.cpp) both stand on:
//   uint64 length (little endian) | uint32 masked_crc32c(length bytes) | data[length] | uint32 masked_crc32c(data)
// masked_crc(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8, crc = CRC-32C (Castagnoli, reflected
// polynomial 0x82F63B78), the same as crc32c.h in tensorflow/tsl/lib/hash.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flatline {

uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);  // crc32c("123456789") = 0xE3069283
uint32_t mask_crc(uint32_t crc);

struct TfRecordPayload {
  uint64_t offset = 0;     // byte offset of the record header in the file
  std::string_view data;
};

// Splits a file into records. A bad length CRC ends reading (the framing is lost: nothing after it
// can be trusted); a bad data CRC skips that record; a record cut short (truncated file) ends reading.
// Each is a warning "name: byte N: ...". Oversized lengths (> the rest of the file) count as truncated.
std::vector<TfRecordPayload> split_tfrecords(std::string_view data, const std::string& name,
                                             std::vector<std::string>* warnings);

// Frames `payload` as one TFRecord (for tests and fixtures).
std::string frame_tfrecord(std::string_view payload);

}  // namespace flatline
