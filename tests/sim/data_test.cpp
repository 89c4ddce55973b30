// Datasets from the Debian packages, and clear errors on bad files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "sim/data.h"

namespace flatline {

TEST(Data, FortunesCorpusIsEveryTextFileSortedAndSplit) {
  TextCorpus c = load_text(kDefaultTextPath, 0.05);
  ASSERT_GT(c.files.size(), 10u);
  EXPECT_TRUE(std::is_sorted(c.files.begin(), c.files.end()));
  for (const auto& f : c.files) EXPECT_EQ(std::filesystem::path(f).extension(), "");
  const double total = static_cast<double>(c.train.size() + c.eval.size());
  EXPECT_GT(total, 1e6);
  EXPECT_NEAR(static_cast<double>(c.eval.size()) / total, 0.05, 1e-6);
}

TEST(Data, FashionMnistHas60000TrainAnd10000EvalImages) {
  ImageSet s = load_fashion_mnist(kDefaultFashionMnistPath);
  EXPECT_EQ(s.train_size(), 60000);
  EXPECT_EQ(s.eval_size(), 10000);
  EXPECT_EQ(s.rows, 28);
  EXPECT_EQ(s.cols, 28);
  EXPECT_EQ(*std::max_element(s.train_labels.begin(), s.train_labels.end()), 9);
}

TEST(Data, BadIdxNamesTheFileAndByte) {
  const std::string p = (std::filesystem::temp_directory_path() / "flatline-bad.idx").string();
  std::ofstream(p, std::ios::binary) << std::string("\x00\x00\x09\x01\x00\x00\x00\x02", 8);
  std::vector<int> dims;
  try {
    read_idx(p, &dims);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(p + ": byte 0: expected IDX uint8 magic"), std::string::npos) << e.what();
  }
  std::ofstream(p, std::ios::binary) << std::string("\x00\x00\x08\x01\x00\x00\x00\x05\x01\x02", 10);
  try {
    read_idx(p, &dims);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("byte 8: expected 5 data bytes, file has 2"), std::string::npos) << e.what();
  }
}

}  // namespace flatline
