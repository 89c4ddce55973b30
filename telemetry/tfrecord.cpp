// TFRecord framing and CRC-32C (telemetry/tfrecord.h). Table-driven CRC, one byte at a time: event
// files are small, and the table is built once at compile time.
#include "telemetry/tfrecord.h"

#include <fmt/format.h>

#include <array>
#include <cstring>

namespace flatline {
namespace {

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

uint64_t le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint32_t le32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
std::string at_byte(const std::string& name, uint64_t off) { return fmt::format("{}: byte {}", name, off); }
void put_le(std::string& s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::vector<TfRecordPayload> split_tfrecords(std::string_view data, const std::string& name,
                                             std::vector<std::string>* w) {
  std::vector<TfRecordPayload> out;
  uint64_t pos = 0;
  const uint64_t size = data.size();
  while (pos < size) {
    if (size - pos < 12) {
      if (w) w->push_back(fmt::format("{}: truncated record header ({} of 12 bytes); reading stops", at_byte(name, pos), size - pos));
      break;
    }
    const uint64_t len = le64(data.data() + pos);
    if (mask_crc(crc32c(data.data() + pos, 8)) != le32(data.data() + pos + 8)) {
      if (w) w->push_back(fmt::format("{}: corrupt length CRC (not a TFRecord, or damaged); reading stops", at_byte(name, pos)));
      break;
    }
    if (len > size - pos - 12 || size - pos - 12 - len < 4) {
      if (w)
        w->push_back(fmt::format("{}: truncated record ({} data bytes announced, {} left); reading stops",
                                 at_byte(name, pos), len, size - pos - 12));
      break;
    }
    std::string_view payload = data.substr(pos + 12, len);
    if (mask_crc(crc32c(payload.data(), payload.size())) != le32(data.data() + pos + 12 + len)) {
      if (w) w->push_back(fmt::format("{}: corrupt data CRC, record skipped", at_byte(name, pos)));
    } else {
      out.push_back({pos, payload});
    }
    pos += 12 + len + 4;
  }
  return out;
}

std::string frame_tfrecord(std::string_view payload) {
  std::string s;
  put_le(s, payload.size(), 8);
  put_le(s, mask_crc(crc32c(s.data(), 8)), 4);
  s.append(payload);
  put_le(s, mask_crc(crc32c(payload.data(), payload.size())), 4);
  return s;
}

}  // namespace flatline
