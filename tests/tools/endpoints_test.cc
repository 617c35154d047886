// Addresses on the command line (tools/common/endpoints.h) and the
// per-link summary of a session's channels (tools/common/link_summary.h).
#include "tools/common/endpoints.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tools/common/link_summary.h"

namespace ramferry::cli {
namespace {

using ::testing::HasSubstr;

TEST(EndpointsTest, HostPortTakesIpv6InBracketsAndListenersPortZero) {
  absl::StatusOr<Endpoint> e = ParseHostPort("10.0.0.2:7070");
  ASSERT_OK(e);
  EXPECT_EQ(e->host, "10.0.0.2");
  EXPECT_EQ(e->port, 7070);
  e = ParseHostPort("[fd00::2]:7070");
  ASSERT_OK(e);
  EXPECT_EQ(e->host, "fd00::2");
  EXPECT_EQ(ParseHostPort("0.0.0.0:0")->port, 0);
  for (const char* bad : {"host", ":7070", "h:70000", "h:x", "h:"}) {
    EXPECT_THAT(ParseHostPort(bad).status().message(),
                HasSubstr("is not HOST:PORT"))
        << bad;
  }
}

TEST(EndpointsTest, AListNamesItsBadItem) {
  absl::StatusOr<std::vector<Endpoint>> l =
      ParseEndpointList("10.0.0.2:7070, 10.0.1.2:7071");
  ASSERT_OK(l);
  ASSERT_EQ(l->size(), 2u);
  EXPECT_EQ((*l)[1].host, "10.0.1.2");
  EXPECT_EQ((*l)[1].port, 7071);
  EXPECT_THAT(ParseEndpointList("a:1,b:2,c").status().message(),
              HasSubstr("item 3 of 'a:1,b:2,c': 'c' is not HOST:PORT"));
  EXPECT_THAT(ParseEndpointList("a:1,b:0").status().message(),
              HasSubstr("item 2 of 'a:1,b:0': 'b:0' has port 0"));
  // One item: its own error, no position.
  EXPECT_EQ(ParseEndpointList("c").status().message().find("item"),
            absl::string_view::npos);
  EXPECT_THAT(ParseHostList("a,,b").status().message(),
              HasSubstr("item 2 of 'a,,b' is empty"));
  EXPECT_EQ(*ParseHostList("a, b"), (std::vector<std::string>{"a", "b"}));
}

TEST(EndpointsTest, OneEndpointIsTheSessionsSeveralSpreadTheChannels) {
  SessionOptions o;
  ApplyEndpoints(*ParseEndpointList("a:1"), &o);
  EXPECT_EQ(o.host, "a");
  EXPECT_EQ(o.port, 1);
  EXPECT_TRUE(o.channel_endpoints.empty());
  ApplyEndpoints(*ParseEndpointList("a:1,b:2"), &o);
  EXPECT_EQ(o.host, "a");
  ASSERT_EQ(o.channel_endpoints.size(), 2u);
  EXPECT_EQ(o.channel_endpoints[0].host, "a");
  EXPECT_EQ(o.channel_endpoints[1].port, 2);
}

TEST(LinkSummaryTest, GroupsChannelsByEndpointInOrderOfFirstUse) {
  SessionStats s;
  s.channels.resize(5);
  const char* where[] = {"b:1", "a:1", "b:1", "a:1", ""};
  for (uint32_t c = 0; c < 5; ++c) {
    s.channels[c].channel = c;
    s.channels[c].endpoint = where[c];
    s.channels[c].payload_bytes = 100;
    s.channels[c].header_bytes = 10;
  }
  s.channels[3].lost = 1;
  const std::vector<LinkSummary> links = SummarizeLinks(s, 2.0);
  ASSERT_EQ(links.size(), 2u);  // a channel with no endpoint is in none
  EXPECT_EQ(links[0].endpoint, "b:1");
  EXPECT_EQ(links[0].channels, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(links[0].channels_lost, 0u);
  EXPECT_EQ(links[1].channels, (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(links[1].channels_lost, 1u);
  EXPECT_EQ(links[1].payload_bytes, 200u);
  EXPECT_EQ(links[1].bytes, 220u);
  EXPECT_DOUBLE_EQ(links[1].gb_per_s, 220 / 2.0 / 1e9);
  EXPECT_THAT(LinksTable(links), HasSubstr("a:1: channels 1,3 (1 lost), "));
  EXPECT_EQ(LinksJson(links)[1]["channels_lost"], 1);
  EXPECT_TRUE(SummarizeLinks(SessionStats{}, 1).empty());
  EXPECT_EQ(SummarizeLinks(s, 0)[0].gb_per_s, 0);
}

}  // namespace
}  // namespace ramferry::cli
