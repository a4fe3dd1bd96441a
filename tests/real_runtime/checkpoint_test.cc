// A shard's checkpoint file: it restores exactly what was written, and a damaged or foreign file
// is refused with one error naming the file, the byte offset and what is wrong.
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "config/yaml_reader.h"
#include "core/placement.h"
#include "kernels/net.h"
#include "real_runtime/atomic_file.h"
#include "real_runtime/live_stores.h"
#include "real_runtime/worker_checkpoint.h"
#include "tests/core/test_models.h"

namespace poseidon::rt {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("poseidon-ckpt-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    model_ = core::Model::Build(testing::SmallNetSpec());
    placement_ = core::Placement::Build(model_, /*servers=*/2, /*chunk_bytes=*/256, {});
    net_ = std::make_unique<kernels::Net>(model_, kernels::Backend::kReference, 1, /*seed=*/3);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<LiveShardStore> Store(int shard) {
    auto s = std::make_unique<LiveShardStore>(*net_, placement_, shard, core::Consistency::kBsp,
                                              kernels::SgdOptions{});
    s->SetCheckpointFile((dir_ / ("shard-" + std::to_string(shard) + ".ckpt")).string());
    s->KeepPrevious();
    return s;
  }
  // One BSP clock of two workers' pushes applied to every chunk of the shard.
  void Step(LiveShardStore* s, int shard, int64_t clock) {
    for (const core::Chunk& c : placement_.chunks()) {
      if (c.shard != shard) continue;
      for (core::ActorId w : {1, 2}) {
        core::Message m;
        m.type = core::MsgType::kPushGrad;
        m.from = w;
        m.clock = clock;
        m.chunk = c.id;
        m.data = std::make_shared<const std::vector<float>>(static_cast<size_t>(c.count),
                                                            0.01f * static_cast<float>(w + clock));
        s->Accumulate(c, m);
      }
      s->Apply(c, clock, 2);
    }
  }
  core::ShardCheckpoint State(int shard, int64_t version) {
    core::ShardCheckpoint st;
    st.floor = version;
    for (int32_t cid : placement_.chunks_of_shard(shard)) st.chunks.push_back({cid, version, {}});
    return st;
  }
  std::string LoadError(int shard) {
    try {
      Store(shard)->LoadCheckpoint();
    } catch (const config::ConfigError& e) {
      return e.what();
    }
    return "";
  }
  std::string File(int shard) { return (dir_ / ("shard-" + std::to_string(shard) + ".ckpt")).string(); }

  fs::path dir_;
  core::Model model_;
  core::Placement placement_;
  std::unique_ptr<kernels::Net> net_;
};

TEST_F(CheckpointTest, RestoresValuesMomentumAndStateExactly) {
  auto a = Store(0);
  for (int64_t c = 0; c < 3; ++c) Step(a.get(), 0, c);
  a->Checkpoint(State(0, 3));
  EXPECT_FALSE(fs::exists(File(0) + ".tmp"));
  auto b = Store(0);
  const core::ShardCheckpoint st = b->LoadCheckpoint();
  EXPECT_EQ(st.floor, 3);
  ASSERT_FALSE(st.chunks.empty());
  for (const core::ChunkProgress& p : st.chunks) EXPECT_EQ(p.version, 3);
  // The next step from the restored store equals the next step of the original (momentum too).
  Step(a.get(), 0, 3);
  Step(b.get(), 0, 3);
  for (int32_t cid : placement_.chunks_of_shard(0)) {
    EXPECT_EQ(a->values(cid), b->values(cid)) << "chunk " << cid;
    const core::Chunk& c = placement_.chunks()[static_cast<size_t>(cid)];
    EXPECT_EQ(*a->ReadPrevious(c), *b->ReadPrevious(c));
  }
}

TEST_F(CheckpointTest, ACorruptTruncatedOrForeignFileIsRefusedWithFileAndOffset) {
  EXPECT_NE(LoadError(0).find("cannot read the shard's checkpoint"), std::string::npos);
  auto a = Store(0);
  Step(a.get(), 0, 0);
  a->Checkpoint(State(0, 1));
  std::string bytes;
  {
    std::ifstream f(File(0), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto write = [&](const std::string& b) { std::ofstream(File(0), std::ios::binary) << b; };
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x40;
  write(flipped);
  std::string e = LoadError(0);
  EXPECT_NE(e.find(File(0)), std::string::npos) << e;
  EXPECT_NE(e.find("CRC-32 mismatch"), std::string::npos) << e;
  EXPECT_NE(e.find("byte offset"), std::string::npos) << e;
  write(bytes.substr(0, 20));
  EXPECT_NE(LoadError(0).find("truncated"), std::string::npos);
  // Shard 0's file given to shard 1.
  write(bytes);
  fs::copy_file(File(0), File(1), fs::copy_options::overwrite_existing);
  EXPECT_NE(LoadError(1).find("written by shard 0, this is shard 1"), std::string::npos) << LoadError(1);
  EXPECT_EQ(LoadError(0), "");
}

// A full disk (the temporary file is /dev/full, whose writes fail with ENOSPC) is a permanent
// error: StorageError names the file, the system error and what to do, and leaves no partial
// file behind. A restart would fail the same way, so the live job stops (exit code 5).
TEST(WriteFileAtomically, AFullDiskIsAPermanentErrorNamingThePath) {
  const fs::path dir = fs::temp_directory_path() / ("poseidon-full-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "shard-0.ckpt").string();
  fs::create_symlink("/dev/full", path + ".tmp");
  try {
    WriteFileAtomically(path, std::string(1 << 16, 'x'));
    ADD_FAILURE() << "no error on a full disk";
  } catch (const StorageError& e) {
    EXPECT_TRUE(e.permanent());
    EXPECT_EQ(e.error_number(), ENOSPC);
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path + ".tmp: error: cannot write: No space left on device; free space on "
                       "the disk of the folder " + dir.string()),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("restarting the process would fail the same way"), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(fs::symlink_status(path + ".tmp"))) << "a partial file was left";
  EXPECT_FALSE(fs::exists(path));
  // Written again once there is room: the file appears whole.
  WriteFileAtomically(path, "abc");
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "abc");
  EXPECT_TRUE(StorageError::IsPermanent(EROFS));
  EXPECT_TRUE(StorageError::IsPermanent(EACCES));
  EXPECT_FALSE(StorageError::IsPermanent(EIO));
  fs::remove_all(dir);
}

// A worker's own checkpoint (its next batch and data stream): what is written reads back; a
// truncated, altered or foreign file reads as nothing (the worker then reads its data from the
// start and skips to its clock).
TEST(WorkerCheckpoint, RoundTripsAndRefusesDamage) {
  const std::string b = EncodeWorkerCheckpoint({42, std::string("stream\0state", 12)});
  const std::optional<WorkerCheckpoint> c = DecodeWorkerCheckpoint(b);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->next_batch, 42);
  EXPECT_EQ(c->stream_state, std::string("stream\0state", 12));
  EXPECT_FALSE(DecodeWorkerCheckpoint(b.substr(0, b.size() - 1)));
  for (size_t i : {size_t{0}, size_t{5}, size_t{9}, size_t{17}, size_t{26}, b.size() - 1}) {
    std::string bad = b;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    EXPECT_FALSE(DecodeWorkerCheckpoint(bad)) << "byte " << i;
  }
  EXPECT_FALSE(DecodeWorkerCheckpoint("PSWK"));
}

}  // namespace
}  // namespace poseidon::rt
