// TFRecord framing and CRC-32C: the known check value, the mask, and every way a frame can break
// (exact messages with byte offsets).
#include <gtest/gtest.h>

#include "telemetry/tfrecord.h"

namespace flatline {
namespace {

TEST(Crc32c, KnownVector) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // Incremental == one shot.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

TEST(Crc32c, MaskMatchesTensorFlow) {
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(mask_crc(c), static_cast<uint32_t>(((c >> 15) | (c << 17)) + 0xa282ead8u));
  EXPECT_EQ(mask_crc(0), 0xa282ead8u);
}

TEST(TfRecord, RoundTripsTwoRecords) {
  std::string f = frame_tfrecord("hello") + frame_tfrecord("");
  std::vector<std::string> w;
  auto recs = split_tfrecords(f, "ev", &w);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].data, "hello");
  EXPECT_EQ(recs[0].offset, 0u);
  EXPECT_EQ(recs[1].data, "");
  EXPECT_EQ(recs[1].offset, 21u);
  EXPECT_TRUE(w.empty());
}

TEST(TfRecord, CorruptDataCrcSkipsThatRecordOnly) {
  std::string f = frame_tfrecord("aaaa") + frame_tfrecord("bbbb") + frame_tfrecord("cccc");
  f[20 + 12] ^= 0x01;  // a data byte of the second record (records are 20 bytes each)
  std::vector<std::string> w;
  auto recs = split_tfrecords(f, "ev", &w);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].data, "aaaa");
  EXPECT_EQ(recs[1].data, "cccc");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "ev: byte 20: corrupt data CRC, record skipped");
}

TEST(TfRecord, CorruptLengthCrcStopsReading) {
  std::string f = frame_tfrecord("aaaa") + frame_tfrecord("bbbb");
  f[20 + 9] ^= 0x40;
  std::vector<std::string> w;
  auto recs = split_tfrecords(f, "ev", &w);
  ASSERT_EQ(recs.size(), 1u);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "ev: byte 20: corrupt length CRC (not a TFRecord, or damaged); reading stops");
}

TEST(TfRecord, TruncatedFileKeepsCompleteRecords) {
  std::string f = frame_tfrecord("aaaa") + frame_tfrecord("bbbbbbbb");
  std::vector<std::string> w;
  auto recs = split_tfrecords(std::string_view(f).substr(0, f.size() - 3), "ev", &w);
  ASSERT_EQ(recs.size(), 1u);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "ev: byte 20: truncated record (8 data bytes announced, 9 left); reading stops");
  w.clear();
  recs = split_tfrecords(std::string_view(f).substr(0, 25), "ev", &w);
  EXPECT_EQ(recs.size(), 1u);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "ev: byte 20: truncated record header (5 of 12 bytes); reading stops");
}

TEST(TfRecord, HugeLengthIsTruncationNotAllocation) {
  std::string hdr(8, '\xff');
  uint32_t m = mask_crc(crc32c(hdr.data(), 8));
  for (int i = 0; i < 4; ++i) hdr += static_cast<char>((m >> (8 * i)) & 0xff);
  std::vector<std::string> w;
  EXPECT_TRUE(split_tfrecords(hdr + "xyz", "ev", &w).empty());
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "ev: byte 0: truncated record (18446744073709551615 data bytes announced, 3 left); reading stops");
}

}  // namespace
}  // namespace flatline
