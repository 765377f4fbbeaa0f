// cluster.nodes parsing: accepted forms and one test per kind of error.
#include "ic/base/node_list.hpp"

#include <gtest/gtest.h>

#include <string>

namespace pgrac::ic {
namespace {

TEST(NodeList, ParsesIpv4Ipv6AndNamesWithSpaces) {
    std::string error;
    auto nodes = parse_node_list("1@127.0.0.1:7401, 2@[::1]:7402,3@db3.example:7403", &error);
    ASSERT_TRUE(nodes.has_value()) << error;
    ASSERT_EQ(nodes->size(), 3u);
    EXPECT_EQ((*nodes)[0].node_id, 1);
    EXPECT_EQ((*nodes)[0].host, "127.0.0.1");
    EXPECT_EQ((*nodes)[0].port, 7401);
    EXPECT_EQ((*nodes)[1].node_id, 2);
    EXPECT_EQ((*nodes)[1].host, "::1");  // brackets are syntax, not part of the host
    EXPECT_EQ((*nodes)[1].port, 7402);
    EXPECT_EQ((*nodes)[2].node_id, 3);
    EXPECT_EQ((*nodes)[2].host, "db3.example");
    EXPECT_EQ((*nodes)[2].port, 7403);

    EXPECT_EQ(find_node(*nodes, 2), &(*nodes)[1]);
    EXPECT_EQ(find_node(*nodes, 4), nullptr);
}

TEST(NodeList, EmptyAndBlankAreEmptyLists) {
    std::string error;
    for (const char* text : {"", "   ", " \t "}) {
        auto nodes = parse_node_list(text, &error);
        ASSERT_TRUE(nodes.has_value()) << error;
        EXPECT_TRUE(nodes->empty());
    }
}

TEST(NodeList, EdgeValuesAreAccepted) {
    std::string error;
    auto nodes = parse_node_list("  64@h-1_a:65535 ,\t1@[fe80::1%eth0]:1  ", &error);
    ASSERT_TRUE(nodes.has_value()) << error;
    ASSERT_EQ(nodes->size(), 2u);
    EXPECT_EQ((*nodes)[0].node_id, 64);
    EXPECT_EQ((*nodes)[0].port, 65535);
    EXPECT_EQ((*nodes)[1].host, "fe80::1%eth0");
    EXPECT_EQ((*nodes)[1].port, 1);
}

struct BadCase {
    const char* text;
    const char* want;  // the whole error message
};

class NodeListError : public ::testing::TestWithParam<BadCase> {};

TEST_P(NodeListError, NamesTheEntryAndTheProblem) {
    std::string error;
    EXPECT_FALSE(parse_node_list(GetParam().text, &error).has_value());
    EXPECT_EQ(error, GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    NodeList, NodeListError,
    ::testing::Values(
        BadCase{"1@a:1, x@h:1",
                "entry 2 (\"x@h:1\"): node id \"x\" is not an integer from 1 to 64"},
        BadCase{"-1@h:1", "entry 1 (\"-1@h:1\"): node id \"-1\" is not an integer from 1 to 64"},
        BadCase{"@h:1", "entry 1 (\"@h:1\"): node id \"\" is not an integer from 1 to 64"},
        BadCase{"0@h:1", "entry 1 (\"0@h:1\"): node id 0 is out of range: it must be from 1 to 64"},
        BadCase{"65@h:1",
                "entry 1 (\"65@h:1\"): node id 65 is out of range: it must be from 1 to 64"},
        BadCase{"99999999999999999999@h:1",
                "entry 1 (\"99999999999999999999@h:1\"): node id 99999999999999999999 is out of "
                "range: it must be from 1 to 64"},
        BadCase{"1@a:1,2h:2", "entry 2 (\"2h:2\"): missing '@' between node id and host"},
        BadCase{"1@host", "entry 1 (\"1@host\"): missing port: expected host:port"},
        BadCase{"1@host:", "entry 1 (\"1@host:\"): missing port after ':'"},
        BadCase{"1@[::1]", "entry 1 (\"1@[::1]\"): missing port: expected [address]:port"},
        BadCase{"1@[::1]7401", "entry 1 (\"1@[::1]7401\"): expected ':port' after ']'"},
        BadCase{"1@[::1:7401", "entry 1 (\"1@[::1:7401\"): the IPv6 address has no closing ']'"},
        BadCase{"1@[db3]:7401",
                "entry 1 (\"1@[db3]:7401\"): \"db3\" in brackets is not an IPv6 address"},
        BadCase{"1@::1:7401",
                "entry 1 (\"1@::1:7401\"): an IPv6 address must be written in brackets, e.g. "
                "[::1]:7401"},
        BadCase{"1@h:0", "entry 1 (\"1@h:0\"): port \"0\" is not an integer from 1 to 65535"},
        BadCase{"1@h:65536",
                "entry 1 (\"1@h:65536\"): port \"65536\" is not an integer from 1 to 65535"},
        BadCase{"1@h:80x", "entry 1 (\"1@h:80x\"): port \"80x\" is not an integer from 1 to 65535"},
        BadCase{"1@:7401", "entry 1 (\"1@:7401\"): the host is empty"},
        BadCase{"1@[]:7401", "entry 1 (\"1@[]:7401\"): the host is empty"},
        BadCase{"1@db 3:7401",
                "entry 1 (\"1@db 3:7401\"): host \"db 3\" may hold only letters, digits, '.', '-' "
                "and '_'"},
        BadCase{"1@a:1,,2@b:2", "entry 2 (\"\"): the entry is empty"},
        BadCase{"1@a:1,", "entry 2 (\"\"): the entry is empty"},
        BadCase{"1@a:1, 2@b:2, 1@c:3", "entry 3 (\"1@c:3\"): node id 1 is already used by entry 1"},
        BadCase{"1@a:1, 2@b:2, 3@b:2",
                "entry 3 (\"3@b:2\"): address b:2 is already used by entry 2"},
        BadCase{"1@DB3.example:7401,2@db3.EXAMPLE:7401",
                "entry 2 (\"2@db3.EXAMPLE:7401\"): address db3.EXAMPLE:7401 is already used by "
                "entry 1"},
        BadCase{"1@[::1]:7401,2@[0:0::1]:7401",
                "entry 2 (\"2@[0:0::1]:7401\"): address [0:0::1]:7401 is already used by entry "
                "1"}));

TEST(NodeList, SameHostOnAnotherPortIsFine) {
    std::string error;
    auto nodes = parse_node_list("1@127.0.0.1:7401,2@127.0.0.1:7402", &error);
    ASSERT_TRUE(nodes.has_value()) << error;
    EXPECT_EQ(nodes->size(), 2u);
}

}  // namespace
}  // namespace pgrac::ic
