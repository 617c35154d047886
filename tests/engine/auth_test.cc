// Authentication end to end, against a real Receiver on loopback: matching
// keys transfer; a missing, different, forged or replayed proof is refused
// with a clear error before the connection is admitted, so it never gets a
// thread or a byte of a region.
#include "proto/auth.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "channels/transport.h"
#include "engine/control.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/handshake.h"
#include "proto/wire.h"
#include "ramferry/auth_key.h"
#include "tests/support/fake_source.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_support.h"
#include "tests/support/transport_selection.h"

namespace ramferry {
namespace {

using ::ramferry::testing::StatusIs;
using testing::AllZero;
using ::testing::Contains;
using testing::FakeSource;
using ::testing::HasSubstr;
using testing::LoopbackPair;
using testing::MakeRegion;
using testing::ServingReceiver;

const std::string kKey = "correct horse battery staple 42!";
const std::string kOtherKey = "correct horse battery staple 43!";
constexpr uint64_t kBytes = 4 << 20;

// An empty `key`: an end that runs without one, as it must ask to.
SessionOptions Keyed(const std::string& key) {
  SessionOptions o;
  o.auth_key = key;
  o.insecure = key.empty();
  o.handshake_timeout = absl::Seconds(5);
  o.connect_timeout = absl::Seconds(5);
  return o;
}

// A destination that admits FakeSource's sessions, which prove the key but
// write an unsealed stream.
SessionOptions KeyedUnsealed(const std::string& key) {
  SessionOptions o = Keyed(key);
  o.protect = Protection::kNone;
  return o;
}

// rdma where it runs (in tests/rdma_vm; rdma_keyed_test covers it there).
TEST(AuthTest, MatchingKeysTransferOnEveryTransport) {
  for (TransportKind kind :
       testing::TransportsWith(channels::kCapAuthenticatedHello)) {
    if (kind == TransportKind::kRdma &&
        !testing::WhyUnavailable(kind).empty()) {
      continue;
    }
    SessionOptions o = Keyed(kKey);
    o.transport = kind;
    o.fallback_to_tcp_zerocopy = true;
    testing::UseTransportHost(o);
    LoopbackPair pair(kBytes, 7, o);
    ASSERT_NE(pair.sender, nullptr) << TransportKindName(kind);
    ASSERT_OK(pair.SendEverything());
    ASSERT_OK(pair.sender->Finish());
    ASSERT_OK(pair.rx->result());
    EXPECT_TRUE(testing::SameBytes(pair.src.region, pair.dst.region));
    EXPECT_EQ(pair.rx->receiver().stats().auth_failures, 0u);
  }
}

struct Mismatch {
  std::string source_key, destination_key;
  std::string source_says;
};

TEST(AuthTest, MismatchedKeysAreRefusedOnBothSides) {
  for (const Mismatch& m : {
           Mismatch{"", kKey, "destination requires authentication"},
           Mismatch{kKey, "", "destination has no key"},
           Mismatch{kKey, kOtherKey,
                    "destination failed to prove it holds the key"},
       }) {
    testing::TestRegion src = MakeRegion(1, kBytes, 3, /*fill=*/true);
    testing::TestRegion dst = MakeRegion(1, kBytes);
    ServingReceiver rx(Keyed(m.destination_key), {dst.region});
    SessionOptions o = Keyed(m.source_key);
    o.port = rx.port();
    ASSERT_THAT(
        Sender::Connect(o, {&src.region, 1}),
        StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr(m.source_says)));
    // The destination never opened a session: it still waits, untouched.
    EXPECT_FALSE(rx.done());
    EXPECT_EQ(rx.receiver().applied_rounds(), 0u);
    EXPECT_TRUE(AllZero(dst.region));
    // Counted once the destination's side of the handshake has ended.
    const absl::Time give_up = absl::Now() + absl::Seconds(5);
    while (rx.receiver().stats().connections_refused == 0 &&
           absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_GE(rx.receiver().stats().connections_refused, 1u) << m.source_says;
    rx.receiver().Abort(absl::CancelledError("test over"));
    EXPECT_THAT(rx.result(),
                StatusIs(absl::StatusCode::kCancelled, HasSubstr("test over")));
  }
}

// A hand-driven handshake, to forge and replay proofs.
class RawHandshake {
 public:
  RawHandshake(uint16_t port, const proto::Hello& hello) {
    absl::StatusOr<int> fd =
        channels::ConnectWithRetry("127.0.0.1", port, absl::Seconds(5));
    EXPECT_OK(fd);
    fd_ = fd.ok() ? *fd : -1;
    proto::EncodeHello(hello, absl::MakeSpan(hello_));
  }
  ~RawHandshake() {
    if (fd_ >= 0) close(fd_);
  }
  absl::StatusOr<proto::AuthChallenge> SendHello() {
    if (auto s = channels::WriteWithDeadline(fd_, hello_, Deadline());
        !s.ok()) {
      return s;
    }
    uint8_t in[proto::kAuthChallengeBytes];
    if (auto s =
            channels::ReadWithDeadline(fd_, absl::MakeSpan(in), Deadline());
        !s.ok()) {
      return s;
    }
    return proto::DecodeAuthChallenge(in);
  }
  proto::AuthMac ProofFor(const std::string& key,
                          const proto::AuthNonce& nonce) const {
    return proto::ComputeAuthMac(key, proto::AuthSide::kSource, hello_, nonce);
  }
  absl::Status SendProof(const proto::AuthMac& mac) {
    uint8_t out[proto::kAuthProofBytes];
    proto::EncodeAuthProof({mac}, absl::MakeSpan(out));
    if (auto s = channels::WriteWithDeadline(fd_, out, Deadline()); !s.ok()) {
      return s;
    }
    uint8_t in[proto::kHelloReplyBytes];
    if (auto s =
            channels::ReadWithDeadline(fd_, absl::MakeSpan(in), Deadline());
        !s.ok()) {
      return s;
    }
    RAMFERRY_ASSIGN_OR_RETURN(proto::HelloReply reply,
                              proto::DecodeHelloReply(in));
    return proto::HelloReplyStatus(reply);
  }

 private:
  static absl::Time Deadline() { return absl::Now() + absl::Seconds(5); }
  int fd_ = -1;
  uint8_t hello_[proto::kHelloBytes];
};

proto::Hello AuthHello(const FakeSource& fake, proto::Role role,
                       uint32_t index) {
  proto::Hello h = fake.MakeHello(role, index);
  h.auth = proto::kAuthHmacSha256;
  return h;
}

TEST(AuthTest, ForgedProofIsRefusedBeforeAdmission) {
  testing::TestRegion dst = MakeRegion(1, kBytes);
  ServingReceiver rx(KeyedUnsealed(kKey), {dst.region});
  FakeSource fake(rx.port(), 1);
  RawHandshake raw(rx.port(), AuthHello(fake, proto::Role::kControl, 0));
  absl::StatusOr<proto::AuthChallenge> challenge = raw.SendHello();
  ASSERT_OK(challenge);
  // The destination proved itself: its proof verifies with the real key.
  // The forger's proof is made with another key.
  absl::Status s = raw.SendProof(raw.ProofFor(kOtherKey, challenge->nonce));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(s.message(), HasSubstr("authentication failed"));
  EXPECT_EQ(rx.receiver().stats().auth_failures, 1u);
  // No session was opened: an honest source with the key still gets in.
  fake.set_key(kKey);
  EXPECT_OK(fake.OpenControl({{1, 4096, kBytes, "region-1"}}));
  rx.receiver().Abort(absl::CancelledError("test over"));
  EXPECT_THAT(rx.result(),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("test over")));
  EXPECT_TRUE(AllZero(dst.region));
}

TEST(AuthTest, ReplayedProofFailsOnANewConnection) {
  testing::TestRegion dst = MakeRegion(1, kBytes);
  ServingReceiver rx(KeyedUnsealed(kKey), {dst.region});
  FakeSource fake(rx.port(), 2);
  fake.set_key(kKey);
  ASSERT_OK(fake.OpenControl({{1, 4096, kBytes, "region-1"}}));

  // Channel 0, honestly: recorded by an eavesdropper.
  const proto::Hello hello = AuthHello(fake, proto::Role::kData, 0);
  proto::AuthMac recorded;
  {
    RawHandshake first(rx.port(), hello);
    absl::StatusOr<proto::AuthChallenge> c = first.SendHello();
    ASSERT_OK(c);
    recorded = first.ProofFor(kKey, c->nonce);
    ASSERT_OK(first.SendProof(recorded));
  }
  // The same Hello and proof on a new connection meet a new nonce.
  RawHandshake replay(rx.port(), hello);
  absl::StatusOr<proto::AuthChallenge> c = replay.SendHello();
  ASSERT_OK(c);
  absl::Status s = replay.SendProof(recorded);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(s.message(), HasSubstr("authentication failed"));
  EXPECT_EQ(rx.receiver().stats().auth_failures, 1u);
  rx.receiver().Abort(absl::CancelledError("test over"));
  EXPECT_THAT(rx.result(),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("test over")));
}

TEST(AuthTest, AuthenticatedButCrossSessionChannelIsRefused) {
  testing::TestRegion dst = MakeRegion(1, kBytes);
  ServingReceiver rx(KeyedUnsealed(kKey), {dst.region});
  FakeSource fake(rx.port(), 1);
  fake.set_key(kKey);
  ASSERT_OK(fake.OpenControl({{1, 4096, kBytes, "region-1"}}));
  // The key is right, the session is another one.
  FakeSource other(rx.port(), 1);
  other.set_key(kKey);
  ASSERT_THAT(other.Connect(other.MakeHello(proto::Role::kData, 0)),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("not the active session")));
  rx.receiver().Abort(absl::CancelledError("test over"));
  EXPECT_THAT(rx.result(),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("test over")));
}

// rdma proves a key too (split between its accept and its first SEND;
// rdma_keyed_test runs it in tests/rdma_vm).
TEST(AuthTest, RdmaTakesAKey) {
  SessionOptions o = Keyed(kKey);
  o.transport = TransportKind::kRdma;
  EXPECT_OK(ValidateOptions(o));
  EXPECT_TRUE(TransportAuthenticates(TransportKind::kRdma));
}

TEST(AuthTest, OptionsRefuseAShortKey) {
  absl::Status s = ValidateOptions(Keyed("short"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("5 bytes"));
}

class KeyFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& contents, mode_t mode) {
    std::string path = ::testing::TempDir() + "/ramferry-key-" +
                       std::to_string(getpid()) + "-" +
                       std::to_string(counter_++);
    std::ofstream(path, std::ios::binary) << contents;
    chmod(path.c_str(), mode);
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const std::string& p : paths_) std::remove(p.c_str());
  }
  int counter_ = 0;
  std::vector<std::string> paths_;
};

TEST_F(KeyFileTest, ReadsTheKeyWithoutItsTrailingNewline) {
  absl::StatusOr<std::string> k = ReadAuthKeyFile(Write(kKey + "\n", 0600));
  ASSERT_OK(k);
  EXPECT_EQ(*k, kKey);
  std::string binary(32, '\0');
  for (int i = 0; i < 32; ++i) binary[i] = static_cast<char>(i * 37);
  k = ReadAuthKeyFile(Write(binary, 0400));
  ASSERT_OK(k);
  EXPECT_EQ(*k, binary);
}

TEST_F(KeyFileTest, RefusesAKeyOthersCanRead) {
  const std::string path = Write(kKey, 0644);
  absl::StatusOr<std::string> k = ReadAuthKeyFile(path);
  EXPECT_EQ(k.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(k.status().message(), HasSubstr("chmod 600 " + path));
}

TEST_F(KeyFileTest, RefusesShortLongMissingAndNonRegular) {
  EXPECT_THAT(ReadAuthKeyFile(Write("tiny", 0600)).status().message(),
              HasSubstr("4 bytes"));
  EXPECT_THAT(
      ReadAuthKeyFile(Write(std::string(5000, 'k'), 0600)).status().message(),
      HasSubstr("must be 16 to 1024"));
  EXPECT_EQ(ReadAuthKeyFile("/nonexistent/key").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(ReadAuthKeyFile("/dev/null").status().message(),
              HasSubstr("not a regular file"));
}

}  // namespace
}  // namespace ramferry
