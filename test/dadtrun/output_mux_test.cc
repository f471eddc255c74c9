#include "dadtrun/output_mux.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace dadt {
namespace dadtrun {
namespace {

using std::chrono::milliseconds;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base ? base : "/tmp") + "/" + name;
  return dir;
}

void Write(int fd, const std::string& s) { ASSERT_EQ(::write(fd, s.data(), s.size()), (ssize_t)s.size()); }

// Captures what the mux prints: its stdout and stderr go to files.
class OutputMuxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_path_ = TempDir("mux_stdout_" + std::to_string(::getpid()));
    err_path_ = TempDir("mux_stderr_" + std::to_string(::getpid()));
    out_fd_ = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    err_fd_ = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(out_fd_, 0);
    ASSERT_GE(err_fd_, 0);
  }
  void TearDown() override {
    ::close(out_fd_);
    ::close(err_fd_);
  }

  // Two pipes for one rank: returns the write ends, hands the read ends to `mux`.
  void AddRank(OutputMux* mux, int rank, int* out_w, int* err_w) {
    int out[2], err[2];
    ASSERT_EQ(::pipe(out), 0);
    ASSERT_EQ(::pipe(err), 0);
    mux->AddRank(rank, out[0], err[0]);
    *out_w = out[1];
    *err_w = err[1];
  }

  std::unique_ptr<OutputMux> Make(const std::string& output_dir = "", int ranks = 2) {
    OutputMux::Options o;
    o.stdout_fd = out_fd_;
    o.stderr_fd = err_fd_;
    o.output_dir = output_dir;
    auto mux = OutputMux::Create(o, ranks);
    EXPECT_TRUE(mux.ok()) << mux.status().ToString();
    return std::move(*mux);
  }

  std::string out_path_, err_path_;
  int out_fd_ = -1, err_fd_ = -1;
};

TEST_F(OutputMuxTest, PrefixesEveryLineWithRankAndStream) {
  auto mux = Make();
  int o0, e0, o1, e1;
  AddRank(mux.get(), 0, &o0, &e0);
  AddRank(mux.get(), 1, &o1, &e1);
  ASSERT_TRUE(mux->Start().ok());
  Write(o0, "hello\nworld\n");
  Write(e1, "warn\n");
  Write(o1, "pa");
  std::this_thread::sleep_for(milliseconds(20));
  Write(o1, "rt\nno newline at end");
  for (int fd : {o0, e0, o1, e1}) ::close(fd);
  ASSERT_TRUE(mux->WaitDrained(milliseconds(5000)));
  mux->Stop();
  const std::string out = ReadFile(out_path_);
  EXPECT_NE(out.find("[0]<stdout>:hello\n[0]<stdout>:world\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[1]<stdout>:part\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[1]<stdout>:no newline at end\n"), std::string::npos) << out;
  EXPECT_EQ(ReadFile(err_path_), "[1]<stderr>:warn\n");
}

TEST_F(OutputMuxTest, LabelStandsInForTheRank) {
  auto mux = Make("", 0);
  int out[2], err[2];
  ASSERT_EQ(::pipe(out), 0);
  ASSERT_EQ(::pipe(err), 0);
  mux->AddRank(0, out[0], err[0], "h1/0/3");  // an elastic worker's id
  ASSERT_TRUE(mux->Start().ok());
  Write(out[1], "hello\n");
  Write(err[1], "warn\n");
  ::close(out[1]);
  ::close(err[1]);
  ASSERT_TRUE(mux->WaitDrained(milliseconds(5000)));
  mux->Stop();
  EXPECT_EQ(ReadFile(out_path_), "[h1/0/3]<stdout>:hello\n");
  EXPECT_EQ(ReadFile(err_path_), "[h1/0/3]<stderr>:warn\n");
}

TEST_F(OutputMuxTest, LinesFromManyWritersNeverInterleave) {
  auto mux = Make("", 4);
  int out_w[4], err_w[4];
  for (int r = 0; r < 4; ++r) AddRank(mux.get(), r, &out_w[r], &err_w[r]);
  ASSERT_TRUE(mux->Start().ok());
  std::vector<std::thread> writers;
  for (int r = 0; r < 4; ++r) {
    writers.emplace_back([fd = out_w[r], r] {
      const std::string line = std::string(300, static_cast<char>('a' + r)) + "\n";
      // Written in odd-sized pieces so that reads split lines.
      std::string all;
      for (int i = 0; i < 200; ++i) all += line;
      for (size_t pos = 0; pos < all.size(); pos += 777) {
        std::string piece = all.substr(pos, 777);
        ssize_t ignored = ::write(fd, piece.data(), piece.size());
        (void)ignored;
      }
      ::close(fd);
    });
  }
  for (auto& t : writers) t.join();
  for (int r = 0; r < 4; ++r) ::close(err_w[r]);
  ASSERT_TRUE(mux->WaitDrained(milliseconds(5000)));
  mux->Stop();
  std::istringstream lines(ReadFile(out_path_));
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    ++count;
    ASSERT_EQ(line.size(), 12u + 300u) << line.substr(0, 40);
    const int rank = line[1] - '0';
    EXPECT_EQ(line.substr(0, 12), "[" + std::to_string(rank) + "]<stdout>:");
    EXPECT_EQ(line.substr(12), std::string(300, static_cast<char>('a' + rank)));
  }
  EXPECT_EQ(count, 800);
}

TEST_F(OutputMuxTest, WritesRawCopiesToTheOutputDirectory) {
  const std::string dir = TempDir("mux_files/nested");
  auto mux = Make(dir);
  int o0, e0, o1, e1;
  AddRank(mux.get(), 0, &o0, &e0);
  AddRank(mux.get(), 1, &o1, &e1);
  ASSERT_TRUE(mux->Start().ok());
  Write(o0, "zero out\n");
  Write(e0, "zero err");
  Write(o1, "one out\n");
  for (int fd : {o0, e0, o1, e1}) ::close(fd);
  ASSERT_TRUE(mux->WaitDrained(milliseconds(5000)));
  mux->Stop();
  EXPECT_EQ(ReadFile(dir + "/rank.0/stdout"), "zero out\n");
  EXPECT_EQ(ReadFile(dir + "/rank.0/stderr"), "zero err");
  EXPECT_EQ(ReadFile(dir + "/rank.1/stdout"), "one out\n");
  EXPECT_EQ(ReadFile(dir + "/rank.1/stderr"), "");
}

TEST_F(OutputMuxTest, BadOutputDirectoryIsReportedUpFront) {
  const std::string file = TempDir("mux_not_a_dir");
  std::ofstream(file) << "x";
  OutputMux::Options o;
  o.output_dir = file;
  auto mux = OutputMux::Create(o, 1);
  ASSERT_FALSE(mux.ok());
  EXPECT_NE(mux.status().message().find("--output-filename"), std::string::npos);
}

TEST_F(OutputMuxTest, StopDrainsWhatIsBufferedEvenIfWritersStayOpen) {
  auto mux = Make();
  int o0, e0;
  AddRank(mux.get(), 0, &o0, &e0);
  Write(o0, "before start\nhalf");  // sits in the pipe until the thread runs
  ASSERT_TRUE(mux->Start().ok());
  EXPECT_FALSE(mux->WaitDrained(milliseconds(50)));  // writers still open
  mux->Stop();
  EXPECT_EQ(ReadFile(out_path_), "[0]<stdout>:before start\n[0]<stdout>:half\n");
  ::close(o0);
  ::close(e0);
}

TEST_F(OutputMuxTest, VeryLongLinesAreSplitNotHeldForever) {
  auto mux = Make("", 1);
  int o0, e0;
  AddRank(mux.get(), 0, &o0, &e0);
  ASSERT_TRUE(mux->Start().ok());
  std::thread writer([o0] {
    std::string big(200 * 1024, 'x');
    ssize_t ignored = ::write(o0, big.data(), big.size());
    (void)ignored;
    ::close(o0);
  });
  writer.join();
  ::close(e0);
  ASSERT_TRUE(mux->WaitDrained(milliseconds(5000)));
  mux->Stop();
  const std::string out = ReadFile(out_path_);
  size_t xs = 0;
  for (char c : out) xs += c == 'x';
  EXPECT_EQ(xs, 200u * 1024);
  EXPECT_GE(std::count(out.begin(), out.end(), '\n'), 3);
}

}  // namespace
}  // namespace dadtrun
}  // namespace dadt
